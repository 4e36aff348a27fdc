"""--check-launch's draft-depth advice: a script that verifies K drafts while
reasoning gets one finding with the figures of the reviewed table's runs
(bench/results/advice.toml; or a measure profile's) and the draft_depth object to add;
the advised policy gets none. The figures are read from the table itself here; that
each matches its run's data is tests/unit/test_advice_table.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ds4x.cli import main
from ds4x.deploy import launch, measured_advice
from tests.serve_script import SPEC, USERS
from vllm_ds4x.depth.named_policies import named_policies
from vllm_ds4x.measure import analysis

PROFILE = {"draft_depth": {"policy": "adaptive", "step_cost": [1.0, 2.2, 2.98]},
           "measured": {"acceptance": {"reasoning": 0.39, "answer": 0.89}, "lk_threads": 12}}


PHASE_0_2 = named_policies(2)["phase 0/2"].draft_depth or {}
ADVISED = {**PHASE_0_2, "verify": "request"}  # the user's script runs two requests (--max-num-seqs 2)
SHARED = "a reasoning and an answering request share steps"
ROWS = measured_advice.load()


def counted(use: measured_advice.Use, policy: str, against: str) -> list[measured_advice.Row]:
    return measured_advice.counted(ROWS, use, policy, against, 2)


def span(rows: list[measured_advice.Row], phase: str, requests: int) -> str:
    """'1.05-1.20x': the table's figures as the advice prints them."""
    figures = [r.figures[phase][requests] for r in rows]
    return f"{min(figures):.2f}-{max(figures):.2f}x"


def findings(tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, *extra: str, seqs: int = 2) -> list[str]:
    script = tmp_path / "serve.sh"
    script.write_text(USERS.format(threads=1, spec=spec).replace("--max-num-seqs 2", f"--max-num-seqs {seqs}"))
    main(["plan", "--check-launch", str(script), *extra])
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning: ") and "draft" in line]


def test_fixed_k_gets_the_tables_figures_and_the_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = counted("policy", "phase 0/2", "fixed 2")
    assert len(runs) == 4, "the table counts four stand-in runs of phase 0/2 against fixed 2"
    [line] = findings(tmp_path, capsys, SPEC)
    assert f"measured {span(runs, 'reasoning', 1)} fixed 2 there at one request, {span(runs, 'reasoning', 2)} at two" \
        in line, line
    assert f"({len(runs)} committed run(s) on {runs[0].device}: {', '.join(r.run for r in runs)} in " \
           f"{measured_advice.TABLE}" in line, line
    [v4] = counted("deepseek-v4", "phase 0/2", "fixed 2")
    assert (f"; on {v4.device}: {v4.figures['reasoning'][1]:.2f}x reasoning, {v4.figures['answer'][1]:.2f}x answer "
            f"at one request ({v4.run})") in line, line
    assert f'add "draft_depth": {json.dumps(ADVISED)}' in line and f"at --max-num-seqs 2 {SHARED}" in line


