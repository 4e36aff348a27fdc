"""ci/fork-gpu/prepare_fork.py, which makes a patched vllm/ tree run on the GPU machine without its
compiled extensions, per target: the fork (lvllmds4-x, unchanged: its four stand-ins, its edits, its
dist-info) and upstream vLLM 0.32.0 or 0.34.0 (vllm: the `_C` ops registered from a _C_stable_libtorch stand-in,
upstream's own _version kept, no _moe_C stand-in, a vllm dist-info the CUDA probe accepts). The
upstream edits are checked against the real pinned sdist with our series applied."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ds4x.cli import main as ds4x
from tests.scripts import load_script

HARNESS = Path(__file__).resolve().parents[2] / "ci" / "fork-gpu"


def load() -> ModuleType:
    return load_script("ci/fork-gpu/prepare_fork.py")


P = load()


def fake_tree(root: Path, edits: list[tuple[str, str, str]], release: str | None = "0.32.0") -> Path:
    """A vllm/ tree holding each edit's text once, between other lines, and an upstream release's _version.py."""
    for rel, old, _ in edits:
        path = root / "vllm" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# before\n" + old + "\n# after\n")
    if release:
        (root / "vllm" / "_version.py").write_text(f"__version__ = version = '{release}'\n")
    return root


@pytest.mark.parametrize("target, release", [("lvllmds4-x", None), ("vllm", "0.32.0"), ("vllm", "0.34.0")])
def test_edits_apply_once_and_again_is_a_no_op(tmp_path: Path, target: str, release: str | None) -> None:
    edits = P.UPSTREAM_EDITS[release] if release else P.FORK_EDITS
    tree = fake_tree(tmp_path / "tree", edits, release)
    P.main(tree, tmp_path / "site", target)
    edited = {rel: (tree / "vllm" / rel).read_text() for rel, _, _ in edits}
    if release:
        assert (tmp_path / "site" / f"vllm-{release}.dist-info").is_dir()
    for rel, _, new in edits:
        assert new in edited[rel] and edited[rel].count("ds4x GPU harness") == 1, rel
    P.main(tree, tmp_path / "site", target)  # setup.sh may run on a tree already prepared
    assert edited == {rel: (tree / "vllm" / rel).read_text() for rel, _, _ in edits}


def test_the_fork_keeps_its_stand_ins_and_dist_info(tmp_path: Path) -> None:
    tree = fake_tree(tmp_path / "tree", P.FORK_EDITS, release=None)
    P.main(tree, tmp_path / "site")  # the default target
    assert {p.name for p in (tree / "vllm").glob("*.py")} == {
        "_C.py", "_C_stable_libtorch.py", "_moe_C_stable_libtorch.py", "_version.py"}
    info = tmp_path / "site" / "lvllmds4_x-0.23.1.dev0.dist-info"
    assert (info / "METADATA").read_text() == (
        "Metadata-Version: 2.1\nName: lvllmds4-x\nVersion: 0.23.1.dev0+gb7f99cd.cu130\n")
    assert (info / "RECORD").read_text() == "lvllmds4_x-0.23.1.dev0.dist-info/METADATA,,\n"


def test_upstream_gets_its_own_stand_ins_and_a_cuda_vllm_dist_info(tmp_path: Path) -> None:
    tree = fake_tree(tmp_path / "tree", P.UPSTREAM_EDITS["0.32.0"])
    P.main(tree, tmp_path / "site", "vllm")
    assert {p.name for p in (tree / "vllm").glob("*.py")} == {"_C.py", "_C_stable_libtorch.py", "_version.py"}
    assert (tree / "vllm" / "_version.py").read_text() == "__version__ = version = '0.32.0'\n"
    stable = (tree / "vllm" / "_C_stable_libtorch.py").read_text()
    assert stable == (HARNESS / "stubs" / "upstream" / "_C_stable_libtorch.py").read_text()
    assert "import vllm._C" in stable
    metadata = (tmp_path / "site" / "vllm-0.32.0.dist-info" / "METADATA").read_text()
    assert "Name: vllm\nVersion: 0.32.0+cu130\n" in metadata and "cpu" not in metadata  # upstream's CUDA probe


def test_a_missing_text_names_its_file(tmp_path: Path) -> None:
    tree = fake_tree(tmp_path / "tree", P.UPSTREAM_EDITS["0.32.0"])
    (tree / "vllm" / "vllm_flash_attn" / "__init__.py").write_text("# another version\n")
    with pytest.raises(AssertionError, match="vllm_flash_attn/__init__.py"):
        P.main(tree, tmp_path / "site", "vllm")


UPSTREAM_OPS = """
import torch
import vllm._C_stable_libtorch  # what vllm/platforms/cuda.py imports
ops = torch.ops._C
for name in ("rms_norm", "fused_add_rms_norm"):
    assert "Tensor? weight" in str(getattr(ops, name).default._schema), name  # upstream's schema
