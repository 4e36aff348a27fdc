# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""lk_moe's GPU expert pool (vllm_ds4x.hooks.moe_pool) on vLLM's Prometheus /metrics.

Prometheus counters (beside vLLM's own; labels ``model_name`` and ``engine`` like theirs)::

    vllm:lk_moe_pool_hits_total          routed experts a pooled layer found in a landed VRAM slot (the GPU computed them)
    vllm:lk_moe_pool_misses_total        routed experts it found in none (the CPU computed them)
    vllm:lk_moe_pool_pumps_total         experts the pool's DMA worker copied into a slot
    vllm:lk_moe_pool_pumped_bytes_total  the bytes those copies moved (lk_moe's own count)
    vllm:lk_moe_pool_cover_miss_total    lk_moe's own exactly-once checks: experts neither half computed,
    vllm:lk_moe_pool_cover_dup_total     and experts both halves computed; both should stay 0

and a gauge, ``vllm:lk_moe_device_memory_bytes``: the VRAM lk_moe holds (its slots, prefill arena and
staging ring: ``lk_moe.get_device_mem_usage()``).

All layers together: lk_moe 2.7.4 counts its pool once per process (``lk_moe.pool_stats()``), not per
layer, and a layer's ``pool_layer_info()`` gives its slots' geometry but no counts, so there is no
per-layer hit ratio. The bytes are lk_moe's own ``bytes`` count (the ``B=`` of its ``[pool]`` log
line); from an lk_moe that lacks it, pumps x one slot's bytes, from each pooled layer's
``pool_layer_info()`` (``slot_weight_bytes`` plus ``slot_scale_bytes`` over its parts; the same for
every layer of one model, and where they differ, their mean).

Nothing is exported without the pool: no sample and no name. An engine exports them once a layer
of its process pooled (LK_POOL_SLOTS set), which is the single-GPU case: the uniproc executor runs
the worker, and so lk_moe, in the engine core's process. With tensor or pipeline parallel workers
(the multiproc executor) lk_moe lives in the workers' processes and nothing is exported; lk_moe's own
``[pool]`` log lines (LK_POOL_LOG) still report there.

Hit ratio (all pooled layers)::

    sum(rate(vllm:lk_moe_pool_hits_total[5m])) /
    (sum(rate(vllm:lk_moe_pool_hits_total[5m])) + sum(rate(vllm:lk_moe_pool_misses_total[5m])))

Bytes pumped per second (host to GPU)::

    sum(rate(vllm:lk_moe_pool_pumped_bytes_total[5m]))

How they travel, as vLLM's own counters do: each step the scheduler (in the engine core) puts on
its SchedulerStats what lk_moe's counts grew by since the step that last carried them, and the
gauge's value now (`snapshot`: `PoolGrowth`, only when a count grew or the gauge moved). Those
reach the API server in the engine core's outputs; there vLLM's PrometheusStatLogger hands them to
`PoolProm`, which adds each to its counter. The engine core hands each step's stats to one
front-end only, so with several API server processes (``--api-server-count``, Prometheus'
multiprocess mode) each growth is counted once, by one of them, and their sum is the engine's
count. An lk_moe that counts from 0 again (a count went down) has its counts taken whole, never a
negative growth.

Dashboards over these (Grafana, Perses): examples/dashboards in the ds4x repository.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

COUNTERS = ("hits", "misses", "pumps", "pumped_bytes", "cover_miss", "cover_dup")
"""lk_moe's pool counts (PoolGrowth carries what each grew by), each a Prometheus counter
`vllm:lk_moe_pool_<name>`"""
DEVICE_GAUGE = "vllm:lk_moe_device_memory_bytes"
_HELP = {
    "hits": "Routed experts of lk_moe's pooled layers found in a landed GPU slot (all layers together).",
    "misses": "Routed experts of lk_moe's pooled layers found in no GPU slot: the CPU computed them.",
    "pumps": "Experts lk_moe's pool copied into a GPU slot.",
    "pumped_bytes": "Bytes lk_moe's pool copied into GPU slots.",
    "cover_miss": "Pooled experts neither lk_moe half computed (lk_moe's exactly-once check; should stay 0).",
    "cover_dup": "Pooled experts both lk_moe halves computed (lk_moe's exactly-once check; should stay 0).",
}


def metric_name(counter: str) -> str:
    """The counter's name as registered; Prometheus exports it with a `_total` suffix."""
    return f"vllm:lk_moe_pool_{counter}"


@dataclass
class PoolCounts:
    """lk_moe's pool counts since its process started (all pooled layers), as the engine core read them."""

    hits: int = 0
    misses: int = 0
    pumps: int = 0
    pumped_bytes: int = 0
    cover_miss: int = 0
    cover_dup: int = 0


@dataclass
class PoolGrowth(PoolCounts):
    """What one engine's pool counts grew by since the step that last carried them, and the device
    bytes lk_moe holds now: what one step's SchedulerStats carries to one front-end."""

    device_bytes: int = 0


def slot_bytes(info: Mapping[str, Any]) -> int:
    """One slot's bytes from a layer's pool_layer_info(): weights and scales of each part (gate, up,
    down; up and down for a layer without a gate)."""
    parts = 3 if info.get("has_gate", True) else 2
    return sum(int(b) for b in list(info["slot_weight_bytes"])[:parts]) + \
        sum(int(b) for b in list(info["slot_scale_bytes"])[:parts])


def bytes_per_pump(slots: Mapping[int, int]) -> int:
    """What one pump moves, from each pooled layer's slot bytes: theirs when they agree (one model's
    MoE layers share one shape), their mean otherwise (lk_moe counts pumps for all layers together)."""
    if not slots:
        return 0
    return round(sum(slots.values()) / len(slots))


def counts(stats: Mapping[str, Any], per_pump: int) -> PoolCounts:
    """lk_moe's pool_stats() as PoolCounts: its `bytes`, else pumps x `per_pump` (any other count it
    lacks is 0)."""
    count = {key: int(stats.get(key, 0)) for key in ("hits", "misses", "pumps", "cover_miss", "cover_dup")}
    pumped = int(stats["bytes"]) if "bytes" in stats else count["pumps"] * per_pump
    return PoolCounts(pumped_bytes=pumped, **count)


def growth(last: PoolCounts | None, now: PoolCounts, device_bytes: int) -> PoolGrowth:
    """What each count grew by from `last` to `now`, never negative: the first counts and those where any
    count went down (lk_moe counting from 0 again) are new counts, all of them."""
    reset = last is None or any(getattr(now, k) < getattr(last, k) for k in COUNTERS)
    base = PoolCounts() if reset or last is None else last
    return PoolGrowth(device_bytes=int(device_bytes), **{k: getattr(now, k) - getattr(base, k) for k in COUNTERS})


class Reader:
    """The engine core's side: the pooled layers of this process (moe_pool.attach adds each) and
    lk_moe's counts, read each step; what they grew by is handed on only when something changed."""

    def __init__(self, read_stats: Callable[[], Mapping[str, Any]] | None = None,
                 read_device: Callable[[], int] | None = None) -> None:
        self.slots: dict[int, int] = {}  # lk_moe layer id -> one slot's bytes (for an lk_moe that counts no bytes)
        self._read_stats, self._read_device = read_stats, read_device
        self._last: PoolCounts | None = None  # the counts the last growth handed on reached
        self._device: int | None = None  # the device bytes last handed on

    def add_layer(self, layer_id: int, info: Mapping[str, Any]) -> None:
        self.slots[layer_id] = slot_bytes(info)

    def snapshot(self) -> PoolGrowth | None:
        """What the counts grew by since the last growth handed on, and the device bytes now; None: no
        pooled layer in this process, lk_moe's pool off, or no count grew and the device bytes stayed."""
        if not self.slots:
            return None
        if self._read_stats is None or self._read_device is None:
            import lk_moe

            self._read_stats, self._read_device = lk_moe.pool_stats, lk_moe.get_device_mem_usage
        stats = self._read_stats()
        if not stats.get("enabled", 1):
            return None
        now = counts(stats, bytes_per_pump(self.slots))
        grown = growth(self._last, now, self._read_device())
        if now == self._last and grown.device_bytes == self._device:
            return None
        self._last, self._device = now, grown.device_bytes
        return grown


_reader = Reader()


def add_layer(layer_id: int, info: Mapping[str, Any]) -> None:
    """A layer whose pool started (moe_pool.attach): its lk_moe layer id and pool_layer_info()."""
    _reader.add_layer(layer_id, info)


def snapshot() -> PoolGrowth | None:
    """For this step's SchedulerStats (the scheduler's hook): see Reader.snapshot."""
    return _reader.snapshot()


class PoolProm:
    """The API server's side: the counters above, one child per engine like vLLM's own, registered
    on the first counts an engine sends (so an engine without the pool exports nothing). Each growth
    reaches one front-end once, so it is added as it comes: no state of the engine's is kept here."""

    def __init__(self, counter_cls: Any, gauge_cls: Any, labelnames: list[str],
                 per_engine_labelvalues: dict[int, list[object]]) -> None:
        self._counter_cls, self._gauge_cls = counter_cls, gauge_cls
        self._labelnames, self._labelvalues = labelnames, per_engine_labelvalues
        self._children: dict[int, dict[str, Any]] | None = None

    def _register(self) -> dict[int, dict[str, Any]]:
        made = {k: self._counter_cls(name=metric_name(k), documentation=_HELP[k], labelnames=self._labelnames)
                for k in COUNTERS}
        made["device_bytes"] = self._gauge_cls(
            name=DEVICE_GAUGE, documentation="Device bytes lk_moe holds: its expert pool's slots, prefill arena "
            "and staging ring.", labelnames=self._labelnames, multiprocess_mode="mostrecent")
        return {idx: {k: metric.labels(*lv) for k, metric in made.items()} for idx, lv in self._labelvalues.items()}

    def observe(self, grown: PoolGrowth | None, engine_idx: int = 0) -> None:
        if grown is None:
            return
        if self._children is None:
            self._children = self._register()
        children = self._children[engine_idx]
        for key in COUNTERS:
            if by := getattr(grown, key):
                children[key].inc(by)
        children["device_bytes"].set(grown.device_bytes)
