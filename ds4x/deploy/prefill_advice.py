"""What GPU prefill costs the resident layers: `plan`'s fit line and `--check-launch`'s, for the VRAM at a
context length (vllm_ds4x.moe.prefill has the bytes). No prefill speed is committed under bench/results,
so every line is about fit only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ds4x.deploy.planned import Plan, PlanRequest
from vllm_ds4x.moe import placement as mp
from vllm_ds4x.moe import prefill

NOT_MEASURED = ("GPU prefill's speed is not measured here (no prefill run is committed under bench/results), so this "
                "is about fit only")


def settings(args: PlanRequest) -> prefill.PrefillSettings:
    return prefill.PrefillSettings(min_batch=args.gpu_prefill_min_batch, engine=args.prefill_engine,
                                   window=args.prefetch_window)


def batched_tokens(args: PlanRequest) -> int:
    """--max-num-batched-tokens, else vllm serve's default for a GPU of --gpu-mem."""
    return args.max_num_batched_tokens or prefill.default_batched_tokens(args.gpu_mem)


@dataclass(frozen=True)
class Fit:
    """Resident layers with GPU prefill on and off, at one set of plan options."""

    on: prefill.PrefillSettings
    staging: int
    scratch: int
    tokens: int
    with_prefill: int | None
    """the resident layers that fit beside it; None: it does not fit at all"""
    without: int
    kv_cache: int


def fit(on: PlanRequest, compute: Callable[[PlanRequest], Plan]) -> Fit:
    """The plans with GPU prefill as `on` sets it and with it off."""
    with_it, without = compute(on), compute(replace(on, gpu_prefill_min_batch=0))
    shape, tokens, chosen = without.shape, batched_tokens(on), settings(on)
    return Fit(on=chosen, staging=prefill.staging_bytes(chosen, shape, on.tp),
               scratch=prefill.scratch_bytes(chosen, shape, tokens, on.tp), tokens=tokens,
               with_prefill=len(with_it.choice.layers) if with_it.budget.for_resident_layers >= 0 else None,
               without=len(without.choice.layers), kv_cache=without.budget.kv_cache)


def _engine(on: prefill.PrefillSettings) -> str:
    if on.engine == "triton":
        return f"triton, a ring of {on.ring} layer(s) of experts (window {on.window})"
    return "cutlass, its arena taken as one layer of experts"


def sentence(found: Fit, max_model_len: int) -> str:
    """'at --max-model-len N (X GiB KV cache): GPU prefill (...) fits with 1 resident layer(s), not the 2 ...'"""
    gib = mp.GIB
    cost = (f"GPU prefill ({_engine(found.on)}: {found.staging / gib:.2f} GiB staging + {found.scratch / gib:.2f} "
            f"GiB scratch at {found.tokens} tokens a step)")
    if found.with_prefill is None:
        fits = "does not fit even with no resident layer"
    elif found.with_prefill < found.without:
        fits = f"fits with {found.with_prefill} resident layer(s), not the {found.without} that fit without it"
    else:
        fits = f"fits beside the {found.without} resident layer(s) that fit without it"
    return f"at --max-model-len {max_model_len} ({found.kv_cache / gib:.2f} GiB KV cache): {cost} {fits}; {NOT_MEASURED}"