for name in ("silu_and_mul", "weak_ref_tensor", "get_cuda_view_from_cpu_tensor", "rotary_embedding",
             "cutlass_scaled_mm_supports_fp8"):
    getattr(ops, name).default  # the fork's stand-ins, registered from here
x = torch.randn(3, 8, dtype=torch.bfloat16)
out = torch.empty_like(x)
ops.rms_norm(out, x, None, 1e-6)
ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)
assert torch.equal(out, ref)
ops.static_scaled_fp8_quant.default  # named by vllm/compilation's pattern tables at import: declared
try:
    ops.silu_and_mul_quant()
    raise SystemExit("a declared-only op ran")
except NotImplementedError as e:
    assert "no compiled kernel" in str(e), e
print("ok")
"""


def test_upstream_stand_in_registers_the_ops_with_upstreams_schemas(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="runs the stand-in schemas in torch, which this Python lacks")
    tree = fake_tree(tmp_path / "tree", P.UPSTREAM_EDITS["0.32.0"])
    (tree / "vllm" / "__init__.py").write_text("")
    P.main(tree, tmp_path / "site", "vllm")
    done = subprocess.run([sys.executable, "-c", UPSTREAM_OPS], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(tree)})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_an_upstream_release_without_edits_is_refused_by_name(tmp_path: Path) -> None:
    tree = fake_tree(tmp_path / "tree", P.UPSTREAM_EDITS["0.32.0"], release="0.35.0")
    with pytest.raises(SystemExit, match=r"upstream release 0\.35\.0; the GPU harness's stand-ins know 0\.32\.0, 0\.34\.0"):
        P.main(tree, tmp_path / "site", "vllm")


@pytest.mark.network
@pytest.mark.parametrize("target, release", [("vllm-cpu-engine", "0.32.0"), ("vllm", "0.34.0")])
def test_upstream_edits_apply_to_the_pinned_sdist_with_our_series(tmp_path: Path, target: str, release: str) -> None:
    tree = tmp_path / "vllm-gpu"
    # make_carry.sh applies the CPU engine target (0.32.0), or with UPSTREAM=vllm the series' own (0.34.0)
    assert ds4x(["apply", "--target", target, "--dir", str(tree), "-q"]) == 0
    assert P.upstream_release(tree / "vllm") == release
    for rel, old, _ in P.UPSTREAM_EDITS[release]:
        assert (tree / "vllm" / rel).read_text().count(old) == 1, rel
    P.main(tree, tmp_path / "site", "vllm")
    cuda = (tree / "vllm" / "platforms" / "cuda.py").read_text()
    assert "\nimport vllm._C_stable_libtorch  # noqa\n" in cuda  # the module the stand-in replaces
    assert "import vllm._C " not in cuda and "import vllm._C\n" not in cuda  # upstream's CUDA never imports _C
