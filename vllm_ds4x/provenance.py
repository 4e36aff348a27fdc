# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The ds4x provenance record of the installed vLLM wheel (pins, patches, overlay)."""

import importlib.metadata
import json
from typing import Any, cast

RECORD = "ds4x_provenance.json"


def record(package: str = "vllm") -> dict[str, Any] | None:
    """The record of the distribution that installed `package`, if ds4x built it."""
    for name in importlib.metadata.packages_distributions().get(package, []):
        text = importlib.metadata.distribution(name).read_text(RECORD)
        if text:
            return cast("dict[str, Any]", json.loads(text))
    return None
