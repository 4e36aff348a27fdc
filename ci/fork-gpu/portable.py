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
- GPU-resident routed-expert layers (LVLLM_GPU_RESIDENT_MOE_LAYERS, dsv4_setup.sh): the fork's own
  MXFP4 path, its Marlin kernels built from its sources (build_ops.py --marlin); `resident_moe()`
  records what the fork chose (the backend of its MXFP4 oracle, each MoE layer's placement, the
  Marlin MoE calls) for the report.
"""

import os
import sys
from pathlib import Path

import torch

CAPABILITY = (12, 0)  # the RTX 5090's
SOURCES: dict[str, str] = {}  # kernel -> where it came from in this run
PLACEMENT: dict[str, bool] = {}  # MoE layer name -> resident on the GPU, as the fork decided it
MARLIN_CALLS = [0]  # fused_marlin_moe calls (eager steps and captures; a graph replay makes none)
RESIDENT_ENV = "LVLLM_GPU_RESIDENT_MOE_LAYERS"


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


def record_moe() -> None:
    """Recorders of what the fork picks for its routed experts: its MXFP4 MoE oracle's backend, each
    RoutedExperts' placement (is_lk_moe_gpu_resident_layer), fused_marlin_moe's calls."""
    from vllm.model_executor.layers.fused_moe import routed_experts
    from vllm.model_executor.layers.fused_moe.experts import marlin_moe
    from vllm.model_executor.layers.quantization import mxfp4

    select, placed, fused = (mxfp4.select_deepseek_v4_mxfp4_moe_backend, routed_experts.is_lk_moe_gpu_resident_layer,
                             marlin_moe.fused_marlin_moe)

    def select_recorded(config):
        backend, experts = select(config)
        SOURCES["MXFP4 MoE backend"] = (f"{backend.value} ({getattr(experts, '__name__', experts)}): the fork's "
                                        f"select_deepseek_v4_mxfp4_moe_backend at capability {_capability()}")
        return backend, experts

    def placed_recorded(layer_name: str) -> bool:
        PLACEMENT[layer_name] = resident = placed(layer_name)
        return resident

    def fused_counted(*args, **kwargs):
        MARLIN_CALLS[0] += 1
        return fused(*args, **kwargs)

    mxfp4.select_deepseek_v4_mxfp4_moe_backend = select_recorded
    routed_experts.is_lk_moe_gpu_resident_layer = placed_recorded
    marlin_moe.fused_marlin_moe = fused_counted


def resident_moe(ops: Path) -> None:
    """The Marlin ops of resident MXFP4 layers (build_ops.py --marlin)."""
    import build_ops

    build_ops.load(ops, build_ops.MARLIN)
    SOURCES["resident MoE layers"] = (
        f"{RESIDENT_ENV}={os.environ[RESIDENT_ENV]}: the fork's MXFP4 MoE (Mxfp4MoEMethod, MarlinExperts -> "
        f"fused_marlin_moe), its ops {', '.join(build_ops.bound(build_ops.MARLIN))} compiled here from the fork's "
        f"sources ({build_ops.MARLIN.name}: Marlin MoE kernels of {build_ops.MARLIN_TYPES} only, generated by the "
        f"fork's generate_kernels.py)")


def _capability() -> str:
    from vllm.platforms import current_platform

    cap = current_platform.get_device_capability()
    return f"{cap.major}.{cap.minor}" if cap is not None else "?"


def resident_summary(layers: int) -> dict:
    """What the run did with its MoE layers (case.py and e2e.py record it)."""
    from dsv4_model import moe_layers

    placement = moe_layers(PLACEMENT, layers)
    if sorted(placement["resident"] + placement["lk_moe"]) != list(range(layers)):
        raise RuntimeError(f"MoE layers placed: {placement}, expected each of the target's {layers} layers once "
                           f"(is_lk_moe_gpu_resident_layer was not asked for each: {sorted(PLACEMENT)})")
    if placement["resident"] or placement["draft_resident"]:
        SOURCES["resident MoE layers"] = SOURCES.get("resident MoE layers", "none loaded") + (
            f"; target layers {placement['resident']}, draft layers {placement['draft_resident']} resident, "
            f"fused_marlin_moe called {MARLIN_CALLS[0]} times (eager steps and graph captures)")
    SOURCES["routed experts on lk_moe"] = (f"target layers {placement['lk_moe']}, draft layers "
                                           f"{placement['draft_lk_moe']}: lk_moe MOE_MXFP4, cpu_decode in the graphs")
    return {**placement, "marlin_calls": MARLIN_CALLS[0], "asked": os.environ.get(RESIDENT_ENV) or "none"}


def install(ops: Path) -> None:
    """The portable path in this process (DS4X_NATIVE_CAPABILITY=1 keeps the device's), with the
    compiled ops build_ops.py made in `ops`."""
    import build_ops

    build_ops.load(ops)
    SOURCES["compiled here"] = ", ".join(op for names in build_ops.OPS.values() for op in names)
    if os.environ.get("DS4X_NATIVE_CAPABILITY") != "1":
        force_capability(*CAPABILITY)
    if os.environ.get(RESIDENT_ENV, "none").strip().lower() not in ("", "none"):
        resident_moe(ops)  # first: vllm._custom_ops registers fakes of the ops it finds at import
    record_moe()
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
