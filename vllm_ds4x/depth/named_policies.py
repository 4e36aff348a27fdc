# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The named draft-depth policies the project runs, in one table, with every spelling and what each verifies.

Each entry has its report name ("fixed 1", "phase 1/2", "adaptive": the
simulator, the benchmarks, their committed results), its GPU-harness case name
where the harness runs it ("fixed", "phase12": ci/fork-gpu's cases and
report), and its draft_depth object (None: no object, vLLM's fixed K). The
engine checks, the harness, the benchmarks, ``plan --launch`` and the
simulator take their policy lists from here; the depths each verifies and
has graphs for come from its parsed config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vllm_ds4x.depth.config import parse_draft_depth
from vllm_ds4x.depth.phase_tracker import ANSWER, PHASES, REASONING

AdaptiveStart = Mapping[str, Any]
"""what adaptive starts from, as a `measure` profile's draft_depth gives it (and `plan --measure
--launch` gives it to the engine): step_cost (relative step costs, or such lists by running
requests) and prior_acceptance (by phase)"""


@dataclass(frozen=True, kw_only=True)
class NamedPolicy:
    name: str
    """as the reports print it: "fixed 1", "phase 0/2", "adaptive" """
    case: str | None
    """the GPU harness's case name ("fixed", "phase12"), None where the harness does not run it"""
    draft_depth: dict[str, Any] | None
    """the draft_depth object of --speculative-config; None: none (vLLM's fixed K)"""

    @property
    def engine_name(self) -> str:
        """The engine checks' name: the case's for vLLM's own fixed K, else the report's."""
        return "fixed" if self.draft_depth is None else self.name

    def graph_depths(self, k_max: int) -> tuple[int, ...]:
        """The depths it captures decode graphs for, ascending."""
        return parse_draft_depth(self.draft_depth, k_max).verify_depths(k_max)

    def verified_depth(self, phase: str, k_max: int) -> int | None:
        """The depth its decode batches verify in `phase`: the depth it chooses there, rounded up to
        a graph depth as the scheduler rounds it; None: each request's own choice (adaptive)."""
        config = parse_draft_depth(self.draft_depth, k_max)
        chosen = config.phase_depth(phase, k_max)
        return None if chosen is None else min(d for d in config.verify_depths(k_max) if d >= chosen)

    def verified_depths(self, k_max: int) -> frozenset[int] | None:
        """The depths its phase-pure decode batches verify (a mixed batch verifies
        the deeper one); None: each request's own choice (adaptive)."""
        depths = [self.verified_depth(phase, k_max) for phase in PHASES]
        return None if None in depths else frozenset(d for d in depths if d is not None)


def profile_start(draft_depth: Mapping[str, Any]) -> AdaptiveStart:
    """What adaptive starts from in a `measure` profile's draft_depth object."""
    return {name: value for name, value in draft_depth.items() if name != "policy"}


def named_policies(k: int, start: AdaptiveStart | None = None) -> dict[str, NamedPolicy]:
    """By report name: fixed 0..K (below K a phase policy at one depth), phase 1/K and 0/K,
    adaptive from depth 0 (starting from `start` when given)."""
    table = [NamedPolicy(name=f"fixed {d}", case=None, draft_depth={"policy": "phase", "reasoning_depth": d,
                                                                    "answer_depth": d}) for d in range(k)]
    table.append(NamedPolicy(name=f"fixed {k}", case="fixed", draft_depth=None))
    table += [NamedPolicy(name=f"phase {r}/{k}", case=f"phase{r}{k}",
                          draft_depth={"policy": "phase", "reasoning_depth": r, "answer_depth": k}) for r in (1, 0)]
    table.append(NamedPolicy(name="adaptive", case="adaptive",
                             draft_depth={"policy": "adaptive", "min_depth": 0, **(start or {})}))
    return {policy.name: policy for policy in table}


PER_REQUEST = " per request"
"""the name suffix of a policy whose requests each verify their own depth (draft_depth verify "request")"""
OWN_CASE = "own"
"""its GPU-harness case suffix ("phase02own")"""
AV_CASE = "av"
"""the GPU-harness case mode ("dflash-av") for vLLM's own adaptive verification in place of a draft_depth policy"""


def per_request_policies(k: int, start: AdaptiveStart | None = None) -> dict[str, NamedPolicy]:
    """By report name ("phase 0/2 per request"): each named policy whose requests may choose different
    depths (phase, adaptive), with each request verifying its own depth in a mixed batch (the fork's
    model runner v2); its batches still run the deepest choice's graph, so it verifies, as a batch,
    what its named twin verifies."""
    return {p.name + PER_REQUEST: NamedPolicy(name=p.name + PER_REQUEST, case=p.case and p.case + OWN_CASE,
                                              draft_depth={**(p.draft_depth or {}), "verify": "request"})
            for p in named_policies(k, start).values()
            if (depths := p.verified_depths(k)) is None or len(depths) > 1}


def any_policy(name: str, k: int, start: AdaptiveStart | None = None) -> NamedPolicy:
    """A named policy or its per-request twin, by report name (`start`: adaptive's)."""
    return {**named_policies(k, start), **per_request_policies(k, start)}[name]


def same_behaviour(k: int) -> list[tuple[str, str, str]]:
    """(phase, fixed depth, phase policy) where the two verify the same depth in that phase: each
    phase policy runs its reasoning depth's fixed twin while reasoning and fixed K while answering
    (their difference in a run is its noise)."""
    pairs = []
    for policy in named_policies(k).values():
        depth = policy.draft_depth or {}
        if policy.name.startswith("phase "):
            pairs += [(REASONING, f"fixed {depth['reasoning_depth']}", policy.name),
                      (ANSWER, f"fixed {depth['answer_depth']}", policy.name)]
    return pairs


def harness_policies(k: int) -> dict[str, NamedPolicy]:
    """Those the GPU harness and the engine checks run, by case name."""
    return {p.case: p for p in named_policies(k).values() if p.case is not None}


def by_case(case: str, k: int) -> NamedPolicy:
    """The policy of a harness case name, a per-request twin's too ("phase02own", which the engine
    checks on CPU do not run: upstream refuses it); raises KeyError naming the known ones."""
    twins = {p.case: p for p in per_request_policies(k).values() if p.case is not None}
    known = {**harness_policies(k), **twins}
    if case not in known:
        raise KeyError(f"policy {case!r}: expected one of {', '.join(known)}")
    return known[case]
