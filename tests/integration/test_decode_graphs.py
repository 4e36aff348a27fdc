"""The pinned vLLM release's CUDA graph tables, patched, built on CPU from our wheel for each
draft-depth policy (engine/graph_check.py, run by engine.checks): model runner v2's
graph manager and model runner v1's dispatcher each have a full decode graph for
every depth the policy verifies, and every uniform batch that vLLM's own 1+K
graphs cover (its capture sizes, rounded per length, may leave a request count
without one) finds a graph of its own length."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.network, pytest.mark.slow]
LENGTHS = {"fixed": (3,), "phase 1/2": (2, 3), "phase 0/2": (1, 3), "adaptive": (1, 2, 3)}


@pytest.fixture(scope="module", params=["v2", "v1"])
def tables(request: pytest.FixtureRequest, engine_checks: dict[str, Any]) -> dict[str, Any]:
    """One model runner's tables, by policy."""
    return dict(engine_checks["graphs"][request.param])


@pytest.mark.parametrize("policy", list(LENGTHS))
def test_every_uniform_batch_finds_a_graph_of_its_length(tables: dict[str, Any], policy: str) -> None:
    table = tables[policy]
    assert {graph.rsplit(":q", 1)[1] for graph in table["graphs"]} == {str(q) for q in LENGTHS[policy]}
    covered = [r for r in (1, 2, 3, 4) if tables["fixed"]["dispatch"][f"q3r{r}"].startswith("FULL")]
    assert covered[:3] == [1, 2, 3]
    for q in LENGTHS[policy]:
        for reqs in covered:
            mode, tokens, padded, length = table["dispatch"][f"q{q}r{reqs}"].split(":")
            assert (mode, length) == ("FULL", f"q{q}"), (policy, q, reqs)
            assert int(padded[1:]) >= reqs and int(tokens[1:]) == q * int(padded[1:])
    assert table["mixed"] == "NONE"


def test_fixed_policy_keeps_vllms_graphs(tables: dict[str, Any]) -> None:
    assert tables["fixed"]["graphs"] == [g for g in tables["adaptive"]["graphs"] if g.endswith(":q3")]


def test_data_parallel_keeps_vllms_graphs(engine_checks: dict[str, Any]) -> None:
    """Ranks pad to each other's token counts: one length's graph would not fit another's batch."""
    graphs = engine_checks["graphs"]
    assert graphs["v1 adaptive, data parallel"]["graphs"] == graphs["v1"]["fixed"]["graphs"]
