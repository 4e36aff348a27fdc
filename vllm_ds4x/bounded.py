"""Counts, rates and JSON read from untrusted text with their bounds: one parse for every option and file that takes them."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_TEXT = 40  # longer values are cut in messages, and no count is this long
MAX_JSON_DEPTH = 32  # far deeper than any config.json, profile or speculative config
MAX_JSON_BYTES = 16 * 2**20  # far above any config.json or routing statistics
_WHOLE = re.compile(r"\+?[0-9]{1,18}")  # ASCII digits only: int() also takes '١٢' and '1_0'; isdigit() takes '²'


class BoundError(ValueError):
    """A value out of its range or not of its kind; the message names the value and the range."""


def _shown(text: str) -> str:
    return repr(text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "...")


def whole(text: str, low: int, high: int) -> int:
    """A whole number written in ASCII digits, in low..high."""
    found = _WHOLE.fullmatch(text.strip()) if len(text) <= MAX_TEXT else None
    value = int(found[0]) if found else None
    if value is None or not low <= value <= high:
        raise BoundError(f"{_shown(text)}: expected a whole number in {low}..{high}")
    return value


def rate(text: str, low: float, high: float) -> float:
    """A finite decimal number in [low, high] (NaN and inf are refused)."""
    try:
        value = float(text) if len(text) <= MAX_TEXT and text.strip().isascii() else math.nan
    except ValueError:
        value = math.nan
    if not low <= value <= high:  # NaN fails this too
        raise BoundError(f"{_shown(text)}: expected a number in [{low:g}, {high:g}]")
    return value


def _option(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """`parse` as an argparse type: its BoundError becomes argparse's one-line error."""
    def option(text: str) -> Any:
        try:
            return parse(text)
        except BoundError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return option


def count(low: int, high: int) -> Callable[[str], int]:
    """The argparse type of a whole-number option in low..high."""
    return _option(lambda text: whole(text, low, high))


def fraction(low: float = 0.0, high: float = 1.0) -> Callable[[str], float]:
    """The argparse type of a number option in [low, high]."""
    return _option(lambda text: rate(text, low, high))


def loads(text: str) -> Any:
    """JSON nested at most MAX_JSON_DEPTH deep, every number finite; BoundError
    names the field (a dotted path) that is not."""
    if len(text) > MAX_JSON_BYTES:
        raise BoundError(f"larger than {MAX_JSON_BYTES >> 20} MiB")
    try:
        value = json.loads(text, parse_constant=float)
    except RecursionError:
        raise BoundError(f"nested deeper than {MAX_JSON_DEPTH}") from None
    except ValueError as e:
        raise BoundError(str(e)[:150]) from None
    _check_tree(value)
    return value


def _check_tree(value: Any) -> None:
    """Depth and finite numbers, walked without recursion."""
    todo: list[tuple[Any, str, int]] = [(value, "", 0)]
    while todo:
        item, path, depth = todo.pop()
        if depth >= MAX_JSON_DEPTH and isinstance(item, (dict, list)):  # the outermost is at depth 0
            raise BoundError(f"nested deeper than {MAX_JSON_DEPTH} (at {path or 'the top'})")
        if isinstance(item, float) and not math.isfinite(item):
            raise BoundError(f"{path or 'the value'}: {item} is not a finite number")
        if isinstance(item, dict):
            todo.extend((v, f"{path}.{k}" if path else str(k), depth + 1) for k, v in item.items())
        elif isinstance(item, list):
            todo.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(item))


def read_json(path: Path) -> Any:
    """A JSON file as `loads` takes it: a regular file (a FIFO or a device would hold the read, or never
    end it), at most MAX_JSON_BYTES, UTF-8; BoundError says why not, without the path (the caller names it)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise BoundError("a folder; give the JSON file in it" if path.is_dir() else
                             "not a regular file (a pipe or a device); give a JSON file")
        with path.open("rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        raise BoundError("not found") from None
    except OSError as e:
        raise BoundError(str(e.strerror or e)) from None
    if len(data) > MAX_JSON_BYTES:
        raise BoundError(f"larger than {MAX_JSON_BYTES >> 20} MiB; give the JSON file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BoundError(f"byte {e.start} is not UTF-8; give a JSON file") from None
    return loads(text)
