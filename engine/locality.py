"""Routing with locality, seeded: what a real router's experts look like from one step to the next.

Two knobs per layer: a popularity skew (Zipf exponent `skew` over a fixed random order of the
experts; 0 is uniform) and a temporal reuse `reuse`, the chance that each of a token's experts
repeats one of the previous token's. `reuse=0, skew=0` is the uniform random router of the
stand-ins. `measured` says what a stream of steps really had, so a reader sees the input.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt


@dataclass
class Router:
    experts: int
    top_k: int
    skew: float = 0.0
    reuse: float = 0.0
    seed: int = 0
    rng: np.random.Generator = field(init=False)
    popularity: npt.NDArray[np.float64] = field(init=False)
    previous: list[int] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        if not 0 < self.top_k <= self.experts:
            raise ValueError(f"top_k {self.top_k}: expected 1 to experts ({self.experts})")
        if not (0.0 <= self.reuse <= 1.0 and 0.0 <= self.skew <= 4.0):
            raise ValueError(f"reuse {self.reuse}, skew {self.skew}: expected reuse in [0, 1], skew in [0, 4]")
        self.rng = np.random.default_rng(self.seed)
        weights = 1.0 / np.arange(1, self.experts + 1) ** self.skew
        self.popularity = np.empty(self.experts)
        self.popularity[self.rng.permutation(self.experts)] = weights / weights.sum()

    def token(self) -> list[int]:
        """One token's top_k distinct experts: each a repeat of the previous token's with chance
        `reuse`, else drawn by popularity among those not yet chosen."""
        chosen: list[int] = []
        for _ in range(self.top_k):
            repeats = [e for e in self.previous if e not in chosen]
            if repeats and self.rng.random() < self.reuse:
                chosen.append(int(self.rng.choice(repeats)))
                continue
            p = self.popularity.copy()
            p[chosen] = 0.0
            chosen.append(int(self.rng.choice(self.experts, p=p / p.sum())))
        self.previous = chosen
        return chosen

    def step(self, tokens: int) -> npt.NDArray[np.int32]:
        """[tokens, top_k] ids for one decode step of `tokens` rows (one request, its verify depth + 1)."""
        return np.array([self.token() for _ in range(tokens)], dtype=np.int32)


def measured(steps: list[npt.NDArray[np.int32]]) -> dict[str, float]:
    """What a stream of steps had: the share of each token's experts found among the previous
    token's (reuse), and the distinct experts per step by its row count."""
    repeats = total = 0
    previous: set[int] = set()
    distinct: dict[int, list[int]] = {}
    for ids in steps:
        real = [row[row >= 0] for row in ids]
        for row in real:
            if previous:
                repeats += len(set(row.tolist()) & previous)
                total += len(row)
            previous = set(row.tolist())
        rows = sum(1 for row in real if len(row))
        distinct.setdefault(rows, []).append(len({int(e) for row in real for e in row}))
    out = {"reuse": repeats / total if total else 0.0}
    out |= {f"distinct_{rows}": float(np.mean(v)) for rows, v in sorted(distinct.items())}
    return out
