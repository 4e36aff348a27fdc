"""The patched vLLM Scheduler (the pinned release) and AsyncScheduler, from our wheel, driven
with real Request objects on CPU (engine/scheduler_check.py, run by engine.checks): each decode
batch verifies one depth, the deepest its requests chose, so it keeps one query
length (and its CUDA graph)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.network, pytest.mark.slow]


@pytest.fixture(scope="module")
def phase(engine_checks: dict[str, Any]) -> dict[str, Any]:
    return dict(engine_checks["scheduler"]["phase 1/2"])


@pytest.fixture(scope="module")
def phase_02(engine_checks: dict[str, Any]) -> dict[str, Any]:
    return dict(engine_checks["scheduler"]["phase 0/2"])


def check_mixed_batch(out: dict[str, Any]) -> None:
    """r reasons (depth 1), a answers (2), o asked for 0: the batch verifies 2."""
    sync = out["sync"]
    assert sync["scheduled_drafts"] == {"r": 2, "a": 2, "o": 2}
    assert sync["scheduled_tokens"] == {"r": 3, "a": 3, "o": 3}
    # KV lookahead stays K_max: 13 computed + 3 scheduled + 2 lookahead = 18 tokens -> 2 blocks of 16
    assert sync["lookahead"] == 2
    assert sync["kv_tokens_needed"] == {"r": 18, "a": 18, "o": 18}
    assert sync["kv_blocks"] == {"r": 2, "a": 2, "o": 2}
    # r and o: both drafts rejected; a: one of two accepted
    assert sync["computed_after"] == {"r": 14, "a": 15, "o": 14}
    assert sync["num_tokens_after"] == {"r": 15, "a": 16, "o": 15}
    assert sync["after_end_think"] == {"r": 2, "a": 2, "o": 2}


def test_mixed_phases_verify_one_depth(phase: dict[str, Any], phase_02: dict[str, Any]) -> None:
    check_mixed_batch(phase)
    check_mixed_batch(phase_02)


def test_stats_count_chosen_and_verified_depth(phase: dict[str, Any]) -> None:
    assert phase["sync"]["stats"] == {
        "drafts": 3, "draft_tokens": 6, "accepted": 1,
        "by_phase": {"drafts": {"reasoning": 2, "answer": 1}, "draft_tokens": {"reasoning": 4, "answer": 2},
                     "accepted": {"reasoning": 0, "answer": 1}, "depths": {"2": 3},
                     "chosen_depths": {"1": 1, "2": 1, "0": 1}},
    }


def test_reasoning_batch_verifies_the_reasoning_depth(phase: dict[str, Any]) -> None:
    sync = phase["sync_reasoning"]
    assert sync["scheduled_drafts"] == {"r1": 1, "r2": 1}
    assert sync["scheduled_tokens"] == {"r1": 2, "r2": 2}
    assert sync["computed_after"] == {"r1": 14, "r2": 14}  # 13-token prompts, the draft rejected
    assert sync["after_end_think"] == {"r1": 2, "r2": 2}  # r1 answers now: the batch verifies 2


def test_depth_zero_schedules_no_drafts(phase_02: dict[str, Any]) -> None:
    sync = phase_02["sync_reasoning"]
    assert sync["scheduled_drafts"] == {"r1": 0, "r2": 0}
    assert sync["scheduled_tokens"] == {"r1": 1, "r2": 1}
    assert sync["computed_after"] == {"r1": 14, "r2": 14}
    assert sync["after_end_think"] == {"r1": 2, "r2": 2}
    asynchronous = phase_02["async_reasoning"]
    assert asynchronous["scheduled_drafts"] == {"r1": 0, "r2": 0}
    assert asynchronous["scheduled_tokens"] == {"r1": 1, "r2": 1}
    assert asynchronous["output_placeholders_after"] == {"r1": 0, "r2": 0}
    assert asynchronous["computed_after"] == {"r1": 5, "r2": 5}


def test_async_placeholders_stay_whole_until_scheduled(phase: dict[str, Any]) -> None:
    asynchronous = phase["async"]
    assert asynchronous["placeholders"] == {"r": [-1, -1], "a": [-1, -1]}  # vLLM's shared list, K_max long
    assert asynchronous["scheduled_drafts"] == {"r": 2, "a": 2}  # mixed phases: one depth, 2
    assert asynchronous["scheduled_tokens"] == {"r": 3, "a": 3}
    assert asynchronous["output_placeholders"] == {"r": 4, "a": 4}  # 1 sampled + 2 drafts each step
    assert asynchronous["output_placeholders_after"] == {"r": 0, "a": 0}
    assert asynchronous["computed_after"] == {"r": 5, "a": 6}  # 4-token prompts; r: 2 rejected, a: 1
    reasoning = phase["async_reasoning"]
    assert reasoning["scheduled_drafts"] == {"r1": 1, "r2": 1}
    assert reasoning["output_placeholders_after"] == {"r1": 0, "r2": 0}
    assert reasoning["computed_after"] == {"r1": 5, "r2": 5}  # its one draft rejected


def test_fixed_policy_schedules_as_vllm_does(engine_checks: dict[str, Any]) -> None:
    fixed = engine_checks["scheduler"]["fixed"]
    assert fixed["sync"]["scheduled_drafts"] == {"r": 2, "a": 2, "o": 2}  # a client's 0 rounds up: no graph at 0
    assert fixed["sync_reasoning"]["scheduled_drafts"] == {"r1": 2, "r2": 2}
    assert fixed["async"]["placeholders"] == {"r": [-1, -1], "a": [-1, -1]}


def test_adaptive_times_uniform_steps_live(engine_checks: dict[str, Any]) -> None:
    """Step cost is timed by the scheduler itself: pure decode steps of one query length with
    the same requests as the step before, each length verified (1..K+1) gets samples; a step
    whose requests verify different lengths is not timed."""
    live = engine_checks["scheduler"]["adaptive"]["live_timing"]
    assert live["timed"] == 30, live  # every one of the 30 decode steps
    assert live["lengths"] and set(live["lengths"]) <= {1, 2, 3}, live
    assert len(set(live["uneven_step"].values())) == 2, live  # the check's premise: r1 verified drafts, r2 none
    assert live["uneven_timed"] == 0, live


def test_adaptive_times_masked_steps_by_their_shape(engine_checks: dict[str, Any]) -> None:
    """verify "request": r1 verifies 2 drafts (3 tokens) and r2, at its own depth 0, 1 token in a
    batch that runs depth 2: each such step is timed as (3 tokens the longest, 4 in all), not as a
    uniform step of 3 a request; the step where r2 proposed no drafts is not timed."""
    live = engine_checks["scheduler"]["adaptive"]["live_timing_per_request"]
    assert live["timed"] == 30, live
    assert live["shapes"] == [[3, 4]], live
    assert live["uneven_timed"] == 0, live


@pytest.mark.parametrize("policy", ["fixed", "phase 1/2", "phase 0/2", "adaptive"])
def test_phase_counts_equal_what_each_request_verified(engine_checks: dict[str, Any], policy: str) -> None:
    """The scheduler counts by phase in one pass per step (vLLM's totals less all
    but the largest group); the check counts request by request. Equal over
    uniform and uneven steps, a request trimmed at its stop and one aborted mid-step."""
    run = engine_checks["scheduler"][policy]["stats_paths"]
    assert run["a1_stopped_mid_step"]
    assert run["expected"]["drafts"].keys() == {"reasoning", "answer"}
    assert run["expected"]["depths"].get("1"), run  # the uneven step
    if policy == "phase 0/2":  # reasoning requests verify nothing: vllm:spec_decode_num_drafts_by_depth{depth="0"}
        assert run["expected"]["depths"].get("0"), run
    assert run["counted"] == run["expected"]


GRAMMAR_REFUSED = """
from vllm_ds4x.hooks.spec_scheduling import uniform_drafts
from vllm.v1.spec_decode.metrics import SpecDecodingStats
stats = SpecDecodingStats.new(2)
for _ in range(2):  # each request drafted 2; the grammar refused the second: vLLM's stats count 1
    stats.observe_draft(num_draft_tokens=1, num_accepted_tokens=1)
