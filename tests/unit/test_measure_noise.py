"""measure checks its own noise before advising: a curve where more tokens cost
less, or whose repeats spread past the bound, is timed again within --budget, and
one that stays noisy is reported with its figures and no profile is written. The
timings come from a stand-in worker (given as --python) that answers with the
curves a test sets, one a call, and logs each job it was given."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ds4x.cli import main
from tests.integration.test_measure import config
from vllm_ds4x.measure import analysis

TOKENS = [1, 2, 3, 4, 6]  # -k 2 at plan's --max-num-seqs 2
CLEAN = [1.0, 1.6, 2.1, 2.5, 3.2]
DIP = [1.0, 2.78, 2.55, 3.0, 3.5]  # the busy 2-core run: verifying two drafts cheaper than one
STANDIN = """#!{python}
import json, os, sys
from pathlib import Path

if sys.argv[1] == "-c":  # measure's check that this Python has lk_moe
    sys.exit(0)
here, job, threads = Path(__file__).parent, json.loads(sys.argv[-1]), int(os.environ["LK_THREADS"])
log = here / "jobs.jsonl"
calls = len(log.read_text().splitlines()) if log.exists() else 0
with log.open("a") as f:
    f.write(json.dumps({{"threads": threads, "budget_s": job["budget_s"], "tokens": job["tokens"]}}) + "\\n")
curves = json.loads((here / "curves.json").read_text())
ms, spread = curves[min(calls, len(curves) - 1)]
slower = 1 + 0.2 * (threads - 1)  # LK_THREADS=1 the best, never 1.5x: no thread warning
cases = [{{"tokens": t, "ms": m * slower, "calls": 9, "distinct": 2.0,
          "repeats": [m * slower * (1 - spread / 2), m * slower, m * slower * (1 + spread / 2)]}}
         for t, m in zip(job["tokens"], ms)]
print(json.dumps({{"threads": threads, "ram_gbs": 10.0, "path": "cpu_prefill", "cases": cases}}))
"""


def measure(tmp_path: Path, curves: list[tuple[list[float], float]], budget: int = 60,
            *extra: str) -> tuple[int, list[dict[str, Any]]]:
    """plan --measure at LK_THREADS 1 and 2 on the stand-in answering `curves` (ms by token count,
    the repeats' spread) in order, the last one from then on: the exit code and the jobs it ran."""
    (tmp_path / "curves.json").write_text(json.dumps(curves))
    python = tmp_path / "python"
    python.write_text(STANDIN.format(python=sys.executable))
    python.chmod(0o755)
    code = main(["plan", "--measure", "--config", str(config(tmp_path)), "--python", str(python),
                 "--threads", "1", "2", "--budget", str(budget), "--profile-out", str(tmp_path / "p.json"),
                 "--prefill-budget", "0", *extra])  # decode's noise alone: the prefill curve is test_measure_prefill's
    jobs = [json.loads(line) for line in (tmp_path / "jobs.jsonl").read_text().splitlines()]
    assert all(job["tokens"] == TOKENS for job in jobs)
    assert sum(job["budget_s"] for job in jobs) <= budget + 1e-9  # timing again stays within --budget
    return code, jobs


@pytest.mark.parametrize(("curve", "named"), [
    ((DIP, 0.02), "3 tokens cost 2.55 ms, less than 2 at 2.78"),
    ((CLEAN, 0.5), "repeats at 1 tokens spread 50% of their median (bound 20%, --noise-bound)"),
])
def test_a_curve_that_stays_noisy_is_timed_again_then_reported_not_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], curve: tuple[list[float], float], named: str) -> None:
    code, jobs = measure(tmp_path, [curve])
    out, err = capsys.readouterr()
    assert code == 1
    assert [job["threads"] for job in jobs] == [1, 2, 1, 1]  # the sweep, then the best curve twice more
    assert out.count("noisy curve at LK_THREADS=1") == 2 and "timed 3 time(s)" in out
    assert named in err and "the curve at LK_THREADS=1 stayed noisy, timed 3 times within --budget 60" in err
    assert "no profile written" in err and "Traceback" not in err
    assert not (tmp_path / "p.json").exists()
    assert "--speculative-config" not in out and "predicted" not in out  # no advice from it
    assert f"{curve[1]:.0%}" in out  # the curve table carries each count's spread


