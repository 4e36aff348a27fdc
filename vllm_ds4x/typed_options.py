"""Typed requests from parsed command-line options: the frozen dataclass of the options its fields name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    Request = TypeVar("Request", bound=DataclassInstance)
else:
    Request = TypeVar("Request")


def request_of(cls: type[Request], options: Mapping[str, Any]) -> Request:
    """`cls` from the options named as its fields (others ignored), each list as a tuple: a frozen request holds none."""
    values = {field.name: options[field.name] for field in fields(cls)}
    return cls(**{name: tuple(value) if isinstance(value, list) else value for name, value in values.items()})
