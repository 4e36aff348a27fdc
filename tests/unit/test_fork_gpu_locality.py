"""The DeepSeek-V4 stand-in's routing with locality (dsv4_model.py, DSV4_ROUTING) and what e2e.py
records of it and of lk_moe's pool counters: the parts that run without a GPU. The gate is built
here as the engine builds it and routed on the token embeddings the MoE input follows."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.scripts import load_script

pytest.importorskip("torch", reason="dsv4_model.py builds its weights with torch")
import torch

HARNESS = Path(__file__).resolve().parents[2] / "ci" / "fork-gpu"
KNOBS = {"reuse": 0.38, "skew": 0.8}


@pytest.fixture
def M(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(HARNESS))  # dsv4_model imports e2e_model, its sibling
    monkeypatch.setenv("DSV4_LAYERS", "4")
    module = load_script("ci/fork-gpu/dsv4_model.py")
    module.RouteCheck.rows = {}
    return module


def test_routing_knobs_parse_and_refuse(M: ModuleType) -> None:
    assert M.routing_knobs(None) is None and M.routing_knobs("random") is None
    assert M.routing_knobs("reuse=0.38, skew=0.8") == KNOBS
    for bad in ("reuse=0.38", "reuse=x,skew=1", "skew=1,reuse=0.2,extra=3", "zipf"):
        with pytest.raises(ValueError, match="DSV4_ROUTING"):
            M.routing_knobs(bad)


def test_routed_layers_leave_the_hash_layers_alone(M: ModuleType) -> None:
    assert M.routed_layers() == [1, 2, 3]  # num_hash_layers 1, DSV4_LAYERS 4


def test_a_layers_table_is_seeded_distinct_and_repeats_the_predecessor_at_the_asked_rate(M: ModuleType) -> None:
    """Walking the reasoning cycle, a token shares about `reuse` of its experts with the one before
    (the router's own draws can add a few by popularity); each layer its own table, the same each time."""
    table = M.routing(1, KNOBS)
    assert table == M.routing(1, KNOBS) and table != M.routing(2, KNOBS)
    assert all(len(set(row)) == 6 and all(0 <= e < 256 for e in row) for row in table)
    cycle = M.CYCLES["reasoning"]
    shared = [len(set(table[a]) & set(table[b])) / 6 for a, b in itertools.pairwise(cycle)]
    assert 0.38 <= sum(shared) / len(shared) <= 0.5
    random = M.routing(1, {"reuse": 0.0, "skew": 0.0})
    shared0 = [len(set(random[a]) & set(random[b])) / 6 for a, b in itertools.pairwise(cycle)]
    assert sum(shared0) / len(shared0) < 0.06


@pytest.mark.parametrize("knobs", [KNOBS, {"reuse": 0.0, "skew": 0.0}])
def test_each_routed_layer_routes_by_its_table(M: ModuleType, knobs: dict[str, float]) -> None:
    """With locality every target layer is hash-routed (DeepSeek-V4's per-token table); the routed layers'
    tables are the router's, in the engine's index dtype; the draft keeps its config."""
    target, draft = M.configs(4, knobs)
    assert target["num_hash_layers"] == 4 and draft["num_hash_layers"] == M.CONFIG["num_hash_layers"]
    assert M.configs(4)[0]["num_hash_layers"] == M.CONFIG["num_hash_layers"]  # random: the gates route
    table = torch.zeros(M.VOCAB, 6, dtype=torch.int32)
    M._locality_table("model.layers.1.ffn.gate.tid2eid", table, knobs)
    assert torch.equal(table, torch.tensor(M.routing(1, knobs), dtype=torch.int32))


def _ffn() -> Any:
    """A DeepseekV4MoE as the hook sees it: a gate returning (logits, bias) with a hash table (tid2eid) or
    None, forward(hidden, input_ids)."""
    ffn = torch.nn.Module()
    ffn.gate = torch.nn.Module()
    ffn.gate.weight = torch.nn.Parameter(torch.zeros(256, 4096))
    ffn.gate.tid2eid = None
    ffn.gate.forward = lambda x: (x @ ffn.gate.weight.T, None)
    ffn.forward = lambda hidden, input_ids=None: hidden.mul_(1e-3).neg_()  # in place, as fused experts may
    return ffn


def _target(layers: int) -> torch.nn.Module:
    model = torch.nn.Module()
    model.model = torch.nn.Module()
    model.model.layers = torch.nn.ModuleList()
    for _ in range(layers):
        layer = torch.nn.Module()
        layer.ffn = _ffn()
        model.model.layers.append(layer)
    return model


def test_route_check_counts_the_rows_routed_as_the_table_says(M: ModuleType) -> None:
    """Layer 1's hash table from the router agrees on every row, passed input_ids either way, though the
    layer writes its output over its input (the check reads the input before the call); layer 2's gate
    left at zero, with no table, agrees on none; layer 0 is not checked; a call without ids counts nothing."""
    model = _target(4)
    table = torch.zeros(M.VOCAB, 6, dtype=torch.int32)
    M._locality_table("model.layers.1.ffn.gate.tid2eid", table, KNOBS)
    model.model.layers[1].ffn.gate.tid2eid = table
    M.RouteCheck.install(model, KNOBS)
    ids = torch.arange(M.VOCAB)
    model.model.layers[1].ffn(M._embedding() * 64, input_ids=ids)
    model.model.layers[2].ffn(M._embedding() * 64, ids)
    model.model.layers[0].ffn(M._embedding() * 64, ids)
    model.model.layers[3].ffn(M._embedding() * 64)
    agreement = M.RouteCheck.agreement()
    assert set(agreement) == {"1", "2"} and agreement["1"]["rows"] == 1.0 and agreement["1"]["experts"] == 1.0
    assert agreement["1"]["cosine"] == pytest.approx(1.0, abs=1e-4)
    assert agreement["2"]["rows"] == 0.0 and agreement["2"]["experts"] < 0.5


@pytest.fixture
def E(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setattr(sys, "argv", ["e2e.py", "spec", "/nonexistent/out", "/nonexistent/models"])
    monkeypatch.syspath_prepend(str(HARNESS))
    monkeypatch.setenv("E2E_MODEL", "dsv4")
    monkeypatch.setenv("DSV4_LAYERS", "4")
    return load_script("ci/fork-gpu/e2e.py")


def test_pool_delta_counts_between_reads_and_nothing_without_a_pool(E: ModuleType) -> None:
    before = {"hits": 10.0, "misses": 30.0, "pumps": 4.0, "cover_miss": 0.0, "cover_dup": 0.0, "device_bytes": 7.0}
    after = {**before, "hits": 40.0, "misses": 60.0, "pumps": 9.0}
    delta = E.pool_delta(before, after)["pool"]
    assert delta["hits"] == 30 and delta["misses"] == 30 and delta["pumps"] == 5 and delta["hit_rate"] == 0.5
    assert E.pool_delta({}, {}) == {"pool": {}}
    with pytest.raises(KeyError):  # a counter lk_moe stopped reporting fails the run, never reads as 0
        E.pool_delta(before, {k: v for k, v in after.items() if k != "pumps"})


def test_routing_record_measures_the_cells_tokens_through_the_table(E: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """One request's reasoning tokens, walked in cycle order: the measured reuse is the table's, and
    three tokens touch more distinct experts than two, two more than one (6)."""
    monkeypatch.setenv("DSV4_ROUTING", "reuse=0.38,skew=0.8")
    cells = [{"requests": 1, "tokens": [list(E.CYCLES["reasoning"][:64])]},
             {"requests": 2, "tokens": [[1, 2], [3, 4]]}]  # a two-request cell is not one stream: left out
    record = E.routing_record(cells)
    measured = record["measured"]
    assert record["router"] == "locality" and record["reuse"] == 0.38
    assert measured["distinct_1"] == 6 and 6 < measured["distinct_2"] < measured["distinct_3"] <= 18
    assert 0.3 < measured["reuse"] < 0.55
    monkeypatch.delenv("DSV4_ROUTING")
    assert E.routing_record(cells) == {"router": "random"}


def test_walk_continues_each_phases_cycle_cell_after_cell(E: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """E2E_WALK=1: each one-request cell's prompt ends where its phase's last cell stopped, a cycle's
    length wrapping; two-request cells and E2E_WALK unset keep their prompts."""
    monkeypatch.setattr(E, "WALK", True)
    monkeypatch.setattr(E, "WALKED", dict(E.WALKED))
    cycle = E.CYCLES["reasoning"]
    firsts = [E.walked("reasoning", 1, [[7, 8]])[0] for _ in range(4)]
    assert [f[:2] for f in firsts] == [[7, 8]] * 4  # the first starts past the warm-up's TOKENS
    assert [f[2] for f in firsts] == [cycle[((i + 1) * E.TOKENS) % len(cycle)] for i in range(4)]
    assert E.walked("answer", 1, [[9]]) == [[9, E.CYCLES["answer"][E.TOKENS]]]
    assert E.walked("reasoning", 2, [[1], [2]]) == [[1], [2]]
    monkeypatch.setattr(E, "WALK", False)
    assert E.walked("reasoning", 1, [[7]]) == [[7]]
