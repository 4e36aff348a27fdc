# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Which phase a request is in, reasoning or answer, from its token ids.

Markers may span several tokens. The prompt decides the start (a chat template
that disables thinking has already closed the section); then each end marker
(``</think>``, and the DeepSeek-V4 tool-call marker) ends reasoning and a start
marker re-enters it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

REASONING, ANSWER = "reasoning", "answer"
PHASES = (REASONING, ANSWER)


class PhaseTracker:
    """Reasoning or answer, from token ids. Nothing is kept per request: a marker
    is looked for in the request's own token history, and only when a marker's
    last token has just arrived."""

    def __init__(self, start_markers: Iterable[Sequence[int]], end_markers: Iterable[Sequence[int]]) -> None:
        self.start = [tuple(m) for m in start_markers if m]
        self.end = [tuple(m) for m in end_markers if m]
        self.last_tokens = frozenset(m[-1] for m in [*self.start, *self.end])

    @staticmethod
    def _last(ids: Sequence[int], markers: list[tuple[int, ...]]) -> int:
        """End position of the last occurrence of any marker, -1 if none."""
        best = -1
        for marker in markers:
            n = len(marker)
            for i in range(len(ids) - n, best - n, -1):
                if tuple(ids[i : i + n]) == marker:
                    best = max(best, i + n)
                    break
        return best

    def initial(self, prompt: Sequence[int]) -> str:
        """Reasoning unless the prompt's last marker closed it."""
        return ANSWER if self._last(prompt, self.end) > self._last(prompt, self.start) else REASONING

    def feed(self, phase: str, history: Sequence[int], new: int) -> str:
        """The phase after the last `new` tokens of `history` (all of the
        request's tokens so far) arrived."""
        for end in range(max(len(history) - new, 0) + 1, len(history) + 1):
            if history[end - 1] not in self.last_tokens:  # the common case: no marker ends here
                continue
            if any(len(m) <= end and tuple(history[end - len(m) : end]) == m for m in self.end):
                phase = ANSWER
            elif any(len(m) <= end and tuple(history[end - len(m) : end]) == m for m in self.start):
                phase = REASONING
        return phase
