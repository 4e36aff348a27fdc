"""What `plan` computes from and what it finds, typed: the request (its options) and the plan."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ds4x.core import moe_placement as mp

MAX_MODEL_LEN = 2**24  # 16M tokens: far above the model's 1M context, low enough that the KV arithmetic stays quick
MAX_PARALLEL = 64  # tensor- and pipeline-parallel sizes, draft layers: above any one host


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """The plan options the plan and the serving script are computed from (plan.main builds it once)."""

    config: Path
    gpu_mem: int
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
    num_speculative_tokens: int
    acceptance: tuple[float, ...]
    """at depth K: reasoning, answer"""

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> PlanRequest:
        """The request the parsed command line's options hold (every field is an option of plan's)."""
        values = {f.name: options[f.name] for f in fields(cls)}
        return cls(**{**values, "acceptance": tuple(values["acceptance"])})


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
