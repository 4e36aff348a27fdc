"""lk_moe's pool settings (vllm_ds4x.moe.pool) and the routing with locality the pool is measured on
(engine.locality): what the engine hook and bench.pool_decode read, checked without a GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.locality import Router, measured
from tests.doc_figures import assert_quotes, row
from vllm_ds4x.moe import placement as mp
from vllm_ds4x.moe.placement import PlacementError
from vllm_ds4x.moe.pool import (
    SLOTS_ENV,
    WINDOW_ENV,
    PoolSettings,
    budget_pool_bytes,
    check_layer,
    pool_bytes,
    pool_settings,
)

ROOT = Path(__file__).resolve().parents[2]

EXPERT_BYTES = 13_369_344  # one DeepSeek-V4-Flash MXFP4 expert: 3 x 4096 x 2048 / 2 codes + 1/32 scales


def test_unset_means_no_pool_with_lk_moes_defaults() -> None:
    settings = pool_settings({})
    assert settings == PoolSettings() and not settings.on and (settings.window, settings.inflight) == (32, 16)


def test_the_documented_names_are_read() -> None:
    env = {SLOTS_ENV: "12", WINDOW_ENV: "8", "LK_POOL_INFLIGHT": "4", "LK_POOL_LOG": "100", "LK_ROUTE_PROBE": "1"}
    assert pool_settings(env) == PoolSettings(slots=12, window=8, inflight=4, log_every=100, route_probe=True)


@pytest.mark.parametrize(("env", "named"), [
    ({SLOTS_ENV: "twelve"}, SLOTS_ENV), ({SLOTS_ENV: "-1"}, SLOTS_ENV), ({SLOTS_ENV: "5000"}, SLOTS_ENV),
    ({WINDOW_ENV: "4"}, WINDOW_ENV), ({"LK_POOL_INFLIGHT": "0"}, "LK_POOL_INFLIGHT"),
    ({"LK_ROUTE_PROBE": "maybe"}, "LK_ROUTE_PROBE"),
])
def test_a_bad_value_is_one_error_naming_it(env: dict[str, str], named: str) -> None:
    with pytest.raises(PlacementError, match=named):
        pool_settings(env)


def test_a_pool_holds_one_tokens_experts_to_all_of_them() -> None:
    check_layer(PoolSettings(slots=6), experts=256, top_k=6)
    check_layer(PoolSettings(slots=0), experts=256, top_k=6)
    for slots in (5, 257):
        with pytest.raises(PlacementError, match=f"{SLOTS_ENV}={slots}: a layer with 256 experts, top-6"):
            check_layer(PoolSettings(slots=slots), experts=256, top_k=6)


def test_the_pools_vram_is_slots_times_layers_times_an_expert() -> None:
    # bench/results/h100-pool-decode: 12 slots on one layer, lk_moe reported 153 MiB (slots 153.0 MiB)
    assert pool_bytes(PoolSettings(slots=12), 1, EXPERT_BYTES) / 2**20 == pytest.approx(153.0)
    assert pool_bytes(PoolSettings(slots=12), 41, EXPERT_BYTES) == 41 * 12 * EXPERT_BYTES


def test_the_router_repeats_the_previous_tokens_experts_as_asked() -> None:
    for reuse in (0.0, 0.38, 0.6):
        router = Router(256, 6, reuse=reuse, seed=1)
        steps = [router.step(1) for _ in range(2000)]
        assert all(len(set(ids[0].tolist())) == 6 for ids in steps)  # top-k distinct
        assert measured(steps)["reuse"] == pytest.approx(reuse + (1 - reuse) * 6 / 256, abs=0.03)


def test_skew_concentrates_and_distinct_experts_are_counted_by_rows() -> None:
    flat, skewed = (measured([Router(256, 6, skew=s, seed=2).step(3) for _ in range(300)]) for s in (0.0, 1.0))
    assert skewed["distinct_3"] < flat["distinct_3"] <= 18
    masked = Router(256, 6, seed=3).step(3)
    masked[2] = -1
    assert measured([masked])["distinct_2"] <= 12  # a masked row routes to no expert


def test_a_router_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="top_k 7"):
        Router(6, 7)
    with pytest.raises(ValueError, match="reuse 1.5"):
        Router(256, 6, reuse=1.5)


POOL_RUN = ROOT / "bench/results/h100-pool-decode"
ROUTING = {"random": "random", "reuse 0.38": "r0.38", "reuse 0.6": "r0.6"}


def pool_run(slots: int) -> dict[str, dict[str, Any]]:
    data = json.loads((POOL_RUN / f"pool-{slots}.json").read_text())
    assert data["slots"] == slots and not any(data["checks"].values())  # a run whose checks failed quotes nothing
    return {r["locality"]: r for r in data["runs"]}


@pytest.mark.parametrize("routing", ROUTING)
def test_the_pool_docs_quote_the_run(routing: str) -> None:
    run = pool_run(12)[ROUTING[routing]]
    measured = [run["hit_rate"], *(run["ratio"][d] for d in ("0", "1", "2"))]
    assert_quotes(" ".join(row(ROOT / "docs/expert-pool.md", "12", routing)[2:]), measured)
    for slots in (12, 32):
        got = pool_run(slots)[ROUTING[routing]]
        cells = row(POOL_RUN / "README.md", str(slots), ROUTING[routing])
        assert_quotes(" ".join(cells[2:]), [got["router"]["reuse"], got["hit_rate"],
                                              *(got["ratio"][d] for d in ("0", "1", "2"))])


def test_the_predicted_speed_up_follows_from_the_ratio() -> None:
    """1 / (1 - 0.575 (1 - r)): the CPU experts' share of a step, shrunk by the layer call's ratio."""
    for hit, ratio in ((0.05, 1.00), (0.18, 0.975), (0.26, 0.882)):
        cells = row(ROOT / "docs/expert-pool.md", f"{hit:.2f}", column="decode speed-up")
        assert_quotes(" ".join(cells), [hit, ratio, 1 / (1 - 0.575 * (1 - ratio))])


def test_the_pool_comes_out_of_the_resident_layers_budget() -> None:
    """12 slots on DeepSeek-V4-Flash's 43 MoE layers take 6.42 GiB, about two whole layers (6.38)."""
    shape = mp.model_shape(json.loads((ROOT / "examples/deepseek-v4-flash/config.json").read_text()))
    pool = budget_pool_bytes(PoolSettings(slots=12), shape, tp_size=1)
    assert pool == 12 * 43 * EXPERT_BYTES and shape.expert_bytes == EXPERT_BYTES
    assert budget_pool_bytes(PoolSettings(slots=12), shape, tp_size=2) == pool // 2
    options: dict[str, Any] = {"gpu_bytes": 32 * mp.GIB, "gpu_memory_utilization": 0.92, "max_model_len": 65536,
                               "kv_dtype": "fp8_ds_mla"}
    without, with_pool = mp.budget(shape, **options), mp.budget(shape, **options, pool_bytes=pool)
    assert without.for_resident_layers - with_pool.for_resident_layers == pool
    fits = [mp.choose_auto(shape, b.for_resident_layers, 1, 1, None).layers for b in (without, with_pool)]
    assert len(fits[0]) - len(fits[1]) in (2, 3)  # what the pool takes, the resident layers give up