spec, ids = {"a": [5, 6], "b": [7, 8]}, ["a", "b"]
print(uniform_drafts(spec, ids, stats, None), uniform_drafts(spec, ids, stats, {"a": 1, "b": 1}))
"""


def test_a_step_with_drafts_the_grammar_refused_is_read_from_the_drafts(engine_python: Path) -> None:
    """vLLM's stats leave out drafts the grammar refused: the depth a step verified then comes
    from the drafts each request was scheduled with, not from the stats."""
    done = subprocess.run([engine_python, "-c", GRAMMAR_REFUSED], capture_output=True, text=True, check=True)
    assert done.stdout.split()[-2:] == ["1", "2"]


def test_each_request_verifying_its_own_depth_counts_what_it_verified(engine_checks: dict[str, Any]) -> None:
    """verify "request" (phase 0/2): the batch runs depth 2 for both, r's two drafts are masked (its
    own depth 0); KV rolls back all it ran, and the stats count r as a step that verified nothing
    and a's two drafts, not r's (vLLM's own counters included)."""
    out = engine_checks["scheduler"]["per_request"]
    check_per_request(out)
    assert out["hook"] == "emulated"  # upstream's scheduler has no such hook: the check sets what the fork's does
    assert 'verify="request" needs the Lvllmds4-x fork\'s model runner v2' in out["refused"]


def test_dspark_s_drafter_rests_while_no_step_will_verify_its_drafts(engine_checks: dict[str, Any]) -> None:
    """Phase 0/2 with DSpark's drafter resting (the fork's model runner v2 with DSpark turns it on):
    a reasoning request's drafter rests from its first decode step on; the step after the one that closed
    </think> verifies none of its stale drafts and drafts again; the next verifies 2. Beside an
    answering request (verify "request") only its own drafter rests and only its rows are masked."""
    out = engine_checks["scheduler"]["drafter_rest"]
    assert {run["hook"] for run in out.values()} == {"emulated"}  # upstream's scheduler: the check calls the hook
    check_drafter_rest(out)


def check_drafter_rest(out: dict[str, Any]) -> None:
    batch, request = out["batch"]["steps"], out["request"]["steps"]
    # the prefill, then three decode steps; a request scheduled from the queue is not yet among those
    # the hook weighs (vLLM's running list), so its drafter works after its prefill
    assert [step["resting"] for step in batch] == [[], ["r"], [], []]
    assert [step["drafts"] for step in batch] == [{"r": 0}, {"r": 0}, {"r": 0}, {"r": 2}]
    assert [step["resting"] for step in request] == [[], ["r"], [], []]
    assert [step["drafts"] for step in request][1:] == [{"r": 2, "a": 2}] * 3  # the batch's depth: a's
    assert [step["verify_depths"] for step in request][1:] == [{"r": 0}, {"r": 0}, None]


def check_per_request(out: dict[str, Any]) -> None:
    assert out["scheduled_drafts"] == {"r": 2, "a": 2}
    assert out["verify_depths"] == {"r": 0}
    assert out["computed_after"] == {"r": 14, "a": 15}  # 13-token prompts, 3 run; r kept 1 token, a 2
    assert out["stats"] == {"drafts": 1, "draft_tokens": 2, "accepted": 1, "per_position": [1, 1],
                            "depths": {"2": 1, "0": 1}, "chosen_depths": {"2": 1}}
