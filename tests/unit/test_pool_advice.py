"""`plan --check-launch`'s advice between lk_moe's expert pool and whole resident layers (ds4x.deploy.pool_advice):
the arithmetic, the user's script with and without a hit rate, what --write sets, bad input, and the doc's table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ds4x.cli import main
from ds4x.deploy import pool_advice, script_reader
from ds4x.deploy.script_writer import MARK
from ds4x.errors import Ds4xError
from tests.doc_figures import agrees, assert_quotes, row
from tests.serve_script import SPEC, USERS
from vllm_ds4x.moe import placement as mp

ROOT = Path(__file__).resolve().parents[2]
SHAPE = mp.model_shape(json.loads((ROOT / "examples/deepseek-v4-flash/config.json").read_text()))
BUDGET = int(6.85 * mp.GIB)  # what plan leaves for resident layers at the user's settings
PHASE_02 = '{"policy": "phase", "reasoning_depth": 0, "answer_depth": 2, "verify": "request"}'


def users_script(tmp_path: Path, env: str = "", spec: str = SPEC) -> Path:
    script = tmp_path / "serve.sh"
    script.write_text(USERS.format(threads=12, spec=spec).replace("OMP_NUM_THREADS=12\n", env))
    return script


def pool_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "expert pool or whole layers" in line]


def test_the_room_holds_two_whole_layers_or_twelve_slots() -> None:
    space = pool_advice.room(SHAPE, BUDGET, 1, (0, 1))
    assert (space.slots, space.moe_layers) == (12, 43) and space.pool_bytes <= BUDGET
    assert space.pool_bytes == 12 * 43 * SHAPE.expert_bytes
    assert pool_advice.room(SHAPE, BUDGET, 2, ()).slots >= 24  # tensor parallel: each GPU holds half an expert
    assert pool_advice.room(SHAPE, 5 * 43 * SHAPE.expert_bytes, 1, ()).slots == 0  # fewer than top-6: no pool
    assert space.whole_share == pytest.approx(2 / 43)


def test_the_pool_helps_steps_of_one_or_two_rows_only() -> None:
    assert [pool_advice.pool_share(0.3, d) for d in (0, 1, 2, 3)] == [0.3, 0.3, 0.0, 0.0]
    assert [pool_advice.pool_share(0.3, d, requests=2) for d in (0, 1)] == [0.3, 0.0]


def test_break_even_by_policy() -> None:
    space = pool_advice.room(SHAPE, BUDGET, 1, (0, 1))
    reads = [pool_advice.reads(SHAPE, d) for d in (0, 1, 2)]
    assert reads[0] == pytest.approx(6.0) and reads[1] < 12 and reads[2] < 18  # top-6 distinct, overlapping after
    assert pool_advice.break_even(SHAPE, space, (0, 2)) == pytest.approx(2 / 43 * (reads[0] + reads[2]) / reads[0])
    assert pool_advice.break_even(SHAPE, space, (1, 1)) == pytest.approx(2 / 43)
    assert pool_advice.break_even(SHAPE, space, (2, 2)) is None  # fixed 2: every step has 3 rows


@pytest.mark.parametrize(("hit", "winner"), [(0.10, "layers"), (0.26, "pool"), (1.0, "pool")])
def test_the_winner_at_phase_0_2(hit: float, winner: str) -> None:
    space = pool_advice.room(SHAPE, BUDGET, 1, (0, 1))
    advice = pool_advice.advise(SHAPE, space, pool_advice.Policy("phase 0/2", 2, (0, 2)), hit, ROOT)
    assert advice is not None and advice.winner == winner
    assert pool_advice.settings(winner, space) == (
        {"LK_POOL_SLOTS": "12", mp.LAYERS_ENV: "none"} if winner == "pool" else {"LK_POOL_SLOTS": "0", mp.LAYERS_ENV: "0,1"})


def test_fixed_2_never_pools_and_adaptive_names_no_winner() -> None:
    space = pool_advice.room(SHAPE, BUDGET, 1, (0, 1))
    fixed = pool_advice.advise(SHAPE, space, pool_advice.Policy("fixed 2", 2, (2, 2)), 1.0, ROOT)
    assert fixed is not None and fixed.winner == "layers"
    adaptive = pool_advice.advise(SHAPE, space, pool_advice.Policy("adaptive", 2, None), 0.5, ROOT)
    assert adaptive is not None and adaptive.winner is None


def test_the_nearest_committed_run_is_quoted() -> None:
    runs = pool_advice.measured(ROOT)
    assert len(runs) == 6 and {r.slots for r in runs} == {12, 32}
    near = pool_advice.nearest(runs, 0.26, 12)
    assert (near.slots, near.locality, near.ratio[0]) == (12, "r0.6", 0.882)


def test_a_missing_run_is_one_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(Ds4xError, match="h100-pool-decode/pool-12.json"):
        pool_advice.measured(tmp_path)


def test_the_users_script_without_a_hit_rate_gets_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--check-launch", str(users_script(tmp_path)), "--cores", "16"]) == 0
    lines = pool_lines(capsys.readouterr().out)
    assert len(lines) == 1 and lines[0].startswith("note: ") and "--pool-hit-rate" in lines[0]
    even = re.search(r"above a hit rate of (\d\.\d+)", lines[0])
    space = pool_advice.room(SHAPE, BUDGET, 1, (0, 1))
    assert even and agrees(even[1], pool_advice.break_even(SHAPE, space, (0, 2)) or 0)  # at phase 0/2, advised


@pytest.mark.parametrize(("hit", "pooled"), [("0.26", True), ("0.1", False)])
def test_the_users_script_with_a_hit_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str], hit: str,
                                          pooled: bool) -> None:
    script, out = users_script(tmp_path), tmp_path / "tuned.sh"
    assert main(["plan", "--check-launch", str(script), "--cores", "16", "--pool-hit-rate", hit, "--write",
                 str(out)]) == 0
    lines = pool_lines(capsys.readouterr().out)
    assert len(lines) == 1 and lines[0].startswith("warning: " if pooled else "note: "), lines
    env = script_reader.read(out.read_text()).env
    assert (env.get("LK_POOL_SLOTS"), env[mp.LAYERS_ENV]) == (("12", "none") if pooled else (None, "0,1"))
    assert main(["plan", "--check-launch", str(out), "--cores", "16", "--pool-hit-rate", hit]) == 0
    again = capsys.readouterr().out
    assert "0 error(s), 0 warning(s)" in again and pool_lines(again)[0].startswith("note: ")


def test_an_added_setting_comes_under_its_comment(tmp_path: Path) -> None:
    script, out = users_script(tmp_path), tmp_path / "tuned.sh"
    assert main(["plan", "--check-launch", str(script), "--cores", "16", "--pool-hit-rate", "0.3", "--write",
                 str(out)]) == 0
    lines = out.read_text().splitlines()
    at = lines.index("export LK_POOL_SLOTS=12")
    above = next(i for i in range(at, -1, -1) if lines[i].startswith(MARK))
    assert "added LK_POOL_SLOTS" in lines[above] and at > above


def test_a_pool_that_loses_is_set_back_to_whole_layers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = users_script(tmp_path, env="export LK_POOL_SLOTS=12\n", spec=SPEC[:-1] + f', "draft_depth": {PHASE_02}}}')
    text = script.read_text().replace("LAYERS=0,1", "LAYERS=none")
    script.write_text(text)
    out = tmp_path / "tuned.sh"
    assert main(["plan", "--check-launch", str(script), "--cores", "16", "--pool-hit-rate", "0.1", "--write",
                 str(out)]) == 0
    assert pool_lines(capsys.readouterr().out)[0].startswith("warning: ")
    env = script_reader.read(out.read_text()).env
    assert (env["LK_POOL_SLOTS"], env[mp.LAYERS_ENV]) == ("0", "0,1")


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "most", "inf"])
def test_a_hit_rate_outside_0_1_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--check-launch", str(users_script(tmp_path)), f"--pool-hit-rate={value}"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"--pool-hit-rate: {value!r}: expected a number in [0, 1]" in err, err


def test_a_hit_rate_needs_a_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--pool-hit-rate", "0.3"]) == 2
    assert "--pool-hit-rate applies to --check-launch only" in capsys.readouterr().err


DOC = ROOT / "docs/expert-pool.md"


@pytest.mark.parametrize("hit", [0.05, 0.10, 0.18, 0.26, 0.50])
def test_the_docs_prediction_follows_the_arithmetic(hit: float) -> None:
    cells = row(DOC, f"{hit:.2f}", column="pool at phase 0/2")
    shares = [pool_advice.pool_share(hit, 0), pool_advice.pool_share(hit, 2),
              pool_advice.policy_share(SHAPE, hit, (0, 2)), pool_advice.policy_share(SHAPE, hit, (1, 2))]
    assert_quotes(" ".join(cells[:5]), [hit, *(100 * s for s in shares)])
    space = pool_advice.room(SHAPE, BUDGET, 1, (0, 1))
    assert cells[5] == ("pool" if shares[2] > space.whole_share else "whole layers")


def test_the_docs_whole_layers() -> None:
    cells = row(DOC, "whole layers", column="pool at phase 0/2")
    assert_quotes(" ".join(cells[1:5]), [100 * pool_advice.room(SHAPE, BUDGET, 1, (0, 1)).whole_share] * 4)


def test_the_gpu_half_the_shares_leave_out_is_the_engine_runs() -> None:
    """GPU_HALF_MS: the rest of a depth-0 step with the pool less that with whole layers, over the pooled
    layers, as the committed engine run's report prints them; the advice states it for the model's layers."""
    report = (ROOT / pool_advice.ENGINE_RUN / "report.txt").read_text().splitlines()
    rest = {cells[0]: float(cells[4]) for cells in map(str.split, report)
            if len(cells) >= 5 and cells[0] in ("pool", "layers") and cells[1] == "0"}
    pooled = json.loads((ROOT / pool_advice.ENGINE_RUN / "e2e-spec-pool.json").read_text())["arrangement"]["lk_layers"]
    assert agrees(str(pool_advice.GPU_HALF_MS), (rest["pool"] - rest["layers"]) / pooled)
    space = pool_advice.room(SHAPE, BUDGET, 1, (0, 1))
    advice = pool_advice.advise(SHAPE, space, pool_advice.Policy("phase 0/2", 2, (0, 2)), 0.5, ROOT)
    assert advice is not None and "about 0.23 ms a pooled layer to a step" in advice.message
    assert advice.message.endswith("about 9.9 ms a step on 43 MoE layers, so the pool needs a higher hit rate than "
                                   "the shares say")
