"""ci/fork-gpu/build_ops.py, which compiles the fork's own CUDA sources for the ops the DeepSeek-V4
harness needs, and dsv4_model.py's choice of GPU-resident MoE layers: the parts that run without a
GPU (the binding file it writes from the fork's binding statements, the Marlin MoE kernels it asks
the fork's generator for, one source file per instantiation; which layers stay on the GPU and which
on lk_moe). The texts below are made up here in the fork's forms; the mirror-gated integration test
(tests/integration/test_fork_tree.py) runs the same steps on the fork's own files."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import load_script

HARNESS = Path(__file__).resolve().parents[2] / "ci" / "fork-gpu"

C_BINDINGS = """
STABLE_TORCH_LIBRARY_FRAGMENT(_C, ops) {
  ops.def(
      "alpha(Tensor! out, Tensor x) -> ()");
  ops.def("repack(Tensor w, SymInt k) -> Tensor");
  ops.def("other(Tensor x) -> ()");
}
STABLE_TORCH_LIBRARY_IMPL(_C, CUDA, ops) {
  ops.impl("alpha",
           TORCH_BOX(&alpha));
  ops.impl("other", TORCH_BOX(&other));
}
"""
MOE_BINDINGS = """
STABLE_TORCH_LIBRARY_FRAGMENT(_moe_C, m) {
  m.def("summed(Tensor input, Tensor! output) -> ()");
  m.def("batched_summed(Tensor input) -> ()");
  m.def(
      "gemm(Tensor! a, Tensor? c,"
      "int size_m) -> Tensor");
}
STABLE_TORCH_LIBRARY_IMPL(_moe_C, CUDA, m) {
  m.impl("summed", TORCH_BOX(&summed));
  m.impl("batched_summed", TORCH_BOX(&batched_summed));
}
"""


@pytest.fixture(scope="module")
def B() -> ModuleType:
    return load_script("ci/fork-gpu/build_ops.py")


@pytest.fixture
def M(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(HARNESS))  # dsv4_model imports e2e_model, its sibling
    return load_script("ci/fork-gpu/dsv4_model.py")


def library(B: ModuleType) -> object:
    return B.Library("lib", ("a.cu",), B._ops("_moe_C", "summed", bindings="moe.cpp")
                     + B._ops("_moe_C", "gemm", bindings="moe.cpp", impl=False)
                     + B._ops("_C", "repack", impl=False) + B._ops("_C", "alpha"), ("moe/moe_ops.h",))


def test_binding_takes_each_ops_statements_from_its_file_onto_one_handle(B: ModuleType) -> None:
    text = B.binding({"moe.cpp": MOE_BINDINGS, "torch_bindings.cpp": C_BINDINGS}, library(B))
    assert text.splitlines()[0] == '#include "moe/moe_ops.h"'
    moe, c = text.split("STABLE_TORCH_LIBRARY_FRAGMENT(_moe_C, ops) {")[1].split("STABLE_TORCH_LIBRARY_FRAGMENT(_C, ops) {")
    # defs of both _moe_C ops, the impl only of the one whose impl is in the binding file
    assert 'ops.def("summed(Tensor input' in moe and 'ops.def(\n      "gemm(Tensor! a' in moe
    assert 'ops.impl("summed", TORCH_BOX(&summed));' in moe and "gemm\", TORCH_BOX" not in moe
    assert "batched_summed" not in text and "other" not in text  # nothing the library does not bind
    assert 'ops.def("repack(Tensor w, SymInt k) -> Tensor");' in c
    assert c.count("ops.impl(") == 1 and "TORCH_BOX(&alpha)" in c  # repack registers its own impl
    assert " m." not in text  # every statement on the handle the library's blocks name


def test_binding_fails_on_a_missing_or_repeated_statement(B: ModuleType) -> None:
    with pytest.raises(SystemExit, match="0 def statements of gemm"):
        B.binding({"moe.cpp": MOE_BINDINGS.replace('"gemm(', '"gemm2('), "torch_bindings.cpp": C_BINDINGS}, library(B))
    with pytest.raises(SystemExit, match="2 impl statements of alpha"):
        B.binding({"moe.cpp": MOE_BINDINGS, "torch_bindings.cpp": C_BINDINGS + '  ops.impl("alpha", X);\n'},
                  library(B))


def test_the_dsv4_library_keeps_its_ops_and_marlin_binds_what_a_resident_mxfp4_layer_calls(B: ModuleType) -> None:
    assert B.NAME == "ds4x_dsv4_ops" and "persistent_topk" in B.OPS["_C"]
    assert "indexer_k_quant_and_cache" in B.OPS["_C_cache_ops"]
    assert B.bound(B.MARLIN) == ["moe_sum", "moe_align_block_size", "moe_wna16_marlin_gemm", "gptq_marlin_repack"]
    assert "-static-global-template-stub=false" in B.MARLIN.cuda_flags


GENERATED_HEAD = "// auto generated\n#include \"kernel.h\"\n\nnamespace MARLIN_NAMESPACE_NAME {\n\n"
FAKE_GENERATOR = '''
import os, sys
ARCH = sys.argv[1]
QUANT_CONFIGS = [
    {"b_type": "kU4", "thread_m_blocks": [1]},
    {"a_type": ["kBFloat16"], "b_type": "kFE2M1f", "s_type": "kFE8M0fnu", "thread_m_blocks": [0.5, 1, 2]},
    {"a_type": ["kFE4M3fn"], "b_type": "kFE2M1f", "c_type": ["kBFloat16"], "s_type": "kFE8M0fnu"},
]
HERE = os.path.dirname(__file__)


def remove_old_kernels():
    for name in os.listdir(HERE):
        if "kernel_" in name and name.endswith(".cu"):
            os.remove(os.path.join(HERE, name))


def generate_new_kernels():
    for i, config in enumerate(QUANT_CONFIGS):
        body = "\\n\\n".join(f"template __global__ void Marlin<{config['b_type']}, {m}, {ARCH}>"
                             "( MARLIN_KERNEL_PARAMS );" for m in config.get("thread_m_blocks", [1]))
        with open(os.path.join(HERE, f"sm80_kernel_{i}.cu"), "w") as f:
            f.write(HEAD + "\\n\\n" + body + "\\n\\n}\\n")
    with open(os.path.join(HERE, "kernel_selector.h"), "w") as f:
        f.write(str(len(QUANT_CONFIGS)))
'''


def fake_stable(B: ModuleType, root: Path) -> Path:
    folder = root / B.MARLIN_DIR
    folder.mkdir(parents=True)
    (folder / "generate_kernels.py").write_text(f"HEAD = {GENERATED_HEAD!r}\n" + FAKE_GENERATOR)
    (folder / "sm80_kernel_stale.cu").write_text("from an earlier build")
    (folder / f"{B.MARLIN_KERNEL_PREFIX}07.cu").write_text("from an earlier build")
    return root


def test_generate_marlin_asks_the_forks_generator_for_one_type_set_one_file_an_instantiation(
        B: ModuleType, tmp_path: Path) -> None:
    stable = fake_stable(B, tmp_path)
    argv = list(sys.argv)
    files = B.generate_marlin(stable, "9.0")
    assert sys.argv == argv  # the generator read its architectures from a borrowed argv
    folder = stable / B.MARLIN_DIR
    assert [f.name for f in files] == [f"{B.MARLIN_KERNEL_PREFIX}0{i}.cu" for i in range(3)]
    assert (folder / "kernel_selector.h").read_text() == "1"  # the selector names only that config's kernels
    assert sorted(p.name for p in folder.glob("*.cu")) == [f.name for f in files]  # stale and whole files gone
    for m, f in zip((0.5, 1, 2), files):
        text = f.read_text()
        assert text.startswith(GENERATED_HEAD) and text.endswith("\n}\n")
        assert text.count("template __global__") == 1 and f"Marlin<kFE2M1f, {m}, 9.0>" in text


def test_generate_marlin_fails_when_the_generator_has_no_single_matching_config(B: ModuleType, tmp_path: Path) -> None:
    stable = fake_stable(B, tmp_path)
    script = stable / B.MARLIN_GENERATOR
    script.write_text(script.read_text().replace('"s_type": "kFE8M0fnu", "thread_m_blocks"', '"s_type": "kX", "t"'))
    with pytest.raises(SystemExit, match="0 quant configs match"):
        B.generate_marlin(stable, "9.0")
    with pytest.raises(SystemExit, match="no template instantiation"):
        B.split_instantiations("// nothing here\n")


@pytest.mark.parametrize(("value", "layers", "expected"), [
    ("0,1", 3, [0, 1]), ("none", 3, []), ("", 3, []), ("0-2", 10, [0, 1, 2]), (" 1 , 0 ", 3, [0, 1])])
def test_resident_layers_accepts_the_users_grammar(M: ModuleType, value: str, layers: int, expected: list[int]) -> None:
    assert M.resident_layers(value, layers) == expected


@pytest.mark.parametrize(("value", "layers", "why"), [
    ("0-2", 3, "no lk_moe layer"), ("all", 3, "name the layers"), ("auto", 3, "name the layers"),
    ("3", 3, "layers 0-2"), ("0,x", 3, "DSV4_RESIDENT")])
def test_resident_layers_refuses_what_leaves_no_lk_moe_layer_or_is_not_a_layer(
        M: ModuleType, value: str, layers: int, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        M.resident_layers(value, layers)


def test_the_default_keeps_the_users_layers_and_one_lk_moe_layer(M: ModuleType) -> None:
    assert M.RESIDENT == "0,1" and M.resident_layers(M.RESIDENT, M.LAYERS) == [0, 1]
    assert M.CONFIG["num_hash_layers"] == 1  # layer 0, hash-routed, is one of them


def test_moe_layers_splits_the_forks_answers_into_target_and_draft(M: ModuleType) -> None:
    placement = {"model.layers.0.ffn.experts": True, "model.layers.1.ffn.experts": True,
                 "model.layers.2.ffn.experts": False, "model.layers.3.ffn.experts": False}
    assert M.moe_layers(placement, 3) == {"resident": [0, 1], "lk_moe": [2], "draft_resident": [], "draft_lk_moe": [3]}
    with pytest.raises(ValueError, match="no layer index"):
        M.moe_layers({"experts": True}, 3)


def test_marlin_checks_reference_reads_mxfp4_low_nibble_first_with_e8m0_scales() -> None:
    """marlin_check.py's torch reference: the byte 0xA1 holds 0.5 (code 1) then -1.0 (code 10); a scale
    byte b multiplies a group of 32 by 2^(b-127)."""
    import torch

    check = load_script("ci/fork-gpu/marlin_check.py")
    codes = torch.full((1, 1, 16), 0xA1, dtype=torch.uint8)
    out = check.dequant(codes, torch.tensor([[[128]]], dtype=torch.uint8))
    assert out.shape == (1, 1, 32) and out[0, 0, :4].tolist() == [1.0, -2.0, 1.0, -2.0]


def test_each_library_builds_in_a_folder_of_its_own(B: ModuleType, tmp_path: Path) -> None:
    """The extension builder keeps one build.ninja a folder: Marlin beside the dsv4 ops would replace it."""
    assert B.folder(tmp_path, B.DSV4) == tmp_path  # where every dsv4 case has loaded it from
    assert B.folder(tmp_path, B.MARLIN) == tmp_path / "ds4x_marlin_moe_ops"
