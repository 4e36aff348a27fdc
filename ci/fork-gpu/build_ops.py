"""Compile the fork's own CUDA sources for the compiled ops its portable DeepSeek-V4 path
still calls (no Triton or torch form in the fork), with torch's extension builder, on
the GPU machine: the fused q-norm/RoPE/KV-insert of sparse attention, the indexer's
top-k, the indexer's K cache ops, and the fp8 activation quantisation of the block-fp8
linears. Only those ops are bound: their schemas and
implementations are taken from the fork's own binding file (csrc/libtorch_stable/
torch_bindings.cpp), every other statement of it is left out, so the library
defines nothing the harness's stand-ins (stubs/_C.py) define.

Usage: build_ops.py CSRC OUTDIR   -> OUTDIR/<lib>.so, loaded by load() in the engine process
(TORCH_CUDA_ARCH_LIST defaults to 9.0, the H200; the fork's own build flags for this library:
TORCH_TARGET_VERSION 2.11, USE_CUDA, ENABLE_FP8)."""

import os
import re
import sys
from pathlib import Path

NAME = "ds4x_dsv4_ops"
SOURCES = ["fused_deepseek_v4_qnorm_rope_kv_insert_kernel.cu", "sampler.cu", "topk.cu", "cache_kernels.cu",
           "quantization/w8a8/fp8/common.cu", "quantization/w8a8/fp8/per_token_group_quant.cu"]
OPS = {
    "_C": ["fused_deepseek_v4_qnorm_rope_kv_rope_quant_insert",
           "fused_deepseek_v4_qnorm_rope_kv_rope_full_cache_bf16_insert",
           "fused_deepseek_v4_qnorm_rope_kv_rope_full_cache_fp8_insert",
           "top_k_per_row_prefill", "top_k_per_row_decode", "persistent_topk",
           "per_token_group_fp8_quant", "per_token_group_fp8_quant_packed", "static_scaled_fp8_quant",
           "dynamic_scaled_fp8_quant", "dynamic_per_token_scaled_fp8_quant"],
    "_C_cache_ops": ["indexer_k_quant_and_cache", "cp_gather_indexer_k_quant_cache", "concat_mla_q",
                     "cp_gather_and_upconvert_fp8_kv_cache"],
}
FLAGS = ["-DTORCH_TARGET_VERSION=0x020B000000000000ULL", "-DUSE_CUDA", "-DENABLE_FP8"]
# torch's extension builder turns half/bf16 conversions off; vLLM's own build turns them back on
CUDA_FLAGS = [f"-U__CUDA_NO_{kind}__" for kind in ("HALF_OPERATORS", "HALF_CONVERSIONS", "BFLOAT16_CONVERSIONS",
                                                    "HALF2_OPERATORS")]


def statements(text: str, kind: str, name: str) -> str:
    """The one `ops.def(...)` or `ops.impl(...)` statement of op `name`."""
    pattern = (r'ops\.def\(\s*"' + re.escape(name) + r'\(.*?\);' if kind == "def"
               else r'ops\.impl\(\s*"' + re.escape(name) + r'",.*?\);')
    found = re.findall(pattern, text, re.S)
    if len(found) != 1:
        raise SystemExit(f"torch_bindings.cpp: {len(found)} {kind} statements of {name}, expected one")
    return found[0]


def binding(bindings: str) -> str:
    lines = ['#include "ops.h"', '#include "cuda_utils.h"',
             "#include <torch/csrc/stable/library.h>", ""]
    for namespace, names in OPS.items():
        lines += [f"STABLE_TORCH_LIBRARY_FRAGMENT({namespace}, ops) {{",
                  *("  " + statements(bindings, "def", n) for n in names), "}",
                  f"STABLE_TORCH_LIBRARY_IMPL({namespace}, CUDA, ops) {{",
                  *("  " + statements(bindings, "impl", n) for n in names), "}", ""]
    return "\n".join(lines)


def build(csrc: Path, out: Path) -> Path:
    from torch.utils import cpp_extension

    stable = csrc / "libtorch_stable"
    out.mkdir(parents=True, exist_ok=True)
    source = stable / f"{NAME}_bindings.cpp"  # beside ops.h, whose includes are relative
    source.write_text(binding((stable / "torch_bindings.cpp").read_text()))
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    cpp_extension.load(NAME, [str(source), *(str(stable / s) for s in SOURCES)], extra_cflags=["-O2", *FLAGS],
                       extra_cuda_cflags=["-O2", "--expt-relaxed-constexpr", "--extended-lambda", *FLAGS, *CUDA_FLAGS],
                       extra_include_paths=[str(csrc), str(stable)], build_directory=str(out),
                       extra_ldflags=["-lcuda"], is_python_module=False, verbose=False)  # the driver API
    return out / f"{NAME}.so"


def load(out: Path) -> None:
    import torch

    torch.ops.load_library(str(out / f"{NAME}.so"))


if __name__ == "__main__":
    print(build(Path(sys.argv[1]), Path(sys.argv[2])))
