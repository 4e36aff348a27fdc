"""The core (ds4x/core) is imported by name here and shipped by the vllm-common overlay into vllm/ds4x/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ds4x import overlay
from ds4x.checkout import HOME
from ds4x.errors import InputError

CORE = Path(overlay.__file__).parent / "core"


def test_the_vllm_common_overlay_carries_every_core_module_into_vllm_ds4x() -> None:
    files = overlay.overlay_files(HOME.layout.overlays, ("vllm-common",))
    fork = overlay.overlay_files(HOME.layout.overlays, ("lvllmds4-x",))
    modules = {p.name for p in CORE.glob("*.py") if p.name != "__init__.py"}
    assert {f"vllm/ds4x/{name}" for name in modules - overlay.FORK_ONLY} <= set(files)
    assert {f"vllm/ds4x/{name}" for name in overlay.FORK_ONLY} <= set(fork)  # the fork's runtime alone uses these
    assert not {f"vllm/ds4x/{name}" for name in overlay.FORK_ONLY} & set(files)
    assert files["vllm/ds4x/draft_depth.py"] == CORE / "draft_depth.py"
    assert files["vllm/ds4x/__init__.py"] != CORE / "__init__.py"  # vllm.ds4x's own, not the core's
    assert not set(files) & set(fork)  # no module twice


def test_a_core_module_that_an_overlay_also_has_is_refused(tmp_path: Path) -> None:
    (tmp_path / "overlay/vllm-common/vllm/ds4x").mkdir(parents=True)
    (tmp_path / "overlay/vllm-common/vllm/ds4x/draft_depth.py").write_text("")
    (tmp_path / "ds4x/core").mkdir(parents=True)
    (tmp_path / "ds4x/core/draft_depth.py").write_text("")
    with pytest.raises(InputError, match="overlay file vllm/ds4x/draft_depth.py is in two overlays"):
        overlay.overlay_files(tmp_path / "overlay", ("vllm-common",))


@pytest.mark.parametrize("path", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_core_modules_import_each_other_relatively_and_never_vllm(path: Path) -> None:
    """So they run the same as ds4x.core and as the wheel's vllm.ds4x, and import without torch: only
    a function may import it (measure's timing worker, in the Python with lk_moe)."""
    tree = ast.parse(path.read_text())
    in_functions = {id(node) for function in ast.walk(tree) if isinstance(function, ast.FunctionDef)
                    for node in ast.walk(function)}
    for node in ast.walk(tree):
        forbidden = ("vllm", "ds4x") if id(node) in in_functions else ("vllm", "ds4x", "torch")
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            assert not (node.module or "").startswith(forbidden), (path.name, node.module)
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith(forbidden) for a in node.names), path.name
