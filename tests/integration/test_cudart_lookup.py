"""FlashInfer's find_loaded_library over a table of /proc/self/maps contents:
the pinned 0.6.12 function (to show the bug) and ours, from the built wheel."""

from __future__ import annotations

import ast
import ctypes
import io
from pathlib import Path
from types import ModuleType

import pytest

from ds4x.build import pins, sources
from ds4x.deploy.doctor import load_upstream_file
from tests.integration.conftest import extract

pytestmark = pytest.mark.network

REAL = "/usr/local/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13"


def line(path: str, address: str = "7f1c2e000000-7f1c2e0c4000", perms: str = "r-xp", inode: str = "1837465") -> str:
    return f"{address} {perms} 00000000 fd:01 {inode:<26}{path}\n"


ANON = "7ffd5a1b2000-7ffd5a1d3000 rw-p 00000000 00:00 0                          [stack]\n"
HEAP = "55d0c8a3e000-55d0c8c61000 rw-p 00000000 00:00 0                          [heap]\n"
BARE = "7f1c2d000000-7f1c2d200000 rw-p 00000000 00:00 0 \n"

# (maps content, what 0.6.12 does, what the patched function returns)
CASES = {
    "only the real library": ([ANON, line(REAL)], REAL, REAL),
    "stub mapped first": ([line("/opt/venv/lib/python3.12/site-packages/tilelang/lib/libcudart_stub.so", "7f0a00000000-7f0a00004000"), line(REAL)],
                          "/opt/venv/lib/python3.12/site-packages/tilelang/lib/libcudart_stub.so", REAL),
    "libstub_cudart is never libcudart": ([line("/x/tilelang/lib/libstub_cudart.so"), line(REAL)], REAL, REAL),
    "static helper first": ([line("/usr/lib/libcudart_static_helper.so"), line(REAL)], "/usr/lib/libcudart_static_helper.so", REAL),
    "directory containing the name": ([line("/opt/libcudart-tools/lib/libfoo.so.1"), line(REAL)], AssertionError, REAL),
    "name-mangled with hash": ([HEAP, line("/site/torch/lib/libcudart-9335f6a2.so.12")],
                               "/site/torch/lib/libcudart-9335f6a2.so.12", "/site/torch/lib/libcudart-9335f6a2.so.12"),
    "mangled name that is not a hash": ([line("/x/libcudart-stub.so"), line(REAL)], "/x/libcudart-stub.so", REAL),
    "bare .so": ([line("/usr/local/cuda/lib64/libcudart.so")], "/usr/local/cuda/lib64/libcudart.so", "/usr/local/cuda/lib64/libcudart.so"),
    "deleted mapping": ([line("/usr/local/cuda/lib64/libcudart.so.13.0.96 (deleted)")],
                        "/usr/local/cuda/lib64/libcudart.so.13.0.96 (deleted)", "/usr/local/cuda/lib64/libcudart.so.13.0.96"),
    "anonymous mappings only": ([ANON, HEAP, BARE], None, None),
    "not loaded": ([line("/usr/lib/x86_64-linux-gnu/libc.so.6")], None, None),
}


def load(wheel: Path, dest: Path) -> ModuleType:
    """Import cuda_ipc.py from a wheel; it resolves libcudart at import time."""
    return load_upstream_file(f"cuda_ipc_{dest.parent.name}", extract(wheel, "flashinfer/comm/cuda_ipc.py", dest))


@pytest.fixture(scope="module")
def modules(flashinfer_wheels: tuple[Path, Path], real_libcudart: Path,
            tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, ModuleType]:
    ctypes.CDLL(str(real_libcudart))  # as torch would: no stub here, both imports succeed
    upstream, built = flashinfer_wheels
    root = tmp_path_factory.mktemp("cuda_ipc")
    return load(upstream, root / "pinned" / "cuda_ipc.py"), load(built, root / "patched" / "cuda_ipc.py")


def lookup(module: ModuleType, lines: list[str], monkeypatch: pytest.MonkeyPatch) -> object:
    """Run the real function with /proc/self/maps replaced by the table row."""
    monkeypatch.setattr(module, "open", lambda *a, **k: io.StringIO("".join(lines)), raising=False)
    try:
        return module.find_loaded_library("libcudart")
    except AssertionError:
        return AssertionError


@pytest.mark.parametrize("case", CASES)
def test_pinned_function_shows_the_bug(case: str, modules: tuple[ModuleType, ModuleType], monkeypatch: pytest.MonkeyPatch) -> None:
    lines, pinned, _ = CASES[case]
    assert lookup(modules[0], lines, monkeypatch) == pinned