def test_a_policy_worse_while_answering_gets_the_answering_figures(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """fixed 0 reasons as phase 0/2 does; it lost while answering, in every counted run at two requests."""
    runs = counted("policy", "phase 0/2", "fixed 0")
    assert runs and min(r.figures["answer"][2] for r in runs) > 1.0
    spec = json.dumps({**json.loads(SPEC), "draft_depth": named_policies(2)["fixed 0"].draft_depth})
    [line] = findings(tmp_path, capsys, spec)
    assert (f"fixed 0 verifies fewer drafts while answering: phase 0/2 measured {span(runs, 'answer', 1)} fixed 0 "
            f"there at one request, {span(runs, 'answer', 2)} at two") in line, line
    assert "while reasoning" not in line and json.dumps(ADVISED) in line


def test_the_advised_policy_gets_no_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """phase 0/2 with each request verifying its own depth; or under "batch" where one request runs."""
    spec = {"method": "dspark", "num_speculative_tokens": 2, "draft_depth": ADVISED}
    assert findings(tmp_path, capsys, json.dumps(spec)) == []
    assert findings(tmp_path, capsys, json.dumps({**spec, "draft_depth": PHASE_0_2}), seqs=1) == []


def test_batches_of_two_are_advised_each_request_s_own_depth(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """phase 0/2 under "batch" at --max-num-seqs 2: its per-request twin's mixed pairs in the table's
    counted runs, and the object with "verify": "request"; fixed 2 has no twin to cite."""
    runs = counted("verify", "phase 0/2 per request", "phase 0/2")
    assert len(runs) >= 5 and min(r.figures["mixed"][2] for r in runs) > 1.0  # the twin gained in every counted run
    spec = {"method": "dspark", "num_speculative_tokens": 2, "draft_depth": PHASE_0_2}
    [line] = findings(tmp_path, capsys, json.dumps(spec))
    assert line == (f"warning: at --max-num-seqs 2 {SHARED}, which verify the answer's depth for both; with "
                    f'"verify": "request" each verifies its own (lossless): phase 0/2 per request measured '
                    f"{span(runs, 'mixed', 2)} phase 0/2 on such pairs ({len(runs)} committed run(s) on "
                    f"{runs[0].device}: {', '.join(r.run for r in runs)} in bench/results/advice.toml): add "
                    f'"draft_depth": {json.dumps(ADVISED)}')
    assert counted("verify", "fixed 2 per request", "fixed 2") == []


def test_adaptive_is_advised_its_twin_once_the_run_before_the_cap_is_superseded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """adaptive per request lost on mixed pairs in one run (h200-dsv4-e2e-draws, 0.95x), before the step-cost
    cap: the table marks that row superseded, so the counted runs, all gains, advise adaptive its twin."""
    [before_cap] = [r for r in ROWS if r.use == "verify" and r.against == "adaptive" and r.superseded_by]
    assert before_cap.run == "h200-dsv4-e2e-draws" and before_cap.figures["mixed"][2] < 1.0
    runs = counted("verify", "adaptive per request", "adaptive")
    assert before_cap not in runs and runs and min(r.figures["mixed"][2] for r in runs) > 1.0
    adaptive = named_policies(2)["adaptive"].draft_depth or {}
    [line] = findings(tmp_path, capsys, json.dumps({"method": "dspark", "num_speculative_tokens": 2,
                                                    "draft_depth": adaptive}))
    assert f"adaptive per request measured {span(runs, 'mixed', 2)} adaptive on such pairs ({len(runs)} " in line
    assert before_cap.run not in line and json.dumps({**adaptive, "verify": "request"}) in line


def test_drafts_not_greedy_are_advised_adaptive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [line] = findings(tmp_path, capsys, SPEC.replace("greedy", "probabilistic"))
    assert "measured with greedy drafts" in line and '"policy": "adaptive"' in line


def test_a_profile_gives_this_machines_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(PROFILE))
    [line] = findings(tmp_path, capsys, SPEC, "--profile", str(profile))
    rate_0, rate_2 = 1.0, (1 + 0.39 + 0.39**2) / 2.98
    assert f"depth 0 yields {rate_0 / rate_2:.2f}x the tokens per step cost of depth 2" in line, line
    assert json.dumps(PROFILE["draft_depth"]) in line and str(profile) in line


def test_the_profile_measure_writes_is_read_by_running_requests(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """measure's own writer (step costs keyed by running requests), on the H200's DeepSeek-V4 curve."""
    run = {"threads": 12, "path": "cpu_decode", "cases": [{"tokens": n, "ms": ms, "distinct": 8.0 * n}
                                                           for n, ms in ((1, 1.69), (2, 3.66), (3, 5.18), (4, 6.1),
                                                                         (6, 7.9))]}
    written = analysis.profile(run, [run], "mxfp4", 2, 43, [28.5], 2, (0.39, 0.89), {1: {}, 2: {}})
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(written))
    [line] = findings(tmp_path, capsys, SPEC, "--profile", str(profile))
    for requests, cost in written["draft_depth"]["step_cost"].items():
        ratio = (1 / cost[0]) / ((1 + 0.39 + 0.39**2) / cost[2])
        assert f"at {requests} running request(s), step costs {cost}: depth 0 yields {ratio:.2f}x" in line, line
    assert json.dumps(written["draft_depth"]) in line


@pytest.mark.parametrize("profile", [{}, {"draft_depth": {"step_cost": [1.0, 0.0]}, "measured": {"acceptance": {}}},
                                     {"draft_depth": {"step_cost": "fast"}, "measured": {"acceptance": {"reasoning": 1}}},
                                     {"draft_depth": {"policy": "adaptive", "step_cost": [1.0, 2.2, 2.98], "smoothing": 5},
                                      "measured": PROFILE["measured"]}])
def test_a_profile_that_is_not_measures_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          profile: dict[str, object]) -> None:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    script = tmp_path / "serve.sh"
    script.write_text(USERS.format(threads=1, spec=SPEC))
    assert main(["plan", "--check-launch", str(script), "--profile", str(path)]) == 2
    assert f"--profile {path}: not a plan --measure profile" in capsys.readouterr().err


