"""`plan --check-launch`'s choice between lk_moe's expert pool and whole resident MoE layers, for the
VRAM a script leaves for resident layers (docs/expert-pool.md).

The arithmetic: R whole layers of the L MoE layers take R/L of the routed-expert reads off the CPU at
every depth. A pool of S slots on every MoE layer takes the hit rate h of them, but only in steps of
at most pool.POOL_ROWS rows: from 3 rows on, lk_moe 2.7.4's cpu_decode computes every expert itself. A
policy's two phases count one step each, weighed by the experts that step reads (uniform routing).
The hit rate is the user's own (`--pool-hit-rate`); without it the advice gives the hit rate above
which the pool wins."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ds4x.errors import Ds4xError
from vllm_ds4x.moe import placement as mp
from vllm_ds4x.moe import pool

RUN = "bench/results/h100-pool-decode"
RUN_FILES = ("pool-12.json", "pool-32.json")
ENGINE_RUN = "bench/results/h100-dsv4-e2e-pool-r038"
GPU_HALF_MS = 0.23
"""ms a pooled layer adds to a depth-0 step in the engine: its GPU half runs after its CPU half (the rest of
a step with the pool, 7.7 ms, less that with whole layers, 6.3, over 6 pooled layers; ENGINE_RUN's report)"""
HOW = (f"to read yours, run with {pool.SLOTS_ENV} set and {pool.LOG_ENV}=200 and take `cum hit` from lk_moe's "
       f"[pool] lines (docs/expert-pool.md), then give --pool-hit-rate H")


@dataclass(frozen=True)
class Room:
    """The two ways to spend the VRAM left for resident layers (no pool counted)."""

    budget: int
    layers: tuple[int, ...]
    """the whole layers the plan fits in it"""
    layer_bytes: int
    """one whole layer, per GPU"""
    slots: int
    """slots per MoE layer that fit it; 0 where fewer than one token's experts fit"""
    pool_bytes: int
    moe_layers: int

    @property
    def whole_share(self) -> float:
        """The share of the routed-expert reads the whole layers take off the CPU, at any depth."""
        return len(self.layers) / self.moe_layers


def room(shape: mp.ModelShape, budget: int, tp: int, layers: tuple[int, ...]) -> Room:
    """Whole layers or the most slots on every MoE layer (resident layers never pool) that `budget` holds."""
    slots = min(shape.n_routed_experts, max(budget, 0) * tp // (len(shape.moe_layers) * shape.expert_bytes))
    slots = slots if slots >= shape.top_k else 0
    return Room(budget=budget, layers=layers, layer_bytes=shape.layer_bytes_per_gpu(tp), slots=slots,
                pool_bytes=pool.budget_pool_bytes(pool.PoolSettings(slots=slots), shape, tp),
                moe_layers=len(shape.moe_layers))


def pool_share(hit: float, depth: int, requests: int = 1) -> float:
    """The share of a step's CPU-expert reads the pool takes: the hit rate, where the step has few enough rows."""
    return hit if requests * (1 + depth) <= pool.POOL_ROWS else 0.0


def reads(shape: mp.ModelShape, depth: int) -> float:
    """Distinct experts a layer reads in one request's step at `depth`: 1 + depth tokens, each routed to
    top_k distinct experts drawn uniformly."""
    n, k = shape.n_routed_experts, shape.top_k
    return n * (1 - (1 - k / n) ** (1 + depth))


def policy_share(shape: mp.ModelShape, hit: float, depths: tuple[int, ...]) -> float:
    """The pool's share of the reads of one step at each of `depths` (a policy's phases)."""
    total = sum(reads(shape, d) for d in depths)
    return sum(pool_share(hit, d) * reads(shape, d) for d in depths) / total


def break_even(shape: mp.ModelShape, space: Room, depths: tuple[int, ...]) -> float | None:
    """The hit rate above which the pool takes more than the whole layers; None: no hit rate does."""
    most = policy_share(shape, 1.0, depths)
    return space.whole_share / most if most and space.whole_share < most else None


@dataclass(frozen=True)
class Measured:
    """One committed run of the pool on one layer: a layer call's time with the pool over the CPU alone."""

    slots: int
    locality: str
    hit_rate: float
    ratio: dict[int, float]


def measured(root: Path) -> list[Measured]:
    """Every run of the committed pool measurement (RUN); a missing or changed file is one error naming it."""
    runs = []
    for name in RUN_FILES:
        path = root / RUN / name
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            runs += [Measured(slots=int(data["slots"]), locality=str(r["locality"]), hit_rate=float(r["hit_rate"]),
                              ratio={int(d): float(v) for d, v in r["ratio"].items()}) for r in data["runs"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise Ds4xError(f"{path}: {str(e)[:100]}", "the pool advice reads the committed run: restore it from "
                                                       "git") from None
    return runs


def nearest(runs: list[Measured], hit: float, slots: int) -> Measured:
    """The run nearest in hit rate (then in slots) to the user's."""
    return min(runs, key=lambda r: (abs(r.hit_rate - hit), abs(r.slots - slots)))


@dataclass(frozen=True)
class Policy:
    """A script's draft depths as the pool sees them."""

    name: str
    """"phase 0/2", "fixed 2", "no speculation", ..."""
    k: int
    depths: tuple[int, ...] | None
    """the depth of each phase (reasoning, answer); None where each request chooses its own (adaptive)"""


@dataclass(frozen=True)
class PoolAdvice:
    message: str
    winner: str | None
    """"pool" or "layers"; None where it cannot say (no hit rate, or adaptive depths)"""
    short: str
    """why, in one clause (the comment --write puts above the settings it changes)"""


def _gib(n: int) -> str:
    return f"{n / mp.GIB:.2f} GiB"


def _options(space: Room) -> str:
    layers = ",".join(map(str, space.layers)) or "none"
    return (f"expert pool or whole layers in the {_gib(space.budget)} this script leaves for resident layers: "
            f"{len(space.layers)} whole layer(s) ({_gib(len(space.layers) * space.layer_bytes)}, "
            f"{mp.LAYERS_ENV}={layers}) take {space.whole_share:.1%} of the routed-expert reads off the CPU at every "
            f"depth; a pool of {space.slots} slots on each of the {space.moe_layers} MoE layers "
            f"({_gib(space.pool_bytes)}, {pool.SLOTS_ENV}={space.slots}) takes your hit rate of them in steps of 1 "
            f"or 2 rows (depth 0 or 1; with two requests in a step, depth 0 only) and none from 3 rows on, where "
            f"lk_moe 2.7.4's cpu_decode computes every expert")


def advise(shape: mp.ModelShape, space: Room, policy: Policy, hit: float | None, root: Path) -> PoolAdvice | None:
    """The paragraph naming both options with their figures, and the winner at the policy's depths."""
    if not space.slots:
        return None  # no pool fits: the resident-layer checks say the rest
    text = _options(space)
    runs = measured(root)
    if policy.depths is None:
        return PoolAdvice(f"{text}. {policy.name} chooses each request's depth as it runs, so no winner is "
                          f"advised here ({RUN} measured the pool per depth: docs/expert-pool.md)", None, "")
    steps = " + ".join(f"{reads(shape, d):.1f}" for d in policy.depths)
    even = break_even(shape, space, policy.depths)
    above = (f"the pool wins above a hit rate of {even:.2f}" if even is not None
             else "no hit rate makes the pool win")
    at = (f"at {policy.name} (depth {' reasoning, '.join(map(str, policy.depths))} answering), counting one "
          f"step of each phase ({steps} experts a layer)")
    if hit is None:
        low, high = min(r.hit_rate for r in runs), max(r.hit_rate for r in runs)
        return PoolAdvice(f"{text}. {at[0].upper()}{at[1:]}, {above}. No --pool-hit-rate given, so neither is "
                          f"advised: {HOW}; the committed one-layer runs measured {low:.2f}-{high:.2f} ({RUN})",
                          None, "")
    pooled, whole = policy_share(shape, hit, policy.depths), space.whole_share
    winner = "pool" if pooled > whole else "layers"
    by_depth = " / ".join(f"{pool_share(hit, d):.1%}" for d in range(policy.k + 1))
    run = nearest(runs, hit, space.slots)
    ratios = " / ".join(f"{run.ratio[d]:.3f}" for d in sorted(run.ratio))
    short = (f"at hit rate {hit:.2f} (--pool-hit-rate) and {policy.name} the pool takes {pooled:.1%} of the CPU's "
             f"expert reads, {len(space.layers)} whole layer(s) {whole:.1%}")
    wins = "the pool wins" if winner == "pool" else "whole layers win"
    return PoolAdvice(
        f"{text}. At your hit rate {hit:.2f} (--pool-hit-rate) the pool takes {by_depth} at depth "
        f"{' / '.join(map(str, range(policy.k + 1)))}; {at}: pool {pooled:.1%}, whole layers {whole:.1%}, so "
        f"{wins} ({above}). Measured on one layer (H100, {run.slots} slots, hit rate {run.hit_rate:.2f}, {RUN}): "
        f"a call took {ratios} of the CPU alone's time at depth {' / '.join(map(str, sorted(run.ratio)))}"
        f"{_gpu_half(space)}", winner, short)


def _gpu_half(space: Room) -> str:
    """What the read shares leave out: the GPU half's time on the step (ENGINE_RUN)."""
    return (f". The shares leave out the pool's GPU half, which runs after the CPU half in each layer: in the "
            f"engine it added about {GPU_HALF_MS} ms a pooled layer to a step ({ENGINE_RUN}, H100), about "
            f"{GPU_HALF_MS * space.moe_layers:.1f} ms a step on {space.moe_layers} MoE layers, so the pool needs a "
            f"higher hit rate than the shares say")


def settings(winner: str, space: Room) -> dict[str, str]:
    """The variables that set the winner."""
    if winner == "pool":
        return {pool.SLOTS_ENV: str(space.slots), mp.LAYERS_ENV: "none"}
    return {pool.SLOTS_ENV: "0", mp.LAYERS_ENV: ",".join(map(str, space.layers)) or "none"}
