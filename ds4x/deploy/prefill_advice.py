"""What GPU prefill costs the resident layers: `plan`'s fit line and `--check-launch`'s, for the VRAM at a
context length (vllm_ds4x.moe.prefill has the bytes), and what it buys where a measure profile with a
"prefill" section is given (--profile, or plan --measure's own): prefill tok/s of the model's lk_moe
layers on the CPU and on the GPU from the user's own curve, and the chunk size from which the GPU wins.
Without such a profile the line is about fit only, and quotes the committed stand-in run (NOT_MEASURED)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ds4x.deploy.planned import Plan, PlanRequest
from ds4x.errors import InputError
from vllm_ds4x.measure import analysis
from vllm_ds4x.moe import placement as mp
from vllm_ds4x.moe import prefill

NOT_MEASURED = ("GPU prefill's speed on this machine is unknown without a measure profile with a prefill section "
                "(--profile), so this is about fit only; on the committed stand-in run (bench/results/"
                "h100-dsv4-prefill, an H100 host) a 16384-token prompt prefilled 14.8x faster on the GPU with cutlass "
                "and 16.4x with triton than on the CPU")


@dataclass(frozen=True)
class Measured:
    """A measure profile's "prefill" section (None: the profile has none) and where it came from."""

    section: dict[str, Any] | None
    source: str
    """'--profile P', or plan --measure's --profile-out"""


def measured(profile: dict[str, Any] | None, source: str) -> Measured | None:
    """The prefill curve of a measure profile (None: no profile); a section that is not the one measure
    writes is one error naming the file."""
    if profile is None:
        return None
    section = profile.get("prefill")
    if section is not None and (why := analysis.prefill_problem(section)):
        raise InputError(f"{source}: its \"prefill\" section is not the one measure writes: {why}",
                         "give the file measure wrote (--profile-out), or measure again")
    return Measured(section=section, source=source)


def _chunk(section: dict[str, Any], tokens: int) -> dict[str, Any]:
    """The row timed on the CPU that a step of `tokens` tokens is nearest to: the largest at or below it, else the
    smallest."""
    timed = [row for row in section["rows"] if row.get("cpu_ms")]
    below = [row for row in timed if row["rows"] <= tokens]
    return max(below, key=lambda r: r["rows"]) if below else min(timed, key=lambda r: r["rows"])


def _per_layers(rows: int, layers: int, ms: float) -> str:
    if layers <= 0:
        return "with no layer on lk_moe (every MoE layer resident)"
    return f"at {analysis.prefill_tok_s(rows, layers, ms):.0f} tok/s ({layers} lk_moe layers x {ms:.1f} ms a layer call)"


def figures(found: Fit, section: dict[str, Any], moe_layers: int) -> dict[str, Any]:
    """plan --json's measured prefill: the chunk stated, each way's lk_moe layers and tok/s (None: not timed, or
    no layer on lk_moe), the crossover and the engine, as `speed` states them."""
    row = _chunk(section, found.tokens)
    layers = {"cpu": moe_layers - found.without, "gpu": moe_layers - (found.with_prefill or 0)}
    fits = {"cpu": True, "gpu": found.with_prefill is not None}
    tok_s = {way: analysis.prefill_tok_s(row["rows"], layers[way], row[f"{way}_ms"])
             if row.get(f"{way}_ms") and layers[way] > 0 and fits[way] else None for way in layers}
    return {"chunk": row["rows"], "lk_threads": section.get("lk_threads"), "engine": section.get("engine"),
            "cpu_lk_moe_layers": layers["cpu"], "gpu_lk_moe_layers": layers["gpu"], "cpu_tok_s": tok_s["cpu"],
            "gpu_tok_s": tok_s["gpu"], "crossover": section.get("crossover")}


def speed(found: Fit, section: dict[str, Any], source: str, moe_layers: int) -> str:
    """prefill tok/s from the measured curve at the step's chunk (rows / (layers x ms)): on the CPU over the lk_moe
    layers left beside CPU prefill, on the GPU over those left beside GPU prefill; and the crossover."""
    if moe_layers - found.without <= 0 and moe_layers - (found.with_prefill or 0) <= 0:
        return f"measured ({source}): every MoE layer is resident beside either way of prefilling, so none runs on lk_moe"
    row = _chunk(section, found.tokens)
    n = row["rows"]
    which = f"a {n}-token chunk" + ("" if n == found.tokens else
                                     f" (the nearest timed to --max-num-batched-tokens {found.tokens})")
    head = f"measured ({source}, LK_THREADS={section.get('lk_threads')}): {which} prefills on the CPU " \
           f"{_per_layers(n, moe_layers - found.without, row['cpu_ms'])}"
    engine = section.get("engine")
    if engine is None:
        return f"{head}; GPU prefill was not timed (measure ran where torch saw no GPU), so its speed is not known"
    gpu_layers = moe_layers - (found.with_prefill or 0)
    gpu = f"on the GPU ({engine}) {_per_layers(n, gpu_layers, row['gpu_ms'])}" if row.get("gpu_ms") else \
        f"the GPU ({engine}) was not timed at that chunk"
    timed_both = [r["rows"] for r in section["rows"] if r.get("cpu_ms") and r.get("gpu_ms")]
    cross = section.get("crossover")
    if cross:
        wins = f"the GPU is faster from {cross} tokens a chunk"
    else:
        wins = f"the GPU is not faster at the largest chunk timed both ways ({max(timed_both, default=0)} tokens)"
    return f"{head} and {gpu}; {wins}; the routed experts only (attention and resident layers come on top)"


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


