"""lk_moe's expert pool on /metrics (vllm_ds4x.hooks.pool_metrics): the engine core turns lk_moe's
cumulative pool_stats() into what each count grew by since the step that last carried them (never
negative, also when lk_moe starts counting again), and the API server adds each growth as it comes,
so front-ends that each see some of one engine's steps sum to the engine's counts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, ClassVar

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


def at(hits: int, misses: int, pumps: int, cover_miss: int = 0) -> pm.PoolCounts:
    return pm.counts(lk_stats(hits, misses, pumps, cover_miss), 0)


def test_a_slot_is_one_experts_weights_and_scales() -> None:
    assert pm.slot_bytes(DSV4) == 12 * MIB + 3 * MIB // 4  # docs/expert-pool.md: 12.75 MiB a slot
    # no gate: up and down only, whatever lk_moe leaves in the third entry
    assert pm.slot_bytes({"has_gate": False, "slot_weight_bytes": [4, 5, 999], "slot_scale_bytes": [1, 2, 999]}) == 12


def test_a_pump_moves_one_slot_and_layers_that_differ_count_at_their_mean() -> None:
    assert pm.bytes_per_pump({}) == 0
    assert pm.bytes_per_pump({0: 300, 1: 300, 5: 300}) == 300
    assert pm.bytes_per_pump({0: 300, 1: 100}) == 200


def test_counts_take_lk_moes_counts_and_its_own_bytes() -> None:
    stats = {**lk_stats(hits=40, misses=60, pumps=9, cover_dup=1), "bytes": 1234}
    assert pm.counts(stats, 13 * MIB) == pm.PoolCounts(hits=40, misses=60, pumps=9, pumped_bytes=1234, cover_miss=0,
                                                       cover_dup=1)
    assert {f.name for f in fields(pm.PoolCounts)} == set(pm.COUNTERS)
    # what travels: the counters' growth and the gauge, no epoch or other state of the engine's
    assert {f.name for f in fields(pm.PoolGrowth)} == {"device_bytes", *pm.COUNTERS}


def test_without_lk_moes_bytes_a_pump_counts_one_slot() -> None:
    stats = {k: v for k, v in lk_stats(hits=40, misses=60, pumps=9).items() if k != "bytes"}
    assert pm.counts(stats, 13 * MIB).pumped_bytes == 9 * 13 * MIB
    assert pm.counts({"hits": 3.0}, 10) == pm.PoolCounts(hits=3)  # fewer keys: 0


def test_growth_is_what_each_count_grew_by() -> None:
    first = at(hits=10, misses=30, pumps=4)
    assert pm.growth(None, first, 77) == pm.PoolGrowth(hits=10, misses=30, pumps=4, pumped_bytes=400,
                                                       device_bytes=77)
    assert pm.growth(first, at(hits=15, misses=31, pumps=4), 78) == pm.PoolGrowth(hits=5, misses=1, device_bytes=78)
    assert pm.growth(first, first, 5) == pm.PoolGrowth(device_bytes=5)


def test_a_restarted_lk_moe_gives_its_counts_and_no_negative_growth() -> None:
    before = at(hits=100, misses=300, pumps=5)
    restarted = at(hits=2, misses=500, pumps=1)  # a count went down: lk_moe counts from 0 again
    grown = pm.growth(before, restarted, 0)
    assert all(getattr(grown, k) >= 0 for k in pm.COUNTERS), grown
    assert grown == pm.PoolGrowth(**{k: getattr(restarted, k) for k in pm.COUNTERS})


class Fake:
    """prometheus_client's Counter and Gauge as vLLM makes them: a labelled family, one child per engine
    (a subclass with its own `made`: another API server process's registry)."""

    made: ClassVar[list[Fake]] = []

    def __init__(self, name: str, documentation: str, labelnames: list[str], multiprocess_mode: str = "") -> None:
        assert documentation and labelnames == ["model_name", "engine"]
        self.name = name
        self.children: dict[tuple[object, ...], Child] = {}
        type(self).made.append(self)

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


def prom(cls: type[Fake] = Fake) -> pm.PoolProm:
    cls.made = []
    return pm.PoolProm(cls, cls, ["model_name", "engine"], {0: ["m", "0"], 1: ["m", "1"]})


def values(engine: str, cls: type[Fake] = Fake) -> dict[str, float]:
    return {f.name: f.children[("m", engine)].value for f in cls.made}


def named(hits: float, misses: float, pumps: float, pumped_bytes: float, cover_miss: float = 0,
          cover_dup: float = 0) -> dict[str, float]:
    return {pm.metric_name(k): v for k, v in zip(pm.COUNTERS, (hits, misses, pumps, pumped_bytes, cover_miss,
                                                                 cover_dup), strict=True)}


class Lk:
    """lk_moe's two module functions the reader calls."""

    def __init__(self) -> None:
        self.stats: Mapping[str, Any] = lk_stats(0, 0, 0)
        self.device_bytes = 64 * MIB
        self.calls = 0

    def pool_stats(self) -> Mapping[str, Any]:
        self.calls += 1
        return self.stats

    def device(self) -> int:
        return self.device_bytes

    def reader(self, *layers: int) -> pm.Reader:
        reader = pm.Reader(self.pool_stats, self.device)
        for layer in layers:
            reader.add_layer(layer, DSV4)
        return reader


def test_nothing_is_registered_until_an_engine_sends_counts() -> None:
    p = prom()
    p.observe(None, 0)
    p.observe(None, 1)
    assert Fake.made == []
    p.observe(pm.PoolGrowth(hits=1, misses=1), 0)
    assert [f.name for f in Fake.made] == [*(pm.metric_name(k) for k in pm.COUNTERS), pm.DEVICE_GAUGE]


def test_each_engines_counters_follow_its_own_counts_through_a_restart() -> None:
    p = prom()
    lk0, lk1 = Lk(), Lk()
    engine0, engine1 = lk0.reader(3), lk1.reader(3)
    lk1.device_bytes = 9 * MIB
    for engine, lk, stats in [(0, lk0, lk_stats(10, 30, 4)), (1, lk1, lk_stats(1000, 1000, 1000)),
                              (0, lk0, lk_stats(15, 35, 5, cover_miss=1)),
                              (0, lk0, lk_stats(2, 1, 1))]:  # engine 0's lk_moe counts from 0 again
        lk.stats = stats
        p.observe((engine0, engine1)[engine].snapshot(), engine)
    assert values("0") == {**named(17, 36, 6, 600, cover_miss=1), pm.DEVICE_GAUGE: 64 * MIB}
    assert values("1") == {**named(1000, 1000, 1000, 100_000), pm.DEVICE_GAUGE: 9 * MIB}


def test_front_ends_that_each_see_some_of_an_engines_steps_sum_to_its_counts() -> None:
    """--api-server-count 2: the engine core hands each step's stats to one front-end (whichever's
    outputs come first), so each sees its own subset of the steps, the first of them at any point."""

    class FrontA(Fake):
        made: ClassVar[list[Fake]] = []

    class FrontB(Fake):
        made: ClassVar[list[Fake]] = []

    fronts = (prom(FrontA), prom(FrontB))
    lk = Lk()
    engine = lk.reader(3, 4)
    steps = [lk_stats(4 * i, 9 * i, i // 2, cover_dup=i // 7) for i in range(1, 12)]
    restarted = [lk_stats(i, 2 * i, i, cover_miss=1) for i in range(1, 6)]  # lk_moe counting from 0 again
    # one front-end per step: B's first is the fifth (cumulative counts would count its 4 before it again)
    went_to = "AAAABBABBAB" + "A" + "BBABA"
    for stats, front in zip([*steps, steps[-1], *restarted], went_to, strict=True):
        lk.stats = stats
        fronts["AB".index(front)].observe(engine.snapshot(), 0)  # an unchanged step sends None
    got_a, got_b = values("0", FrontA), values("0", FrontB)
    assert got_a and got_b and got_a != got_b
    summed = {name: got_a[name] + got_b[name] for name in named(0, 0, 0, 0)}
    true = {k: steps[-1][k] + restarted[-1][k] for k in ("hits", "misses", "pumps", "bytes", "cover_miss",
                                                          "cover_dup")}
    assert summed == named(true["hits"], true["misses"], true["pumps"], true["bytes"], true["cover_miss"],
                           true["cover_dup"])
    assert got_a[pm.DEVICE_GAUGE] == got_b[pm.DEVICE_GAUGE] == 64 * MIB  # the gauge: its value now, in either


def test_the_reader_reads_nothing_in_a_process_without_a_pooled_layer() -> None:
    lk = Lk()
    assert lk.reader().snapshot() is None and lk.calls == 0


def test_the_reader_hands_on_what_grew_only_when_something_changed() -> None:
    lk = Lk()
    reader = lk.reader(3, 4)
    lk.stats = lk_stats(hits=5, misses=7, pumps=2)
    assert reader.snapshot() == pm.PoolGrowth(hits=5, misses=7, pumps=2, pumped_bytes=200, device_bytes=64 * MIB)
    assert reader.snapshot() is None  # nothing counted since, the gauge unchanged
    lk.stats = lk_stats(hits=6, misses=7, pumps=2)
    assert reader.snapshot() == pm.PoolGrowth(hits=1, device_bytes=64 * MIB)
    lk.device_bytes = 80 * MIB
    assert reader.snapshot() == pm.PoolGrowth(device_bytes=80 * MIB)  # only the gauge moved
    assert reader.snapshot() is None
    lk.stats = {**lk_stats(hits=9, misses=9, pumps=9), "enabled": False}
    assert reader.snapshot() is None  # lk_moe says its pool is off
    lk.stats = lk_stats(hits=9, misses=9, pumps=9)  # on again: grown from what was last handed on
    assert reader.snapshot() == pm.PoolGrowth(hits=3, misses=2, pumps=7, pumped_bytes=700, device_bytes=80 * MIB)


def test_the_reader_takes_a_restarted_lk_moes_counts_whole_never_negative() -> None:
    lk = Lk()
    reader = lk.reader(3)
    lk.stats = lk_stats(hits=100, misses=300, pumps=5)
    reader.snapshot()
    lk.stats = lk_stats(hits=2, misses=500, pumps=1)  # hits went down: lk_moe counts from 0 again
    assert reader.snapshot() == pm.PoolGrowth(hits=2, misses=500, pumps=1, pumped_bytes=100, device_bytes=64 * MIB)
    lk.stats = lk_stats(hits=3, misses=500, pumps=1)
    assert reader.snapshot() == pm.PoolGrowth(hits=1, device_bytes=64 * MIB)


def test_the_reader_counts_a_slot_a_pump_from_an_lk_moe_without_bytes() -> None:
    lk = Lk()
    lk.stats = {k: v for k, v in lk_stats(hits=1, misses=1, pumps=3).items() if k != "bytes"}
    got = lk.reader(3).snapshot()
    assert got is not None and got.pumped_bytes == 3 * pm.slot_bytes(DSV4)
