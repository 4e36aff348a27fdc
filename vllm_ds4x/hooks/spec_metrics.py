# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Spec-decode metrics split by reasoning phase and chosen draft depth.

Prometheus (beside vLLM's spec-decode family; labels like ``position``)::

    vllm:spec_decode_num_drafts_by_phase{phase="reasoning"|"answer"}
    vllm:spec_decode_num_draft_tokens_by_phase{phase=...}
    vllm:spec_decode_num_accepted_tokens_by_phase{phase=...}
    vllm:spec_decode_num_drafts_by_depth{depth="0".."K"}         drafts verified at each depth; at 0,
                                                                  decode steps of a request that verified nothing
    vllm:spec_decode_num_drafts_by_chosen_depth{depth="0".."K"}  drafts whose request chose that depth
                                                                  (a batch verifies its deepest choice)

(named as vLLM names its counters, `..._num_drafts`; before 2026-12 they were
`vllm:spec_decode_depth` and `vllm:spec_decode_chosen_depth`, which nothing outside
this project read: no alias is kept)

Acceptance rate while reasoning::

    rate(vllm:spec_decode_num_accepted_tokens_by_phase_total{phase="reasoning"}[5m]) /
    rate(vllm:spec_decode_num_draft_tokens_by_phase_total{phase="reasoning"}[5m])

Mean verified depth while reasoning (drafts verified per request step)::

    rate(vllm:spec_decode_num_draft_tokens_by_phase_total{phase="reasoning"}[5m]) /
    rate(vllm:spec_decode_num_drafts_by_phase_total{phase="reasoning"}[5m])

Dashboards over these (Grafana, Perses): examples/dashboards in the ds4x repository.
"""

from dataclasses import dataclass, field
from typing import Any

PHASES = ("reasoning", "answer")
_DEPTH_KEYS = tuple(str(d) for d in range(64))


@dataclass
class DepthStats:
    """One step's (or one log interval's) counts; string keys travel in msgpack."""

    drafts: dict[str, int] = field(default_factory=dict)
    draft_tokens: dict[str, int] = field(default_factory=dict)
    accepted_tokens: dict[str, int] = field(default_factory=dict)
    depths: dict[str, int] = field(default_factory=dict)
    chosen_depths: dict[str, int] = field(default_factory=dict)

    def observe(self, phase: str, chosen: int, drafted: int, drafts: int, accepted_tokens: int) -> None:
        """`drafts` drafts of `drafted` tokens each, `accepted_tokens` of them accepted in all."""
        self.drafts[phase] = self.drafts.get(phase, 0) + drafts
        self.draft_tokens[phase] = self.draft_tokens.get(phase, 0) + drafted * drafts
        self.accepted_tokens[phase] = self.accepted_tokens.get(phase, 0) + accepted_tokens
        for counts, depth in ((self.depths, drafted), (self.chosen_depths, chosen)):
            key = _DEPTH_KEYS[depth] if depth < len(_DEPTH_KEYS) else str(depth)
            counts[key] = counts.get(key, 0) + drafts

    def observe_unverified(self, steps: int) -> None:
        """`steps` decode steps of requests that verified nothing (depth 0)."""
        self.depths["0"] = self.depths.get("0", 0) + steps

    def merge(self, other: "DepthStats | None") -> None:
        if other is None:
            return
        for mine, theirs in ((self.drafts, other.drafts), (self.draft_tokens, other.draft_tokens),
                             (self.accepted_tokens, other.accepted_tokens), (self.depths, other.depths),
                             (self.chosen_depths, other.chosen_depths)):
            for key, value in theirs.items():
                mine[key] = mine.get(key, 0) + value

    def log_line(self) -> str | None:
        """`reasoning: 120 drafts, depth 1.00, acceptance 39.2%; answer: ...`"""
        parts = []
        for phase in PHASES:
            drafts = self.drafts.get(phase, 0)
            if not drafts:
                continue
            tokens, accepted = self.draft_tokens[phase], self.accepted_tokens[phase]
            parts.append(
                f"{phase}: {drafts} drafts, depth {tokens / drafts:.2f}, "
                f"acceptance {100 * accepted / tokens if tokens else float('nan'):.1f}%"
            )
        return "SpecDecoding by phase: " + "; ".join(parts) if parts else None


class DepthProm:
    """The counters above, one child per engine like vLLM's own."""

    def __init__(self, counter_cls: Any, labelnames: list[str], per_engine_labelvalues: dict[int, list[object]],
                 k_max: int) -> None:
        def counter(name: str, doc: str, label: str) -> Any:
            return counter_cls(name=name, documentation=doc, labelnames=[*labelnames, label])

        base = {
            "drafts": counter("vllm:spec_decode_num_drafts_by_phase", "Drafts verified, by phase.", "phase"),
            "draft_tokens": counter("vllm:spec_decode_num_draft_tokens_by_phase", "Draft tokens verified, by phase.", "phase"),
            "accepted_tokens": counter("vllm:spec_decode_num_accepted_tokens_by_phase", "Accepted tokens, by phase.", "phase"),
        }
        depth = counter("vllm:spec_decode_num_drafts_by_depth", "Drafts verified at each draft depth.", "depth")
        chosen = counter("vllm:spec_decode_num_drafts_by_chosen_depth", "Drafts by the depth their request chose.", "depth")
        self.by_phase = {
            idx: {what: {p: c.labels(*lv, p) for p in PHASES} for what, c in base.items()}
            for idx, lv in per_engine_labelvalues.items()
        }
        self.by_depth = {
            idx: {what: {str(d): c.labels(*lv, str(d)) for d in range(k_max + 1)}
                  for what, c in (("depths", depth), ("chosen_depths", chosen))}
            for idx, lv in per_engine_labelvalues.items()
        }

    def observe(self, stats: DepthStats | None, engine_idx: int = 0) -> None:
        if stats is None:
            return
        phases = self.by_phase[engine_idx]
        for what in ("drafts", "draft_tokens", "accepted_tokens"):
            for phase, value in getattr(stats, what).items():
                phases[what][phase].inc(value)
        for what in ("depths", "chosen_depths"):
            for depth, value in getattr(stats, what).items():
                self.by_depth[engine_idx][what][depth].inc(value)
