"""The patched vLLM 0.27.1 Scheduler and AsyncScheduler, from our wheel, driven
with real Request objects on CPU (tests/engine/scheduler_check.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import engine_json

pytestmark = [pytest.mark.network, pytest.mark.slow]


@pytest.fixture(scope="module")
def phase(engine_python: Path, tiny_model: Path) -> dict:
    return engine_json(engine_python, "scheduler_check.py", tiny_model, '{"policy": "phase", "reasoning_depth": 1}')


def test_sync_scheduler_verifies_each_requests_depth(phase: dict) -> None:
    sync = phase["sync"]
    assert sync["scheduled_drafts"] == {"r": 1, "a": 2, "o": 0}  # reasoning, answer, client override 0
    assert sync["scheduled_tokens"] == {"r": 2, "a": 3, "o": 1}
    # KV lookahead stays K_max even for a depth-1 request: 13 computed + 2 scheduled
    # + 2 lookahead = 17 tokens -> 2 blocks of 16 (depth-sized lookahead would need 1)
    assert sync["lookahead"] == 2
    assert sync["kv_tokens_needed"] == {"r": 17, "a": 18, "o": 16}
    assert sync["kv_blocks"] == {"r": 2, "a": 2, "o": 1}


def test_rejected_accounting_is_exact(phase: dict) -> None:
    sync = phase["sync"]
    # r: 1 draft rejected; a: 1 of 2 accepted; o: no draft
    assert sync["computed_after"] == {"r": 14, "a": 15, "o": 14}
    assert sync["num_tokens_after"] == {"r": 15, "a": 16, "o": 15}
    assert sync["stats"] == {
        "drafts": 2, "draft_tokens": 3, "accepted": 1,
        "by_phase": {"drafts": {"reasoning": 1, "answer": 1}, "draft_tokens": {"reasoning": 1, "answer": 2},
                     "accepted": {"reasoning": 0, "answer": 1}, "depths": {"1": 1, "2": 1}},
    }


def test_leaving_reasoning_raises_the_depth(phase: dict) -> None:
    assert phase["sync"]["after_end_think"] == {"r": 2, "a": 2, "o": 0}


def test_async_placeholders_are_per_request(phase: dict) -> None:
    asynchronous = phase["async"]
    assert asynchronous["placeholders"] == {"r": [-1], "a": [-1, -1]}
    assert asynchronous["scheduled_drafts"] == {"r": 1, "a": 2}
    assert asynchronous["scheduled_tokens"] == {"r": 2, "a": 3}
    # placeholders: 1 sampled per step + that step's drafts, then all returned
    assert asynchronous["output_placeholders"] == {"r": 3, "a": 4}
    assert asynchronous["output_placeholders_after"] == {"r": 0, "a": 0}
    assert asynchronous["computed_after"] == {"r": 5, "a": 6}  # 4-token prompts, one draft of each rejected


def test_fixed_policy_schedules_as_vllm_does(engine_python: Path, tiny_model: Path) -> None:
    fixed = engine_json(engine_python, "scheduler_check.py", tiny_model, "null")
    assert fixed["sync"]["scheduled_drafts"] == {"r": 2, "a": 2, "o": 0}  # only the client's override differs
    assert fixed["async"]["placeholders"] == {"r": [-1, -1], "a": [-1, -1]}
    assert fixed["sync"]["after_end_think"] == {"r": 2, "a": 2, "o": 0}
