"""Stand-in for upstream vLLM 0.32.0's compiled vllm._C_stable_libtorch (placed at
vllm/_C_stable_libtorch.py; vllm/platforms/cuda.py imports it unconditionally).

Upstream registers every `_C` op from this one library (the fork from vllm._C). The
fork's stand-ins for those ops (stubs/_C.py, placed beside this as vllm/_C.py, which
upstream's CUDA platform never imports itself) serve as they are: where upstream changed
a schema (rms_norm and fused_add_rms_norm take an optional weight, csrc/torch_bindings.cpp),
they already register upstream's."""
import vllm._C  # noqa: F401  registers the `_C` ops (stubs/_C.py)
