"""The engine library (vllm_ds4x) is one package, imported by its name everywhere, and its layers
import one way (docs/layout.md): shared modules <- depth, moe <- measure <- hooks; only the hooks
import vLLM or torch at their top; nothing in it imports the tool, and the tool never imports the
hooks. The tool imports one way too: shared modules <- build <- deploy <- cli."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import vllm_ds4x
from ds4x.build import overlay
from ds4x.checkout import HOME
from ds4x.errors import InputError

PACKAGE = Path(vllm_ds4x.__file__).parent
TOOL = HOME.root / "ds4x"
LAYER = {"depth": 1, "moe": 1, "measure": 2, "hooks": 3, "__main__": 4}
"""a module's layer by its first name under vllm_ds4x (0: the shared modules at the top)"""


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYER.get(parts[1], 0) if len(parts) > 1 else 0


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


def imports(path: Path, top_only: bool = False) -> set[str]:
    """Absolute modules `path` imports (`top_only`: outside any function)."""
    tree = ast.parse(path.read_text())
    inside = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f)} if top_only else set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in inside:
            continue
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import; import vllm_ds4x by name"
            found |= {node.module or ""} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_the_overlay_is_the_package_itself_under_its_own_name() -> None:
    files = overlay.overlay_files(HOME.root, ("vllm_ds4x",))
    assert files == {path.relative_to(HOME.root).as_posix(): path for path in MODULES}
    assert files["vllm_ds4x/depth/policy.py"] == PACKAGE / "depth" / "policy.py"


def test_an_overlay_that_is_not_a_package_is_refused(tmp_path: Path) -> None:
    (tmp_path / "vllm_ds4x").mkdir()
    with pytest.raises(InputError, match="overlay package 'vllm_ds4x' not found"):
        overlay.overlay_files(tmp_path, ("vllm_ds4x",))


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_each_module_imports_only_its_own_layer_or_below(path: Path) -> None:
    name = module_name(path)
    ours = {m for m in imports(path) if m.startswith("vllm_ds4x.")}
    for imported in ours:
        same_package = imported.split(".")[:2] == name.split(".")[:2]
        assert same_package or layer(imported) < layer(name) or layer(imported) == 0, (name, imported)
    foreign = imports(path) - ours - {"vllm_ds4x"}
    assert not {m for m in foreign if m.split(".")[0] in {"ds4x", "engine", "bench", "tests"}}, name


@pytest.mark.parametrize("path", [p for p in MODULES if layer(module_name(p)) < LAYER["hooks"]],
                         ids=module_name)
def test_below_the_hooks_nothing_imports_vllm_or_torch_at_its_top(path: Path) -> None:
    """So the tool, bench/ and the tests import them without an engine (only a function may import
    torch: measure's worker, in the Python with lk_moe)."""
    top = imports(path, top_only=True)
    assert not {m for m in top if m.split(".")[0] in {"vllm", "torch"}}, module_name(path)


@pytest.mark.parametrize("path", sorted(TOOL.rglob("*.py")), ids=lambda p: p.name)
def test_the_tool_never_imports_the_hooks(path: Path) -> None:
    assert not {m for m in imports(path) if m.startswith(("vllm_ds4x.hooks", "vllm_ds4x.__main__"))}, path.name


def test_no_module_is_loaded_by_path_or_made_up() -> None:
    """Our modules are imported by name: no spec_from_file_location or hand-made package over them."""
    checked = [*MODULES, *TOOL.rglob("*.py"), *(HOME.root / "tests").rglob("*.py"), *(HOME.root / "bench").rglob("*.py"),
               *(HOME.root / "engine").rglob("*.py")]
    for path in checked:
        text = path.read_text()
        if "spec_from_file_location" in text:
            # FlashInfer's cuda_ipc.py (its package __init__ compiles kernels), the checkout's scripts, this test
            assert "cuda_ipc" in text or path.name in {"scripts.py", "test_layering.py"}, path
        assert not re.search(r"ModuleType\([\"'](vllm|vllm_ds4x)[\"'.]", text), path


TOOL_LAYER = {"build": 1, "deploy": 2, "cli": 3}
"""a tool module's layer by its first name under ds4x (0: the shared modules at the top)"""


def tool_module(path: Path) -> str:
    return ".".join(path.relative_to(HOME.root).with_suffix("").parts).removesuffix(".__init__")


def tool_layer(module: str) -> int:
    parts = module.split(".")
    return TOOL_LAYER.get(parts[1], 0) if len(parts) > 1 else 0


@pytest.mark.parametrize("path", sorted(TOOL.rglob("*.py")), ids=tool_module)
def test_the_tool_imports_one_way(path: Path) -> None:
    """shared <- build <- deploy <- cli; deploy takes only the cache folder (sources) from build."""
    name = tool_module(path)
    for imported in {m for m in imports(path) if m.startswith("ds4x.")}:
        same_package = imported.split(".")[:2] == name.split(".")[:2]
        assert same_package or tool_layer(imported) in (0, *range(tool_layer(name))), (name, imported)
        if tool_layer(name) == TOOL_LAYER["deploy"] and tool_layer(imported) == TOOL_LAYER["build"]:
            assert imported in {"ds4x.build", "ds4x.build.sources"}, (name, imported)
