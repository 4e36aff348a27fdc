"""What `plan` is asked and what it finds, typed: the command, the request the plan is computed from, and the plan."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ds4x.errors import InputError
from vllm_ds4x.depth import sim
from vllm_ds4x.measure.request import MeasureRequest
from vllm_ds4x.moe import placement as mp
from vllm_ds4x.typed_options import request_of

MAX_MODEL_LEN = 2**24  # 16M tokens: far above the model's 1M context, low enough that the KV arithmetic stays quick
MAX_PARALLEL = 64  # tensor- and pipeline-parallel sizes, draft layers: above any one host


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """The plan options the plan and the serving script are computed from (plan.main builds it once)."""

    config: Path
    gpu_mem: int
    """bytes (--gpu-mem takes 32, 32G, 32GiB or 31.5GB: plan.SIZE_UNITS)"""
    gpu_memory_utilization: float
    max_model_len: int
    kv_cache_dtype: str
    max_num_seqs: int
    tp: int
    pp: int
    draft_layers: int
    cpu_draft_layers: bool
    reserve: int
    ram_bandwidth: float
    verify_tokens: int | None
    routing_stats: Path | None
    pool_slots: int
    """lk_moe's expert-pool slots per MoE layer (LK_POOL_SLOTS; 0: no pool)"""
    gpu_prefill_min_batch: int
    """LVLLM_GPU_PREFILL_MIN_BATCH_SIZE: GPU prefill from this many tokens (0: CPU prefill)"""
    prefill_engine: str
    """LK_GPU_PREFILL_ENGINE: cutlass or triton"""
    prefetch_window: int
    """LVLLM_GPU_PREFETCH_WINDOW: the triton engine's staging ring depth (clamped to 1..2)"""
    max_num_batched_tokens: int | None
    """vllm serve's --max-num-batched-tokens; None: its default for --gpu-mem"""
    num_speculative_tokens: int
    acceptance: tuple[float, ...]
    """at depth K: reasoning, answer"""

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> PlanRequest:
        """The request the parsed command line's options hold (every field is an option of plan's)."""
        return request_of(cls, options)


@dataclass(frozen=True, kw_only=True)
class PlanCommand:
    """Everything one `plan` is asked (cli.py builds it from the parsed options): the request, what to
    print or write, and the --check-launch or --measure that replaces the plan's own output."""

    request: PlanRequest
    json: bool
    plot: Path | None
    launch: Path | None
    model: str | None
    force: bool
    check_launch: Path | None
    write: Path | None
    profile: Path | None
    cores: int | None
    pool_hit_rate: float | None
    """--check-launch's expert-pool hit rate (None: not given)"""
    measure: MeasureRequest | None
    """--measure's request; None without --measure"""
    overlap: sim.Overlap
    """--measure --overlap: its mode ("off": no overlap lines), the part outside it, a micro-batch's GPU share"""

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> PlanCommand:
        """The command the parsed command line's options hold; raises InputError for options that
        cannot go together or a model `vllm serve` would read as an option."""
        _check_launch_options(options)
        built = ("request", "measure", "overlap")
        given = {field.name: options[field.name] for field in fields(cls) if field.name not in built}
        overlap = sim.Overlap(mode=options["overlap"], outside_ms=options["overlap_outside_ms"],
                              ubatch_gpu=options["ubatch_gpu"])
        return cls(request=PlanRequest.of(options), overlap=overlap,
                   measure=MeasureRequest.of(options) if options["measure"] else None, **given)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What compute finds: the model, its GPU budget, the resident layers and the decode ceilings."""

    shape: mp.ModelShape
    budget: mp.Budget
    choice: mp.Choice
    ceiling: list[float]
    """decode tok/s bound by RAM bandwidth, by resident MoE layers 0..all"""
    by_phase: dict[str, float]
    """that bound at the chosen layers with the tokens each phase's acceptance makes"""


def _check_launch_options(options: Mapping[str, Any]) -> None:
    """--launch writes a script, --check-launch reads one: not both at once; and the model the script
    serves (--model, else --config's folder) is no option to `vllm serve` (--model=--trust-remote-code)."""
    if options["launch"] is not None and options["check_launch"] is not None:
        raise InputError(f"--launch {options['launch']} with --check-launch {options['check_launch']}: one writes a "
                         f"script, the other checks one", "give one of them (--check-launch ... --write OUT writes "
                         "the checked script with its fixes)")
    model = options["model"] or str(Path(options["config"]).parent)
    if options["launch"] is not None and model.startswith("-"):
        which = "--model" if options["model"] else "the folder of --config"
        raise InputError(f"{which} {model[:60]!r}: starts with '-', so `vllm serve` would read it as an option",
                         "give the model's path (./-name for a folder whose name starts with '-') or its name")