def test_the_issues_script_gets_the_draft_depth_and_torch_threads(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "serve.sh"
    script.write_text(USERS.format(threads=12, spec=SPEC))  # LK_THREADS=12, OMP_NUM_THREADS=12, the dotted cudagraph_mode
    assert main(["plan", "--check-launch", str(script), "--cores", "16"]) == 0
    out = capsys.readouterr().out.splitlines()
    found = [line for line in out if line.startswith(("warning", "error"))]
    assert len(found) == 2 and found[0].startswith("warning: OMP_NUM_THREADS=12 beside LK_THREADS=12 on 16 cores")
    assert found[1].startswith("warning: fixed 2 verifies drafts while reasoning"), out
    assert any("0 error(s), 2 warning(s)" in line for line in out), out


@pytest.mark.parametrize(("torch_threads", "lk", "cores", "warned"),
                         [("12", "12", 16, True), ("4", "12", 16, False), ("1", "12", 16, False), ("12", "4", 16, False),
                          ("8", "12", 16, True), (None, "12", 16, False)])
def test_torch_threads_past_the_cores_beside_lk_moe_are_advised_one(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                    torch_threads: str | None, lk: str, cores: int,
                                                                    warned: bool) -> None:
    text = USERS.format(threads=lk, spec=SPEC)
    text = text.replace("OMP_NUM_THREADS=12", f"OMP_NUM_THREADS={torch_threads}" if torch_threads else "")
    script = tmp_path / "serve.sh"
    script.write_text(text)
    main(["plan", "--check-launch", str(script), "--cores", str(cores)])
    lines = [line for line in capsys.readouterr().out.splitlines() if "OMP_NUM_THREADS" in line]
    assert bool(lines) == warned, lines
    if warned:
        assert launch.OMP_MEASURED in lines[0] and "vLLM sets 1 where it is unset" in lines[0]


def test_verify_per_request_is_advised_as_its_policy_is_and_kept(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A script whose batches verify per request ("verify": "request") gets its policy's finding, and the
    object advised keeps the setting."""
    fixed0 = named_policies(2)["fixed 0"].draft_depth or {}
    plain = findings(tmp_path, capsys, json.dumps({**json.loads(SPEC), "draft_depth": fixed0}))
    own = findings(tmp_path, capsys, json.dumps({**json.loads(SPEC), "draft_depth": {**fixed0, "verify": "request"}}))
    assert len(own) == len(plain) == 1 and json.dumps(ADVISED) in own[0] and json.dumps(ADVISED) in plain[0]
    assert SHARED in plain[0] and SHARED not in own[0]  # the script's own "verify" was kept, not advised again
    assert own[0] == plain[0][:plain[0].index(f"; at --max-num-seqs 2 {SHARED}")]
