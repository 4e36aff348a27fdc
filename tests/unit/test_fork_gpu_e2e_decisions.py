"""ci/fork-gpu/e2e.py's decision log (E2E_DECISIONS=1): every depth adaptive sets, as it sets it, with
the estimate and the step costs it chose on, on the real DepthPolicy."""

import sys
from pathlib import Path

import pytest

from ds4x.core import draft_depth as dd
from ds4x.core.depth_sim import END_THINK, THINK
from tests.scripts import load_script


def test_every_depth_adaptive_sets_is_logged_with_what_it_chose_on(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch", reason="ci/fork-gpu/e2e.py imports drafts.py, which needs torch")
    monkeypatch.setattr(sys, "argv", ["e2e.py", "spec", "/nonexistent/out", "/nonexistent/models"])
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "ci" / "fork-gpu"))
    e2e = load_script("ci/fork-gpu/e2e.py")
    config = dd.parse_draft_depth({"policy": "adaptive", "verify": "request",
                                   "prior_acceptance": {"reasoning": 0.3, "answer": 0.9}}, 2)
    policy = dd.DepthPolicy(config, 2, dd.PhaseTracker([[THINK]], [[END_THINK]]), 2)
    made = e2e.trace_depths(policy)
    policy.add("r", [THINK], None)
    policy.add("a", [THINK, 5, END_THINK], None)
    for _ in range(3):
        policy.costs.observe_step([1, 3], 0.040)
    policy.strategy.step_ended({"r", "a"})
    assert [entry[1] for entry in made] == ["r", "a", "r"]  # r again: priced beside a once the step ended
    _, request, phase, depth, probing, exploring, estimate, medians = made[-1]
    assert (request, phase, depth) == ("r", "reasoning", policy.requests["r"].depth)
    assert not (probing or exploring) and estimate == [0.3, 0.3]
    assert medians == {"2": {"3,4": 40.0}}  # by batch size, then shape
