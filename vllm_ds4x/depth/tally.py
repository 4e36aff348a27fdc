# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The tally codec: the one place that packs and unpacks draft-depth tally codes.

A step's verifications are counted in flat lists of ints, indexed by a code, so
that a step is read in one pass with no tuple or dict per request:

- an outcome: ``drafted * (K_max + 1) + accepted``, indexing a request's own
  outcome table (adaptive's per-request counts, 0..(K_max + 1) ** 2);
- a tally: a request's slot (its phase and chosen depth) plus its outcome,
  ``((answer * (K_max + 1) + chosen) * (K_max + 1) + drafted) * (K_max + 1) + accepted``,
  indexing a step's counts by phase and chosen depth (0..2 * (K_max + 1) ** 3).

vLLM reports what a step sampled, not what it accepted: a request that verified
``drafted`` drafts and sampled ``n`` tokens accepted ``n - 1``, so the loops over a
step add ``n`` to ``sampled_base(drafted)``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

from vllm_ds4x.depth.phase_tracker import ANSWER, REASONING

RETIRED = -1
"""The slot of a request that has left (no group, no decisions)."""


class TallyCodec:
    """Codes for one K_max (see the module docstring)."""

    __slots__ = ("k1", "k_max", "outcomes", "size")

    def __init__(self, k_max: int) -> None:
        self.k_max, self.k1 = k_max, k_max + 1
        self.outcomes = self.k1**2
        """length of a request's outcome table"""
        self.size = 2 * self.k1**3
        """length of a step's tally by phase and chosen depth"""

    def slot(self, phase: str, chosen: int) -> int:
        """The base of a request's tallies: its phase and chosen depth."""
        return ((phase == ANSWER) * self.k1 + chosen) * self.outcomes

    def outcome(self, drafted: int, accepted: int) -> int:
        return drafted * self.k1 + accepted

    def sampled_base(self, drafted: int) -> int:
        """outcome(drafted, n - 1) is sampled_base(drafted) + n, for n tokens sampled."""
        return drafted * self.k1 - 1

    def unpack(self, code: int) -> tuple[str, int, int, int]:
        """(phase, chosen depth, drafted, accepted) of a tally code."""
        rest, accepted = divmod(code, self.k1)
        slot, drafted = divmod(rest, self.k1)
        answer, chosen = divmod(slot, self.k1)
        return ANSWER if answer else REASONING, chosen, drafted, accepted

    def tallies(self, counts: list[int] | dict[int, int]) -> Iterator[tuple[str, int, int, int, int]]:
        """(phase, chosen, drafted, verifications, accepted tokens in all) of every
        nonzero tally in `counts` (a step's list, or a dict of the few it has)."""
        items = counts.items() if isinstance(counts, dict) else enumerate(counts)
        for code, count in items:
            if count:
                phase, chosen, drafted, accepted = self.unpack(code)
                yield phase, chosen, drafted, count, accepted * count


@functools.cache
def positions_seen(k_max: int) -> tuple[tuple[int, int, int], ...]:
    """For each outcome code with drafts: the code, how many positions it saw (up to
    the first rejection), and how many it accepted."""
    k1 = k_max + 1
    return tuple((drafted * k1 + accepted, accepted + 1 if accepted < drafted else drafted, accepted)
                 for drafted in range(1, k1) for accepted in range(drafted + 1))
