"""lk_moe's expert pool on /metrics (vllm_ds4x.hooks.pool_metrics): lk_moe's cumulative pool_stats()
become PoolTotals in the engine core, and the API server turns each engine's totals into counter
increments that are never negative, also when lk_moe starts counting again."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, ClassVar

import pytest

from vllm_ds4x.hooks import pool_metrics as pm

MIB = 1 << 20
# one DeepSeek-V4-Flash MXFP4 layer (hidden 4096, intermediate 2048): gate, up, down, 4 MiB of
# weights and 256 KiB of e8m0 scales each, as lk_moe 2.7.4's pool_layer_info() gives them
DSV4 = {"layer": 3, "has_gate": True, "slot_weight_bytes": [4 * MIB] * 3, "slot_scale_bytes": [MIB // 4] * 3}
# every key lk_moe 2.7.4's pool_stats() returns, in its order (read from the wheel on CPU: enabled is a
# bool, hit_rate a float, the rest ints)
STATS_KEYS = ("enabled", "hits", "misses", "pumps", "bytes", "oom", "stalls", "verify_fail", "resident", "not_ready",
              "stale_slot", "tag_bad", "publish_bad", "publish_lag", "cover_miss", "cover_dup", "hit_rate")


def lk_stats(hits: int, misses: int, pumps: int, cover_miss: int = 0, cover_dup: int = 0,
             per_pump: int = 100) -> dict[str, Any]:
    stats: dict[str, Any] = dict.fromkeys(STATS_KEYS, 0)
    stats.update(enabled=True, hits=hits, misses=misses, pumps=pumps, bytes=pumps * per_pump, cover_miss=cover_miss,
                 cover_dup=cover_dup, hit_rate=hits / (hits + misses) if hits + misses else 0.0, stalls=7,
                 publish_lag=2, resident=12)
    return stats


def at(epoch: str, hits: int, misses: int, pumps: int, cover_miss: int = 0) -> pm.PoolTotals:
    return pm.totals(lk_stats(hits, misses, pumps, cover_miss), 0, 5 * MIB, epoch)


def test_a_slot_is_one_experts_weights_and_scales() -> None:
    assert pm.slot_bytes(DSV4) == 12 * MIB + 3 * MIB // 4  # docs/expert-pool.md: 12.75 MiB a slot
    # no gate: up and down only, whatever lk_moe leaves in the third entry
    assert pm.slot_bytes({"has_gate": False, "slot_weight_bytes": [4, 5, 999], "slot_scale_bytes": [1, 2, 999]}) == 12


def test_a_pump_moves_one_slot_and_layers_that_differ_count_at_their_mean() -> None:
    assert pm.bytes_per_pump({}) == 0
    assert pm.bytes_per_pump({0: 300, 1: 300, 5: 300}) == 300
    assert pm.bytes_per_pump({0: 300, 1: 100}) == 200


def test_totals_take_lk_moes_counts_and_its_own_bytes() -> None:
    stats = {**lk_stats(hits=40, misses=60, pumps=9, cover_dup=1), "bytes": 1234}
    got = pm.totals(stats, 13 * MIB, 77, "e")
    assert got == pm.PoolTotals(epoch="e", hits=40, misses=60, pumps=9, pumped_bytes=1234, cover_miss=0,
                                cover_dup=1, device_bytes=77)
    assert {f.name for f in fields(pm.PoolTotals)} == {"epoch", "device_bytes", *pm.COUNTERS}


def test_without_lk_moes_bytes_a_pump_counts_one_slot() -> None:
    stats = {k: v for k, v in lk_stats(hits=40, misses=60, pumps=9).items() if k != "bytes"}
    assert pm.totals(stats, 13 * MIB, 0, "e").pumped_bytes == 9 * 13 * MIB
    assert pm.totals({"hits": 3.0}, 10, 0, "e") == pm.PoolTotals(epoch="e", hits=3)  # fewer keys: 0


def test_increments_are_what_each_count_grew_by() -> None:
    first = at("e", hits=10, misses=30, pumps=4)
    assert pm.increments(None, first) == {"hits": 10, "misses": 30, "pumps": 4, "pumped_bytes": 400,
                                          "cover_miss": 0, "cover_dup": 0}
    assert pm.increments(first, at("e", hits=15, misses=31, pumps=4)) == {
        "hits": 5, "misses": 1, "pumps": 0, "pumped_bytes": 0, "cover_miss": 0, "cover_dup": 0}
    assert set(pm.increments(first, first).values()) == {0}


@pytest.mark.parametrize("restarted", [
    at("e", hits=2, misses=500, pumps=1),  # same epoch, a count went down: lk_moe counts from 0 again
    at("f", hits=2, misses=500, pumps=9),  # a new engine core process: its counts are all new
])
def test_a_restarted_lk_moe_gives_its_counts_and_no_negative_increment(restarted: pm.PoolTotals) -> None:
    before = at("e", hits=100, misses=300, pumps=5)
    grown = pm.increments(before, restarted)
    assert all(v >= 0 for v in grown.values()), grown
    assert grown == {k: getattr(restarted, k) for k in pm.COUNTERS}


class Fake:
    """prometheus_client's Counter and Gauge as vLLM makes them: a labelled family, one child per engine."""

    made: ClassVar[list[Fake]] = []

    def __init__(self, name: str, documentation: str, labelnames: list[str], multiprocess_mode: str = "") -> None:
        assert documentation and labelnames == ["model_name", "engine"]
        self.name = name
        self.children: dict[tuple[object, ...], Child] = {}
        Fake.made.append(self)

    def labels(self, *values: object) -> Child:
        return self.children.setdefault(values, Child())