def test_a_curve_clean_on_the_second_timing_is_written_from_that_timing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, jobs = measure(tmp_path, [(DIP, 0.02), (DIP, 0.02), (CLEAN, 0.05)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert [job["threads"] for job in jobs] == [1, 2, 1]  # clean after one more timing: no third
    assert out.count("noisy curve at LK_THREADS=1") == 1 and "timed 2 time(s)" in out
    measured = json.loads((tmp_path / "p.json").read_text())["measured"]
    run = next(run for run in measured["runs"] if run["threads"] == 1)
    assert [case["ms"] for case in run["cases"]] == CLEAN and run["timed"] == 2 and run["ram_gbs"] == 10.0
    seconds = measured["step_seconds"]
    assert seconds == sorted(seconds)  # the written step costs grow with the tokens verified
    assert "--speculative-config" in out


def test_a_clean_curve_is_timed_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, jobs = measure(tmp_path, [(CLEAN, 0.1)])
    out, err = capsys.readouterr()
    assert (code, [job["threads"] for job in jobs]) == (0, [1, 2]), err
    assert "noisy" not in out and "timed 1 time(s)" in out
    assert sum(job["budget_s"] for job in jobs) == pytest.approx(60 * 0.5)  # the rest was kept for timing again


@pytest.mark.parametrize(("ms", "spreads", "bound", "found"), [
    ([1.0, 1.6, 2.1], [0.0, 0.1, 0.19], 0.2, []),  # rising, the spread within its bound
    ([1.0, 1.6, 1.56], [0.0, 0.0, 0.0], 0.2, []),  # a drop within DROP_SLACK
    ([1.0, 2.78, 2.55], [0.0, 0.0, 0.0], 0.2, ["3 tokens cost 2.55 ms, less than 2 at 2.78"]),
    ([1.0, 1.6, 2.1], [0.0, 0.3, 0.25], 0.2, ["repeats at 2 tokens spread 30% of their median (bound 20%, --noise-bound)"]),
    ([1.0, 2.78, 2.55], [0.0, 0.3, 0.25], 0.4, []),  # --noise-bound 0.4: 40% spread and a 10% drop let through
    ([1.0, 2.78, 2.4], [0.0, 0.3, 0.25], 0.4, ["3 tokens cost 2.40 ms, less than 2 at 2.78"]),
])
def test_noise_names_each_dip_and_the_widest_spread(ms: list[float], spreads: list[float], bound: float,
                                                   found: list[str]) -> None:
    cases = [{"tokens": t, "ms": m, "repeats": [m * (1 - s / 2), m, m * (1 + s / 2)]}
             for t, m, s in zip([1, 2, 3], ms, spreads)]
    assert analysis.noise({"cases": cases}, bound) == found


def test_a_wider_noise_bound_advises_from_a_spread_the_default_refuses(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, jobs = measure(tmp_path, [(CLEAN, 0.5)], 60, "--noise-bound", "1")
    assert (code, [job["threads"] for job in jobs]) == (0, [1, 2]), capsys.readouterr().err
    assert "noisy" not in capsys.readouterr().out and (tmp_path / "p.json").is_file()


def test_the_profile_starts_adaptive_from_each_phase_s_acceptance_inside_its_range() -> None:
    """measure's draft_depth: the per-position rate each phase's --acceptance means (0.39 at depth 2:
    0.515), kept below 1 where the rate rounds there, so that the engine takes the profile."""
    from vllm_ds4x.depth import policy as dd

    measured = json.loads((Path(__file__).resolve().parents[2] / "bench/results/h200-dsv4-e2e-rest/measure.json")
                          .read_text())["measured"]
    best = next(run for run in measured["runs"] if run["threads"] == measured["lk_threads"])
    start = analysis.adaptive_start(best, 2, 8, measured["gpu_ms"], 1, (0.39, 0.9999))
    assert start["prior_acceptance"] == {"reasoning": 0.515, "answer": 0.999}
    config = dd.DraftDepthConfig.from_dict({"policy": "adaptive", **start}, 2)
    assert isinstance(config, dd.AdaptiveDepth) and config.prior_by_phase()["answer"] == 0.999