def roomiest(on: PlanRequest, compute: Callable[[PlanRequest], Plan], engine_set: bool, window_set: bool) -> PlanRequest:
    """GPU prefill as `on` asks, or, where the engine or the window is not set, the choice that leaves the most
    resident layers: triton in place of cutlass (whose arena holds a layer's experts twice, once in bf16), and
    a triton ring of one layer in place of two (a resident layer speeds every decode step; a second ring block
    only prefill, and only over fast PCIe, lk_moe says). Ties keep what `on` asks."""
    def room(request: PlanRequest) -> int:
        plan = compute(request)
        return len(plan.choice.layers) if plan.budget.for_resident_layers >= 0 else -1

    candidates = [on]
    if not engine_set and on.prefill_engine == "cutlass":
        candidates.append(replace(on, prefill_engine="triton"))
    if not window_set:
        candidates += [replace(c, prefetch_window=1) for c in candidates if c.prefill_engine == "triton"]
    return max(candidates, key=room)  # the first of the roomiest


def alternative(on: PlanRequest, compute: Callable[[PlanRequest], Plan]) -> str:
    """'; triton ... fits with N resident layer(s)' where another engine or window leaves more resident layers
    than `on` does, else ''."""
    best = roomiest(on, compute, engine_set=False, window_set=False)
    if best == on:
        return ""
    found = fit(best, compute)
    if found.with_prefill is None:
        return ""
    window = f" with {mp.PREFETCH_ENV}={best.prefetch_window}" if best.prefill_engine == "triton" else ""
    return (f"; {best.prefill_engine}{window} ({prefill.ENGINE_ENV}={best.prefill_engine}, "
            f"{found.staging / mp.GIB:.2f} GiB staging) fits with {found.with_prefill} resident layer(s)")


def _engine(on: prefill.PrefillSettings) -> str:
    if on.engine == "triton":
        return f"triton, a ring of {on.ring} layer(s) of experts (window {on.window})"
    return "cutlass, its arena taken as one layer of experts and their bf16 copy"


def other_layer(section: dict[str, Any], shape: mp.ModelShape) -> str | None:
    """How the layer a section timed differs from the model's (None: the same, or not recorded)."""
    timed = section.get("layer")
    mine = dict(zip(analysis.LAYER_KEYS, (shape.n_routed_experts, shape.top_k, shape.hidden, shape.moe_intermediate)))
    if timed is None or all(timed[key] == mine[key] for key in analysis.LAYER_KEYS):
        return None

    def shown(layer: dict[str, Any]) -> str:
        return f"{layer['experts']} experts, top-{layer['top_k']}, hidden {layer['hidden']}, intermediate {layer['inter']}"
    return f"it timed a layer of {shown(timed)}, not --config's {shown(mine)}"


def usable(curve: Measured | None, shape: mp.ModelShape) -> dict[str, Any] | None:
    """The curve's section where it holds for this model (one there, of the model's layer shape)."""
    if curve is None or curve.section is None or other_layer(curve.section, shape):
        return None
    return curve.section


def sentence(found: Fit, max_model_len: int, curve: Measured | None = None,
             shape: mp.ModelShape | None = None) -> str:
    """'at --max-model-len N (X GiB KV cache): GPU prefill (...) fits with 1 resident layer(s), not the 2 ...', then
    the measured speeds from `curve` over the MoE layers of `shape` (speed), or NOT_MEASURED without them, or
    where the curve timed a layer of another shape than the model's."""
    gib = mp.GIB
    cost = (f"GPU prefill ({_engine(found.on)}: {found.staging / gib:.2f} GiB staging + {found.scratch / gib:.2f} "
            f"GiB scratch at {found.tokens} tokens a step)")
    if found.with_prefill is None:
        fits = "does not fit even with no resident layer"
    elif found.with_prefill < found.without:
        fits = f"fits with {found.with_prefill} resident layer(s), not the {found.without} that fit without it"
    else:
        fits = f"fits beside the {found.without} resident layer(s) that fit without it"
    head = f"at --max-model-len {max_model_len} ({found.kv_cache / gib:.2f} GiB KV cache): {cost} {fits}"
    if curve is None or curve.section is None or shape is None:
        old = f" ({curve.source} has no \"prefill\" section: measure again to time it)" if curve else ""
        return f"{head}; {NOT_MEASURED}{old}"
    if other := other_layer(curve.section, shape):
        return f"{head}; {NOT_MEASURED} ({curve.source}: {other}; measure with this --config)"
    return f"{head}; {speed(found, curve.section, curve.source, len(shape.moe_layers))}"