@pytest.mark.parametrize("case", CASES)
def test_patched_function_matches_the_file_name(case: str, modules: tuple[ModuleType, ModuleType], monkeypatch: pytest.MonkeyPatch) -> None:
    lines, _, patched = CASES[case]
    assert lookup(modules[1], lines, monkeypatch) == patched


@pytest.mark.parametrize("case", CASES)
def test_newest_release_matches_the_file_name_its_own_way(case: str, newest_module: ModuleType,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """What `check --newest` reports as the lookup patch fixed upstream (differently) does
    what the patch does, in the newest release's own function: it matches the file name.
    The one difference: a mapping of a replaced file (" (deleted)") is no match there."""
    lines, _, patched = CASES[case]
    assert lookup(newest_module, lines, monkeypatch) == (None if case == "deleted mapping" else patched)


@pytest.fixture(scope="module")
def newest_module(modules: tuple[ModuleType, ModuleType], repo_pins: pins.Pins, settings: sources.Settings,
                  tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """cuda_ipc.py of the newest FlashInfer release on the index (libcudart loaded by `modules`)."""
    from ds4x.build import roll

    target = repo_pins.get("flashinfer")
    assert target.wheel
    base = roll.fetch_release(target, "wheel", sources.release(target.wheel), settings)
    return load_upstream_file("cuda_ipc_newest", base.repo / "flashinfer/comm/cuda_ipc.py")


def vllm_lookup(tree: Path) -> ModuleType:
    """vLLM's own find_loaded_library, compiled alone from the pinned tree with the helper it
    calls where it has one (0.34.0: find_loaded_libraries); vllm.utils imports the engine, the
    functions need only `open`."""
    source = (tree / "vllm/utils/system_utils.py").read_text()
    names = ("find_loaded_library", "find_loaded_libraries")
    nodes: list[ast.stmt] = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert "find_loaded_library" in {n.name for n in nodes if isinstance(n, ast.FunctionDef)}
    module = ModuleType("vllm_system_utils")
    exec(compile(ast.Module(body=nodes, type_ignores=[]), "system_utils.py", "exec"), module.__dict__)
    return module


HIJACKS = ("stub mapped first", "libstub_cudart is never libcudart", "static helper first",
           "directory containing the name", "name-mangled with hash", "only the real library")


FORK_URL = "https://github.com/guqiong96/Lvllmds4-x"
NO_MIRROR = f"DS4X_MIRRORS does not map {FORK_URL}; GitHub is unreachable here"
TREES = [
    pytest.param("vllm", id="vllm-sdist"),
    pytest.param("vllm-cpu-engine", id="vllm-cpu-engine-sdist"),
    pytest.param("lvllmds4-x", id="lvllmds4-x", marks=[
        pytest.mark.mirror, pytest.mark.skipif(FORK_URL not in sources.parse_mirrors([]), reason=NO_MIRROR)]),
]


@pytest.mark.parametrize("target", TREES)
@pytest.mark.parametrize("case", HIJACKS)
def test_vllm_copies_are_already_fixed(target: str, case: str, settings: sources.Settings, repo_pins: pins.Pins,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream vLLM and the fork at their pins already match the file name (no patch needed)."""
    base = sources.fetch(repo_pins.get(target), settings_with_mirrors(settings))
    lines, _, patched = CASES[case]
    assert lookup(vllm_lookup(base.repo), lines, monkeypatch) == patched


def settings_with_mirrors(settings: sources.Settings) -> sources.Settings:
    return sources.Settings(cache=settings.cache, mirrors=sources.parse_mirrors([]))


@pytest.mark.parametrize("target", TREES)
def test_no_other_copy_reads_proc_maps(target: str, settings: sources.Settings, repo_pins: pins.Pins) -> None:
    base = sources.fetch(repo_pins.get(target), settings_with_mirrors(settings))
    readers = sorted(p.relative_to(base.repo).as_posix() for p in (base.repo / "vllm").rglob("*.py")
                     if "/proc/self/maps" in p.read_text(errors="replace"))
    # vLLM 0.34.0 has two more, neither a libcudart lookup: vmm_driver.py finds libcuda (the
    # driver) by its file name, ngram_embedding.py the mapping of a pointer
    others = ["vllm/models/qwen4_exp/nvidia/ngram_embedding.py", "vllm/utils/vmm_driver.py"] if target == "vllm" else []
    assert readers == sorted(["vllm/utils/system_utils.py", *others])
