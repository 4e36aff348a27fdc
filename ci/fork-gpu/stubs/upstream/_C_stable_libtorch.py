"""Stand-in for upstream vLLM 0.32.0's compiled vllm._C_stable_libtorch (placed at
vllm/_C_stable_libtorch.py; vllm/platforms/cuda.py imports it unconditionally).

Upstream registers every `_C` op from this one library (the fork from vllm._C). The
fork's stand-ins for those ops (stubs/_C.py, placed beside this as vllm/_C.py, which
upstream's CUDA platform never imports itself) serve as they are: where upstream changed
a schema (rms_norm and fused_add_rms_norm take an optional weight, csrc/torch_bindings.cpp),
they already register upstream's."""
import torch
import vllm._C  # noqa: F401  registers the `_C` ops (stubs/_C.py)

# Ops that upstream's vllm/compilation/ names at import (its fusion passes' pattern tables, imported by
# the attention selector under adaptive verification) and no case calls: declared as upstream's own
# CPU build declares the CUDA-only ones (csrc/torch_bindings.cpp's placeholder_op: no arguments), so a
# look-up succeeds and a call fails loudly.
# Those it looks up only behind hasattr (per_token_group_fp8_quant, scaled_fp4_quant, ...) stay missing.
IMPORTED_ONLY = (
    "static_scaled_fp8_quant", "dynamic_scaled_fp8_quant", "dynamic_per_token_scaled_fp8_quant",
    "rotary_embedding", "fused_qk_norm_rope", "rms_norm_static_fp8_quant", "fused_add_rms_norm_static_fp8_quant",
    "rms_norm_dynamic_per_token_quant", "silu_and_mul_quant", "silu_and_mul_per_block_quant")
_lib = torch.library.Library("_C", "FRAGMENT")


def _no_kernel(name: str):
    def call(*args, **kwargs):
        raise NotImplementedError(f"torch.ops._C.{name}: no compiled kernel in the GPU harness (stubs/upstream)")
    return call


for _name in IMPORTED_ONLY:
    if not hasattr(torch.ops._C, _name):
        _lib.define(f"{_name}() -> ()")
        _lib.impl(_name, _no_kernel(_name), "CompositeExplicitAutograd")