class Child:
    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float) -> None:
        if amount < 0:  # as prometheus_client's Counter.inc
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount

    def set(self, value: float) -> None:
        self.value = value


def prom() -> pm.PoolProm:
    Fake.made = []
    return pm.PoolProm(Fake, Fake, ["model_name", "engine"], {0: ["m", "0"], 1: ["m", "1"]})


def values(engine: str) -> dict[str, float]:
    return {f.name: f.children[("m", engine)].value for f in Fake.made}


def test_nothing_is_registered_until_an_engine_sends_counts() -> None:
    p = prom()
    p.observe(None, 0)
    p.observe(None, 1)
    assert Fake.made == []
    p.observe(at("e", hits=1, misses=1, pumps=0), 0)
    assert [f.name for f in Fake.made] == [*(pm.metric_name(k) for k in pm.COUNTERS), pm.DEVICE_GAUGE]


def test_each_engines_counters_follow_its_own_counts_through_a_restart() -> None:
    p = prom()
    p.observe(at("e", hits=10, misses=30, pumps=4), 0)
    p.observe(at("x", hits=1000, misses=1000, pumps=1000), 1)
    p.observe(at("e", hits=15, misses=35, pumps=5, cover_miss=1), 0)
    p.observe(at("e", hits=2, misses=1, pumps=1), 0)  # lk_moe counts from 0 again
    assert values("0") == {"vllm:lk_moe_pool_hits": 17, "vllm:lk_moe_pool_misses": 36, "vllm:lk_moe_pool_pumps": 6,
                           "vllm:lk_moe_pool_pumped_bytes": 600, "vllm:lk_moe_pool_cover_miss": 1,
                           "vllm:lk_moe_pool_cover_dup": 0, pm.DEVICE_GAUGE: 5 * MIB}
    assert values("1")["vllm:lk_moe_pool_hits"] == 1000


class Lk:
    """lk_moe's two module functions the reader calls."""

    def __init__(self) -> None:
        self.stats: Mapping[str, Any] = lk_stats(0, 0, 0)
        self.calls = 0

    def pool_stats(self) -> Mapping[str, Any]:
        self.calls += 1
        return self.stats

    def device(self) -> int:
        return 64 * MIB


def test_the_reader_reads_nothing_in_a_process_without_a_pooled_layer() -> None:
    lk = Lk()
    reader = pm.Reader(lk.pool_stats, lk.device)
    assert reader.snapshot() is None and lk.calls == 0


def test_the_reader_hands_on_counts_only_when_they_changed() -> None:
    lk = Lk()
    reader = pm.Reader(lk.pool_stats, lk.device)
    reader.add_layer(3, DSV4)
    reader.add_layer(4, DSV4)
    lk.stats = lk_stats(hits=5, misses=7, pumps=2)
    first = reader.snapshot()
    assert first is not None and (first.hits, first.misses, first.pumps) == (5, 7, 2)
    assert first.pumped_bytes == 200 and first.device_bytes == 64 * MIB and first.epoch
    assert reader.snapshot() is None  # nothing counted since
    lk.stats = lk_stats(hits=6, misses=7, pumps=2)
    again = reader.snapshot()
    assert again is not None and again.hits == 6 and again.epoch == first.epoch
    lk.stats = {**lk_stats(hits=9, misses=9, pumps=9), "enabled": False}
    assert reader.snapshot() is None  # lk_moe says its pool is off


def test_a_new_reader_is_a_new_epoch() -> None:
    lk = Lk()
    lk.stats = lk_stats(1, 1, 1)
    epochs = set()
    for _ in range(2):
        reader = pm.Reader(lk.pool_stats, lk.device)
        reader.add_layer(0, DSV4)
        got = reader.snapshot()
        assert got is not None
        epochs.add(got.epoch)
    assert len(epochs) == 2


def test_the_reader_counts_a_slot_a_pump_from_an_lk_moe_without_bytes() -> None:
    lk = Lk()
    lk.stats = {k: v for k, v in lk_stats(hits=1, misses=1, pumps=3).items() if k != "bytes"}
    reader = pm.Reader(lk.pool_stats, lk.device)
    reader.add_layer(3, DSV4)
    got = reader.snapshot()
    assert got is not None and got.pumped_bytes == 3 * pm.slot_bytes(DSV4)
