"""Stand-in for upstream vLLM 0.32.0's compiled vllm._C_stable_libtorch (placed at
vllm/_C_stable_libtorch.py; vllm/platforms/cuda.py imports it unconditionally).

Upstream registers every `_C` op from this one library (the fork from vllm._C). The
fork's stand-ins for those ops (stubs/_C.py, placed beside this as vllm/_C.py, which
upstream's CUDA platform never imports itself) are registered from here, after the
ops whose schema upstream changed: rms_norm and fused_add_rms_norm take an optional
weight (csrc/torch_bindings.cpp). The fork's stand-in skips an op already defined."""
import torch

_lib = torch.library.Library("_C", "FRAGMENT")


def _rms(x, w, eps):
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return y * w if w is not None else y


def _rms_norm(out, x, w, eps):
    out.copy_(_rms(x, w, eps))


def _fused_add_rms_norm(x, residual, w, eps):
    s = (x.float() + residual.float()).to(x.dtype)
    residual.copy_(s)
    x.copy_(_rms(s, w, eps))


for _schema, _fn in (
        ("rms_norm(Tensor! result, Tensor input, Tensor? weight, float epsilon) -> ()", _rms_norm),
        ("fused_add_rms_norm(Tensor! input, Tensor! residual, Tensor? weight, float epsilon) -> ()",
         _fused_add_rms_norm)):
    _name = _schema.split("(", 1)[0]
    if not hasattr(torch.ops._C, _name):
        _lib.define(_schema)
        _lib.impl(_name, _fn, "CompositeExplicitAutograd")

import vllm._C  # noqa: E402,F401  the other _C ops (stubs/_C.py)
