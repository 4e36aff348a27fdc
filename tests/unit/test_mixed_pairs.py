"""bench/mixed_pairs.py: each per-request twin's mixed pairs split into tokens and time, on committed runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import mixed_pairs

RESULTS = Path(mixed_pairs.__file__).parent / "results"


def test_the_deepseek_v4_rounds_moved_more_by_time_than_by_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h100-dsv4-e2e: phase 0/2's twin in round 0 made 0.766 of today's tokens in 0.914 of
    its time, in round 1 0.842 in 0.701; over the two rounds time spread 1.303, tokens 1.099."""
    assert mixed_pairs.main([str(RESULTS / "h100-dsv4-e2e")]) == 0
    out = capsys.readouterr().out.splitlines()
    pairs = out[out.index("phase 0/2 per request against phase 0/2, mixed x2:"):][1:4]
    assert pairs[0].startswith("  round 0: 0.838 = tokens 0.766 / time 0.914; tokens reasoning 22, answer 63 "
                               "against reasoning 48, answer 63; steps ms 2: 80.1 against 2: 89.8")
    assert pairs[1].startswith("  round 1: 1.201 = tokens 0.842 / time 0.701")
    assert pairs[2] == "  spread over the pairs (max / min): tokens 1.099, time 1.303"
    assert out[0] == "h100-dsv4-e2e: the mixed pairs of 3 per-request twins"


def test_mixed_draws_are_split_pair_by_pair(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/results/h100-e2e-mixed-draws: one round on three draws, each its own pair; there the time
    held (spread 1.021) and the draws' tokens moved the ratio (1.123)."""
    assert mixed_pairs.main([str(RESULTS / "h100-e2e-mixed-draws")]) == 0
    out = capsys.readouterr().out.splitlines()
    pairs = out[out.index("phase 0/2 per request against phase 0/2, mixed x2:"):][1:5]
    assert [line.split(":")[0] for line in pairs[:3]] == ["  round 0 draw 0", "  round 0 draw 1", "  round 0 draw 2"]
    assert pairs[2].startswith("  round 0 draw 2: 1.190 = tokens 0.863 / time 0.725")
    assert pairs[3] == "  spread over the pairs (max / min): tokens 1.123, time 1.021"


def test_a_run_without_mixed_twins_fails_saying_how_to_get_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert mixed_pairs.main([str(RESULTS / "h200-e2e-start")]) == 1
    assert "no mixed per-request twins: run it with E2E_MIXED=1 and E2E_PER_REQUEST=1" in capsys.readouterr().err
