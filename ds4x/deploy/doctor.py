"""`doctor`: what an installed environment would do at start-up, pasteable into a bug report.

Which libcudart FlashInfer's and vLLM's `find_loaded_library` resolve in this
process, whether that file exports cudaDeviceReset (the symbol whose absence
is the start-up crash), every mapped file that looks like a CUDA runtime, and
the provenance of installed ds4x wheels.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import json
import platform
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from ds4x.checkout import PROVENANCE

# Where each project keeps its lookup. FlashInfer's module is loaded from its
# file (its package __init__ compiles kernels); it resolves libcudart at import,
# so a hijack shows as that import failing with the user's error.
LOOKUPS = {"flashinfer": "flashinfer/comm/cuda_ipc.py", "vllm": "vllm.utils.system_utils"}


def load_upstream_file(name: str, path: Path) -> ModuleType:
    """Import one upstream file as module `name`, without its package's __init__ (FlashInfer's
    compiles kernels). Only for files of the projects we check; our own modules import by name."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def installed_provenance() -> list[dict[str, Any]]:
    records = []
    for dist in importlib.metadata.distributions():
        text = dist.read_text(PROVENANCE)
        if text:
            records.append(json.loads(text))
    return sorted(records, key=lambda r: r.get("project", ""))


def exports(path: str, symbol: str) -> bool | str:
    try:
        return hasattr(ctypes.CDLL(path), symbol)
    except OSError as e:
        return f"cannot load: {e}"


def resolve(package: str, lib: str = "libcudart") -> dict[str, Any]:
    """What `package`'s own find_loaded_library returns here, and whether it works."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return {"package": package, "status": "not installed"}
    where = LOOKUPS[package]
    try:
        if where.endswith(".py"):
            module = load_upstream_file(f"_ds4x_doctor_{package}", Path(next(iter(spec.submodule_search_locations))).parent / where)
        else:
            module = importlib.import_module(where)
        found = module.find_loaded_library(lib)
    except Exception as e:  # report, never crash the report
        return {"package": package, "status": f"lookup failed: {type(e).__name__}: {e}"}
    result: dict[str, Any] = {"package": package, "resolves": found}
    if found:
        result["exports cudaDeviceReset"] = exports(found, "cudaDeviceReset")
    return result


def cudart_mappings() -> list[str]:
    with open("/proc/self/maps") as f:
        paths = {line[line.find("/") :].strip() for line in f if "/" in line and "cudart" in line}
    return sorted(paths)


def preload(import_torch: bool = True, libraries: tuple[str, ...] = ()) -> list[str]:
    """Map what the application would: torch's CUDA runtime, then any extra library."""
    notes = []
    if import_torch:
        try:
            import torch  # noqa: F401  (maps libcudart for CUDA builds)
        except ImportError as e:
            notes.append(f"torch not importable: {e}")
    for lib in libraries:
        try:
            ctypes.CDLL(lib)
        except OSError as e:
            notes.append(f"cannot load {lib}: {e}")
    return notes


def report(import_torch: bool = True, libraries: tuple[str, ...] = ()) -> str:
    notes = preload(import_torch, libraries)
    data = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "notes": notes,
        "cudart mappings": cudart_mappings(),
        "lookups": [resolve(p) for p in LOOKUPS],
        "ds4x wheels": installed_provenance(),
    }
    return json.dumps(data, indent=2, default=str)
