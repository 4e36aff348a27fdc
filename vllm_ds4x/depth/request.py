# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""What draft depth keeps per request: one small object, hung on vLLM's Request."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vllm_ds4x.depth.tally import RETIRED

if TYPE_CHECKING:
    from vllm_ds4x.depth.estimates import Acceptance


@dataclass(eq=False, slots=True)
class RequestState:
    request_id: str
    phase: str
    override: int | None
    """the client's own depth (extra_args draft_depth), None: the policy's"""
    depth: int
    """the depth it chose"""
    slot: int = RETIRED
    """its phase and chosen depth as a tally slot (TallyCodec.slot), the key of its
    group (DepthPolicy.groups); RETIRED once it has left"""
    acceptance: dict[str, Acceptance] = field(default_factory=dict)
    """adaptive: its acceptance estimate per phase"""
    outcomes: list[int] = field(default_factory=list)
    """adaptive: verifications not yet in the estimate, by outcome code (TallyCodec.outcome)"""
    wake_at: int = 0
    """adaptive: the engine step at whose end it next decides (DecisionClock)"""
    hold: int = 0
    """adaptive: steps from its last decision to its next"""
    probing: bool = False
    """adaptive: at depth 0, verifying one draft for one step to keep its estimate current"""
    exploring: bool = False
    """adaptive: one step at a depth whose step cost is untimed, to time it"""


SetDepth = Callable[[RequestState, int], None]
"""DepthPolicy.set_depth: a request's new depth (and the group of its phase and depth)."""