ENGINE_RUN = ROOT / "bench/results/h200-dsv4-e2e-pool-first"
EQUAL_VRAM_RUN = ROOT / "bench/results/h100-dsv4-e2e-pool-r038"
CELLS = [("reasoning", "phase 0/2"), ("reasoning", "fixed 2"), ("answer", "fixed 2")]


@pytest.mark.parametrize("phase, policy", CELLS)
def test_the_first_engine_runs_readme_quotes_its_cells(phase: str, policy: str) -> None:
    """h200-dsv4-e2e-pool-first's README: pool over whole layers in the cells both ran (equal tokens, the
    pool's cells' own hit rate), from the two engines' JSON."""
    runs = {tag: json.loads((ENGINE_RUN / f"e2e-spec-{tag}.json").read_text()) for tag in ("layers", "pool")}
    cells = {tag: next(c for c in run["cells"] if (c["round"], c["phase"], c["policy"]) == (0, phase, policy))
             for tag, run in runs.items()}
    assert cells["layers"]["tokens"] == cells["pool"]["tokens"]
    ratio, hit = cells["pool"]["tok_s"] / cells["layers"]["tok_s"], cells["pool"]["pool"]["hit_rate"]
    quoted = row(ENGINE_RUN / "README.md", f"{phase}, {policy}")[1:]
    steps = [next(iter(cells[tag]["steps"].values()))["median_ms"] for tag in ("layers", "pool")]
    assert_quotes(" ".join(quoted), [cells["layers"]["tok_s"], cells["pool"]["tok_s"], ratio, *steps, hit])


@pytest.mark.parametrize("phase, policy", CELLS)
def test_the_pool_docs_quote_the_equal_vram_run(phase: str, policy: str) -> None:
    """expert-pool.md's engine table is h100-dsv4-e2e-pool-r038's report: pool over layers and its hit rate."""
    report = (EQUAL_VRAM_RUN / "report.txt").read_text().splitlines()
    start = report.index(next(line for line in report if line.startswith(f"{phase} x1 {policy}: steady decode")))
    pool = next(line for line in report[start:] if line.split()[:1] == ["pool"]).split()
    assert_quotes(" ".join(row(ROOT / "docs/expert-pool.md", f"{phase}, {policy}")[1:]), [pool[-2], pool[-1]])
