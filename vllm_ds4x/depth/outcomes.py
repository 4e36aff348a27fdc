# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Adaptive's per-request outcome tables, counted when they are read.

A step where every request verified the same number of drafts is logged as it
came: the tokens each request sampled, one byte each, in the batch's order. A
request's table takes in its own column of the logged steps (a strided slice,
counted in C) only when it is read: it decides, changes phase or leaves. Every
table takes in the rest when the batch changes (a request arrives or leaves,
or the order changes), when the drafts a step change, or when the log is full. A steady batch then costs one append
a step instead of a pass over its requests; the counts are the same, counted
later.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_SAMPLED = 255
"""the most tokens a logged step may sample per request (one byte)"""
MAX_LOGGED_STEPS = 256
"""steps kept (a byte per request each): a flush costs a column per request, so it
is kept rare; most requests take in their column when they decide, before it"""
STEPWISE_BELOW = 4
"""a flush of fewer steps goes step by step (a column per request costs more)"""


class OutcomeLog:
    """The logged steps of one batch: the same requests, in one order."""

    def __init__(self, k_max: int) -> None:
        self.k1 = k_max + 1
        self.tables: list[list[int]] = []
        """the batch's outcome tables, by position"""
        self.index: dict[str, int] = {}
        """position by request id"""
        self.steps = bytearray()
        """the logged steps' sampled token counts, step after step, by position (0: nothing sampled)"""
        self.logged = 0
        self.base = 0
        """TallyCodec.sampled_base of the logged steps' drafts"""
        self.taken: list[int] = []
        """by position: logged steps already in its table"""
        self.early: list[int] = []
        """positions that took some steps in before the flush"""

    def batch(self, ids: Sequence[str], tables: list[list[int]]) -> None:
        """A new batch (`tables`: its requests', in the order of `ids`); the old one's steps go into theirs first."""
        self.flush()
        self.tables, self.index, self.taken = tables, dict(zip(ids, range(len(ids)))), [0] * len(ids)

    def add(self, base: int, sampled: Sequence[int]) -> None:
        """A step of the batch where every request drafted alike (`base`: its
        TallyCodec.sampled_base; `sampled`: a count for each, at most MAX_SAMPLED)."""
        if base != self.base or self.logged >= MAX_LOGGED_STEPS:
            self.flush()
            self.base = base
        self.steps += bytes(sampled)
        self.logged += 1

    def take(self, request_id: str, table: list[int]) -> None:
        """Before a request's `table` is read: its column of the logged steps into it."""
        i = self.index.get(request_id)
        if i is None or self.tables[i] is not table or (start := self.taken[i]) == self.logged:
            return  # not in the logged batch (new, or an earlier request of that id), or taken already
        width = len(self.tables)
        self._count(table, self.steps[start * width + i :: width], 1)
        if not start:
            self.early.append(i)
        self.taken[i] = self.logged

    def flush(self) -> None:
        """Every table takes in what it has not taken yet; the log starts empty."""
        if not self.logged:
            return
        steps, tables, width = self.steps, self.tables, len(self.tables)
        if self.logged < STEPWISE_BELOW:
            base = self.base
            for step in range(self.logged):
                for table, n in zip(tables, steps[step * width : (step + 1) * width]):
                    if n:
                        table[base + n] += 1
            for i in self.early:  # they had their first taken[i] steps already
                self._count(tables[i], steps[i : self.taken[i] * width : width], -1)
        else:
            for i, (table, start) in enumerate(zip(tables, self.taken)):
                self._count(table, steps[start * width + i :: width], 1)
        self.steps, self.logged, self.taken = bytearray(), 0, [0] * width
        self.early.clear()

    def _count(self, table: list[int], column: bytes | bytearray, sign: int) -> None:
        """One request's sampled counts (`column`) into its table, by outcome code."""
        base = self.base
        for n in range(1, self.k1 + 1):
            if count := column.count(n):
                table[base + n] += sign * count
