"""The GPU harness's counters (ci/fork-gpu/harness.py's Counters.report) as one typed record, read by both reports.

ci/fork-gpu/report.py (the harness's cases) and bench/e2e_decode.py with
bench/e2e_overlap.py (the end-to-end runs) read a result through
``HarnessCounters.read``: the counter names (``"_cpu_prefill (decode)"``) are
spelt here once. A counter the run did not write reads as empty, so a check on
it fails closed (nothing replayed, nothing captured).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LK_MOE_PREFILL_IN_DECODE = "_cpu_prefill (decode)"
"""lk_moe's synchronous prefill path called in a decode step (never wanted)"""
LK_MOE_DECODE_CAPTURING = "_cpu_decode (capturing)"
"""lk_moe's cpu_decode called while a CUDA graph was being captured"""


def _counts(value: Any) -> dict[str, int]:
    return {str(k): int(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


@dataclass(frozen=True, kw_only=True)
class HarnessCounters:
    graphs: dict[str, list[str]]
    """each graph manager's captured full decode graphs, t<tokens>:r<requests>:q<query length>"""
    replays: dict[str, dict[str, int]]
    """graph replays by manager and query length"""
    graph_steps: dict[str, int]
    """decode steps that replayed a graph, by query length"""
    eager_steps: dict[str, int]
    """decode steps that ran eagerly, by query length"""
    lk_moe: dict[str, int]
    """lk_moe calls by path and where (capturing, decode, prefill)"""
    drafter_after: dict[str, int]
    """the drafter's graph replays by the query length of the target step they follow"""
    own_depth_steps: dict[str, int]
    """decode steps where some request verified fewer drafts than the batch (draft_depth verify
    "request": rows masked), by query length"""
    drafter_rested: dict[str, int]
    """decode steps after which DSpark's drafter rested for every request (no graph), by query length"""
    drafter_rested_rows: dict[str, int]
    """decode steps after which it rested for some requests (their query rows masked), by query length"""

    @classmethod
    def read(cls, run: Mapping[str, Any]) -> HarnessCounters:
        steps = run.get("decode_steps")
        steps = steps if isinstance(steps, Mapping) else {}
        graphs = run.get("graphs")
        replays = run.get("replays")
        return cls(
            graphs={str(k): list(v) for k, v in graphs.items()} if isinstance(graphs, Mapping) else {},
            replays={str(k): _counts(v) for k, v in replays.items()} if isinstance(replays, Mapping) else {},
            graph_steps=_counts(steps.get("graph")), eager_steps=_counts(steps.get("eager")),
            lk_moe=_counts(run.get("lk_moe")), drafter_after=_counts(run.get("drafter_after")),
            own_depth_steps=_counts(run.get("own_depth_steps")),
            drafter_rested=_counts(run.get("drafter_rested")),
            drafter_rested_rows=_counts(run.get("drafter_rested_rows")))

    def eager_decode_steps(self) -> dict[str, int]:
        """Query length -> decode steps that ran eagerly, where any did."""
        return {q: n for q, n in self.eager_steps.items() if n}

    def drafted_after_depth_0(self) -> int:
        """Decode steps at depth 0 (query length 1) after which the drafter ran: all of them
        but those after which DSpark rested for every request."""
        return self.graph_steps.get("1", 0) + self.eager_steps.get("1", 0) - self.drafter_rested.get("1", 0)

    def replayed(self) -> set[str]:
        """The query lengths at which some decode step replayed a graph."""
        return {q for q, n in self.graph_steps.items() if n}

    @property
    def prefill_in_decode(self) -> int:
        return self.lk_moe.get(LK_MOE_PREFILL_IN_DECODE, 0)

    @property
    def decode_captured(self) -> int:
        return self.lk_moe.get(LK_MOE_DECODE_CAPTURING, 0)
