# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""lk_moe's GPU expert pool (lk_moe >= 2.7): its settings, checked once, and the VRAM it takes.

Each pooled layer keeps ``LK_POOL_SLOTS`` of its experts in VRAM; a DMA worker in lk_moe fills the
slots with the experts routed twice within ``LK_POOL_WINDOW`` decode steps, and a snapshot word per
expert says, each step, which half computes it: the GPU the pooled ones, the CPU the rest, every
expert once. lk_moe takes these settings from its MOEConfigV2, never from the environment, so the
engine's hook (vllm_ds4x.hooks.moe_pool) reads the names lk_moe documents and sets them; ``plan``
reads the same names from a serving script. A resident layer and a draft layer never pool.

Pure Python: the tool imports it to plan the VRAM before any engine exists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from vllm_ds4x.moe.placement import ModelShape, PlacementError, parse_flag, parse_positive_int

SLOTS_ENV = "LK_POOL_SLOTS"  # expert slots per pooled layer; 0 or unset: no pool
WINDOW_ENV = "LK_POOL_WINDOW"  # the pump's reuse window, in decode steps
INFLIGHT_ENV = "LK_POOL_INFLIGHT"  # host-to-GPU copies in flight
LOG_ENV = "LK_POOL_LOG"  # lk_moe logs a [pool] line every N decode steps (0: never)
PROBE_ENV = "LK_ROUTE_PROBE"  # lk_moe logs each step's routing ([RP] lines), for a routing trace
NAMES = (SLOTS_ENV, WINDOW_ENV, INFLIGHT_ENV, LOG_ENV, PROBE_ENV)
UNBRIDGED: dict[str, str] = {
    "LK_POOL_DECODE": f"the fork runs the pool's GPU half wherever {SLOTS_ENV} > 0, so remove it ({SLOTS_ENV}=0: no pool)",
    "LK_VERIFY_RESIDENT": "ds4x does not wire lk_moe's own verify policies into the fork (not yet run), so remove it",
    "LK_VERIFY_SKIP_MISS": "ds4x does not wire lk_moe's own verify policies into the fork (not yet run), so remove it",
}
"""lk_moe's pool and verify names that its sglang integration bridges into the config and the fork does
not: in a fork script they do nothing (what to do instead)"""
MIN_WINDOW = 8  # lk_moe's floor
POOL_ROWS = 2
"""lk_moe 2.7.4's cpu_decode skips the pooled experts only in a call of 1 or 2 rows (top-6); from 3 rows
on it computes every expert itself and the pool gives nothing (bench.pool_decode, ci/fork-gpu/pool_order.py)"""
MAX_SLOTS = 4096  # more than any model's experts per layer: bounds the table built from it


@dataclass(frozen=True)
class PoolSettings:
    slots: int = 0
    window: int = 32  # lk_moe 2.7.4's defaults
    inflight: int = 16
    log_every: int = 0
    route_probe: bool = False

    @property
    def on(self) -> bool:
        return self.slots > 0


def pool_settings(env: Mapping[str, str]) -> PoolSettings:
    """The LK_POOL_* settings in `env`, each checked; a bad one is one PlacementError naming it."""
    default = PoolSettings()
    slots = parse_positive_int(env.get(SLOTS_ENV), SLOTS_ENV, 0)
    if slots > MAX_SLOTS:
        raise PlacementError(f"{SLOTS_ENV}={slots}: at most {MAX_SLOTS} (a layer has fewer experts)")
    return PoolSettings(
        slots=slots,
        window=parse_positive_int(env.get(WINDOW_ENV), WINDOW_ENV, default.window, minimum=MIN_WINDOW),
        inflight=parse_positive_int(env.get(INFLIGHT_ENV), INFLIGHT_ENV, default.inflight, minimum=1),
        log_every=parse_positive_int(env.get(LOG_ENV), LOG_ENV, 0),
        route_probe=parse_flag(env.get(PROBE_ENV), PROBE_ENV, default=False),
    )


def setting_parser(name: str) -> Callable[[str], PoolSettings]:
    """One LK_POOL_* variable's parser, alone (a script's check reads each variable it sets)."""
    return lambda value: pool_settings({name: value})


def check_layer(settings: PoolSettings, experts: int, top_k: int, named: str = f"{SLOTS_ENV}=") -> None:
    """A pool holds at least one token's experts and at most the layer's (`named`: how the message names the value)."""
    if settings.on and not top_k <= settings.slots <= experts:
        raise PlacementError(f"{named}{settings.slots}: a layer with {experts} experts, top-{top_k}, "
                             f"pools {top_k} to {experts} of them; set it in that range, or 0 for no pool")


def pool_bytes(settings: PoolSettings, pooled_layers: int, expert_bytes: int) -> int:
    """The slots' VRAM: one expert's weights and scales per slot per pooled layer."""
    return settings.slots * pooled_layers * expert_bytes


def budget_pool_bytes(settings: PoolSettings, shape: ModelShape, tp_size: int) -> int:
    """What the pool takes from the resident layers' budget, per GPU: slots on every MoE layer (the
    resident ones, chosen from what is left, never pool: an upper bound by their share)."""
    return pool_bytes(settings, len(shape.moe_layers), shape.expert_bytes) // tp_size
