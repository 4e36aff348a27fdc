"""The fork's portable DeepSeek-V4 path, the one an RTX 5090 (sm_120) takes, on the H200 (sm_90).

The fork picks its DeepSeek-V4 kernels by compute capability through vLLM's platform
(`current_platform.is_device_capability_family(120)`: the SM12x Triton/torch fallbacks of
the indexer and sparse MLA, the fp8 einsum and o_proj without DeepGEMM). `install()` makes
that platform answer 12.0 inside this process only; Triton still compiles for the device
it runs on. What the portable path runs that neither the H200 image nor the carried
wheels have is replaced by the fork's own code where it has a portable form, and the
replacement is named in `SOURCES` (the report prints it):

- TileLang's mHC kernels (no tilelang here): the fork's torch reference
  (`kernels/mhc/torch.py`: mhc_pre_torch, mhc_post_torch) and its Triton hc_head
  (`kernels/mhc/triton.py`), RMSNorm fused as the TileLang pre kernel fuses it.
- The head-512 compressor's CuTe-DSL kernel (no CuTe DSL here): the fork's Triton kernel.
- Compiled ops: built from the fork's own CUDA sources (build_ops.py), or stubs/*.py (each names
  its source: the router's sqrt-softplus top-k is the fork's own torch form).
"""

import os
import sys
from pathlib import Path

import torch

CAPABILITY = (12, 0)  # the RTX 5090's
SOURCES: dict[str, str] = {}  # kernel -> where it came from in this run


def force_capability(major: int, minor: int) -> None:
    from vllm.platforms.cuda import CudaPlatform
    from vllm.platforms.interface import DeviceCapability

    CudaPlatform.get_device_capability = classmethod(lambda cls, device_id=0: DeviceCapability(major, minor))
    SOURCES["capability"] = f"vLLM's platform answers {major}.{minor} (device {torch.cuda.get_device_capability()})"


def _rms(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    return (y * weight.float()).to(x.dtype) if weight is not None else y.to(x.dtype)


def mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps, hc_post_mult_value,
            sinkhorn_repeat, n_splits=1, norm_weight=None, norm_eps=1e-6):
    from vllm.model_executor.kernels.mhc.torch import mhc_pre_torch

    post, comb, x = mhc_pre_torch(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                                  hc_post_mult_value, sinkhorn_repeat)
    return post, comb, (_rms(x, norm_weight, norm_eps) if norm_weight is not None else x)


def mhc_post(x, residual, post_layer_mix, comb_res_mix):
    from vllm.model_executor.kernels.mhc.torch import mhc_post_torch

    return mhc_post_torch(x, residual, post_layer_mix, comb_res_mix)


def mhc_fused_post_pre(x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base, rms_eps, hc_pre_eps,
                       hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat, n_splits=1, tile_n=1,
                       norm_weight=None, norm_eps=1e-6):
    residual = mhc_post(x, residual, post_layer_mix, comb_res_mix)
    return (residual, *mhc_pre(residual, fn, hc_scale, hc_base, rms_eps, hc_pre_eps, hc_sinkhorn_eps,
                               hc_post_mult_value, sinkhorn_repeat, norm_weight=norm_weight, norm_eps=norm_eps))


def hc_head(hs_flat, fn, hc_scale, hc_base, rms_eps, hc_eps):
    from vllm.model_executor.kernels.mhc.triton import _hc_head_triton

    num_tokens, hc_mult, hidden = hs_flat.shape
    out = torch.empty(num_tokens, hidden, dtype=torch.bfloat16, device=hs_flat.device)
    _hc_head_triton(hs_flat, fn, hc_scale, hc_base, out, hidden, rms_eps, hc_eps, hc_mult)
    return out


MHC = {"mhc_pre_tilelang": mhc_pre, "mhc_post_tilelang": mhc_post,
       "mhc_fused_post_pre_tilelang": mhc_fused_post_pre, "hc_head_fused_kernel_tilelang": hc_head}
MHC_USERS = ("vllm.models.deepseek_v4.nvidia.model", "vllm.models.deepseek_v4.nvidia.dspark",
             "vllm.models.deepseek_v4.nvidia.mtp", "vllm.model_executor.layers.mhc")


def mhc_without_tilelang() -> None:
    """Each module that imported a TileLang mHC function gets the stand-in under that name."""
    import importlib

    for name in MHC_USERS:
        module = importlib.import_module(name)
        for fn_name, stand_in in MHC.items():
            if hasattr(module, fn_name):
                setattr(module, fn_name, stand_in)
    SOURCES["mHC"] = "stand-in: the fork's torch mhc_pre/mhc_post and Triton hc_head (no tilelang)"


CUTEDSL_COMPRESS = "vllm.models.deepseek_v4.nvidia.ops.sparse_attn_compress_cutedsl"


def compressor_without_cutedsl() -> None:
    """The head-512 compressor picks CuTe-DSL wherever fp8 is supported (sm_89 and up, the 5090
    too) without asking whether it is installed: without it, the fork's own Triton kernel
    (its Ampere route), which serves the fp8_ds_mla paged cache the harness uses."""
    import types

    from vllm.models.deepseek_v4.common.ops.fused_compress_quant_cache import compress_norm_rope_store_triton

    def compress_norm_rope_store_cutedsl(*, store_full_kv=False, store_full_fp8=False, fp8_scale=None, **kw):
        assert not (store_full_kv or store_full_fp8), "the Triton compressor serves only the fp8_ds_mla paged cache"
        compress_norm_rope_store_triton(**kw)

    module = types.ModuleType(CUTEDSL_COMPRESS)
    module.compress_norm_rope_store_cutedsl = compress_norm_rope_store_cutedsl
    sys.modules[CUTEDSL_COMPRESS] = module
    SOURCES["compressor (head 512)"] = "stand-in: the fork's Triton compress_norm_rope_store (no CuTe DSL)"


def install(ops: Path) -> None:
    """The portable path in this process (DS4X_NATIVE_CAPABILITY=1 keeps the device's), with the
    compiled ops build_ops.py made in `ops`."""
    import build_ops

    build_ops.load(ops)
    SOURCES["compiled here"] = ", ".join(op for names in build_ops.OPS.values() for op in names)
    if os.environ.get("DS4X_NATIVE_CAPABILITY") != "1":
        force_capability(*CAPABILITY)
    try:
        import tilelang

        SOURCES["mHC"] = f"TileLang {tilelang.__version__} (the fork's kernels)"
    except ImportError:
        mhc_without_tilelang()
    try:
        import cutlass  # noqa: F401  (the CuTe DSL)

        SOURCES["compressor (head 512)"] = "CuTe DSL (the fork's kernel)"
    except ImportError:
        compressor_without_cutedsl()
