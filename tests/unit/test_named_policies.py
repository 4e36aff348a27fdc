"""The one table of named policies: every script's list and verified depths come from it, and they are
what each script wrote out by hand before (so committed results keep their names)."""

from __future__ import annotations

import pytest

from ds4x.deploy import launch
from engine.policies import POLICIES
from tests.scripts import load_script
from vllm_ds4x.depth import sim as depth_sim
from vllm_ds4x.depth.config import parse_draft_depth
from vllm_ds4x.depth.named_policies import (
    by_case,
    harness_policies,
    named_policies,
    per_request_policies,
    same_behaviour,
)

PHASE_12 = {"policy": "phase", "reasoning_depth": 1, "answer_depth": 2}
PHASE_02 = {"policy": "phase", "reasoning_depth": 0, "answer_depth": 2}


def test_the_engine_checks_run_the_harness_policies_under_their_names() -> None:
    assert POLICIES == {"fixed": None, "phase 1/2": PHASE_12, "phase 0/2": PHASE_02,
                        "adaptive": {"policy": "adaptive", "min_depth": 0}}
    assert list(harness_policies(2)) == ["fixed", "phase12", "phase02", "adaptive"]


def test_the_simulator_s_policies_are_the_table_s() -> None:
    named = depth_sim.policies(2, {"step_cost": [1.0, 2.0, 3.0]})
    assert list(named) == ["fixed 0", "fixed 1", "fixed 2", "phase 1/2", "phase 0/2", "adaptive"]
    assert named["fixed 1"] == {"policy": "phase", "reasoning_depth": 1, "answer_depth": 1}
    assert named["fixed 2"] is None and named["phase 0/2"] == PHASE_02 == launch.PHASE_02
    assert named["adaptive"] == {"policy": "adaptive", "min_depth": 0, "step_cost": [1.0, 2.0, 3.0]}


@pytest.mark.parametrize(("name", "verified", "graphs"), [
    ("fixed 0", {0}, (0, 2)), ("fixed 2", {2}, (2,)), ("phase 1/2", {1, 2}, (1, 2)), ("phase 0/2", {0, 2}, (0, 2)),
    ("adaptive", None, (0, 1, 2))])
def test_each_policy_s_verified_and_captured_depths(name: str, verified: set[int] | None,
                                                   graphs: tuple[int, ...]) -> None:
    policy = named_policies(2)[name]
    assert policy.verified_depths(2) == verified and policy.graph_depths(2) == graphs


def test_the_harness_report_derives_the_query_lengths_it_held_by_hand() -> None:
    report = load_script("ci/fork-gpu/report.py")
    by_hand = {"fixed": ({"3"}, {"3"}), "phase12": ({"2", "3"}, {"2", "3"}), "phase02": ({"1", "3"}, {"1", "3"}),
               "adaptive": ({"3"}, {"1", "2", "3"}), "adaptivelow": (set(), {"1", "2", "3"})}
    assert {mode: report.query_lengths(mode) for mode in by_hand} == by_hand


def test_an_unknown_case_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="policy 'phase13': expected one of fixed, phase12, phase02, adaptive"):
        by_case("phase13", 2)


def test_each_phase_policy_verifies_its_fixed_twins_depths() -> None:
    """bench/e2e_decode's noise floor compares these pairs: each verifies the same depth in its phase."""
    pairs = same_behaviour(3)
    assert sorted(pairs) == sorted([("reasoning", "fixed 1", "phase 1/3"), ("answer", "fixed 3", "phase 1/3"),
                                    ("reasoning", "fixed 0", "phase 0/3"), ("answer", "fixed 3", "phase 0/3")])
    policies = named_policies(3)
    for phase, fixed, policy in pairs:
        depths = {parse_draft_depth(policies[name].draft_depth, 3).phase_depth(phase, 3) for name in (fixed, policy)}
        assert len(depths) == 1, (phase, fixed, policy, depths)


def test_the_per_request_twins_verify_their_own_depths_in_their_twin_s_graphs() -> None:
    """phase and adaptive (whose requests may choose different depths) have a per-request twin, by report
    name and harness case; it captures and, as a batch, verifies what its twin does."""
    twins = per_request_policies(2)
    assert list(twins) == ["phase 1/2 per request", "phase 0/2 per request", "adaptive per request"]
    for name, twin in twins.items():
        base = named_policies(2)[name.removesuffix(" per request")]
        assert twin.draft_depth == {**(base.draft_depth or {}), "verify": "request"}
        assert parse_draft_depth(twin.draft_depth, 2).verify == "request"
        assert twin.graph_depths(2) == base.graph_depths(2) and twin.verified_depths(2) == base.verified_depths(2)
        assert by_case(f"{base.case}own", 2) == twin
    assert "phase02own" not in harness_policies(2)  # the CPU engine checks (upstream refuses it) run none
