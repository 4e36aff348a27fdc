"""bench/e2e_pool.py, the report of the pool against whole layers at equal VRAM (#57), on run folders
derived here from the committed resident run (bench/results/h200-dsv4-e2e-resident): each arrangement's
e2e JSON is a copy of that run's with the keys e2e.py adds for E2E_MODES=pool, its steps moved by
what depth_sim.call_ms says the arrangement's CPU experts cost and its tok/s with them. A complete
folder passes; a missing arrangement, cell or key, unequal tokens, a cover miss, counters without a
pool, unequal VRAM, an eager step or a prediction off by more than 10% fail it (exit 1)."""

from __future__ import annotations

import copy
import json
import shutil
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench import e2e_decode, e2e_pool
from vllm_ds4x.depth import sim

ROOT = Path(__file__).resolve().parents[2]
RESIDENT = ROOT / "bench" / "results" / "h200-dsv4-e2e-resident"
EXPERT_BYTES = 13_369_344  # one MXFP4 expert with its scales (12.75 MiB)
POLICIES = ("fixed 2", "phase 0/2")
LAYERS = 10  # the stand-in's target layers; "layers" keeps 0 and 1 on the GPU
ROUTING = {"router": "locality", "reuse": 0.38, "skew": 0.8,
           "measured": {"reuse": 0.37, "distinct_1": 6.0, "distinct_2": 9.8, "distinct_3": 13.5},
           "gate_agrees": {"1": {"rows": 1.0, "experts": 1.0, "cosine": 0.9}, "2": {"rows": 0.99, "experts": 1.0,
                                                                                   "cosine": 0.9}}}
PLACED = {"layers": ([0, 1], 0), "pool": ([], 51), "user": ([], 12), "none": ([], 0)}  # resident, slots
HIT = {"pool": 0.3, "user": 0.1}


def curve() -> dict[int, float]:
    return sim.measured_curve(json.loads((RESIDENT / "measure.json").read_text())["measured"])


def counters(hit: float, looked: int = 1000) -> dict[str, float]:
    hits = round(hit * looked)
    return {"hits": float(hits), "misses": float(looked - hits), "pumps": 40.0, "hit_rate": hits / looked,
            "cover_miss": 0.0, "cover_dup": 0.0, "device_bytes": 7e9}


def engine(tag: str, gain: Callable[[dict[str, Any]], float] = lambda cell: 1.0) -> dict[str, Any]:
    """The committed resident run as the `tag` arrangement's: its fixed 2 and phase 0/2 cells, each
    step moved from 8 lk_moe layers at no hits to this arrangement's layers at its hit rate, tok/s
    with it (times gain(cell))."""
    run: dict[str, Any] = json.loads((RESIDENT / "e2e-spec.json").read_text())
    resident, slots = PLACED[tag]
    lk_layers = LAYERS - len(resident)
    pool = sim.Pool(hit_rate=HIT.get(tag, 0.0))
    layer_ms = curve()
    cells = []
    for cell in run["cells"]:
        if cell["policy"] not in POLICIES:
            continue
        (depth, step), = cell["steps"].items()  # every kept cell verifies one depth
        rows = int(depth) + 1
        ms = step["median_ms"] - 8 * layer_ms[rows] + lk_layers * sim.call_ms(layer_ms, rows, pool)
        cell["tok_s"] *= step["median_ms"] / ms * gain(cell)
        step["median_ms"] = ms
        cell["pool"] = counters(HIT[tag]) if tag in HIT else {}
        cells.append(cell)
    run.update(cells=cells, tag=tag, layers=lk_layers, routing=copy.deepcopy(ROUTING),
               pool=counters(HIT[tag]) if tag in HIT else {},
               arrangement={"tag": tag, "resident": resident, "pool_slots": slots, "lk_layers": lk_layers,
                            "expert_bytes": EXPERT_BYTES,
                            "gpu_expert_bytes": (len(resident) * 256 + slots * lk_layers) * EXPERT_BYTES})
    return run


def write(resdir: Path, runs: dict[str, dict[str, Any]]) -> Path:
    shutil.copy(RESIDENT / "measure.json", resdir / "measure.json")
    for tag, run in runs.items():
        (resdir / f"e2e-spec-{tag}.json").write_text(json.dumps(run))
    return resdir


@pytest.fixture
def runs() -> dict[str, dict[str, Any]]:
    return {tag: engine(tag) for tag in e2e_pool.TAGS}


def report(resdir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = e2e_pool.main([str(resdir), "--seeds", "4"])
    return code, capsys.readouterr().out


def test_a_complete_run_passes_and_prints_every_table(runs: dict[str, dict[str, Any]], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, out = report(write(tmp_path, runs), capsys)
    assert code == 0, out
    assert "FAIL" not in out
    for heading in ("reasoning x1 phase 0/2: steady decode tok/s", "answer x1 fixed 2: steady decode tok/s",
                    "step by verified depth, x1", "depth_sim against the engine", "noise floor x1",
                    "simulator within 10% of every arrangement's cells: yes", "equal VRAM: pool's routed-expert bytes -0.4% off those of layers"):
        assert heading in out
    # the pool's depth-0 step: 10 lk_moe layers at 0.3 of the 6 experts a token off the CPU
    rows = {tuple(line.split()[:2]): line.split() for line in out.splitlines() if line.startswith("  pool ")}
    step = e2e_pool.Arrangement("pool", runs["pool"], e2e_pool.by_cell(runs["pool"])).step_ms(1, 0)
    assert step is not None and rows["pool", "0"][2] == f"{step:.1f}"
    assert rows["pool", "0"][3] == f"{10 * 0.7 * curve()[1]:.1f}" and rows["pool", "0"][5] == "0.300"
    assert rows["pool", "2"][3] == f"{10 * curve()[3]:.1f}"  # 3 rows: the CPU computes every expert


def test_the_ratios_are_paired_by_round_and_against_layers_and_none(runs: dict[str, dict[str, Any]],
                                                                    tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    runs["pool"] = engine("pool", lambda cell: 1.3 if cell["round"] == 0 else 1.1)
    code, out = report(write(tmp_path, runs), capsys)
    key = ("reasoning", 1, "phase 0/2")
    cells = {tag: e2e_pool.by_cell(run)[key] for tag, run in runs.items()}
    want = [statistics.median(e2e_pool.paired(cells["pool"], cells[base])) for base in ("layers", "none")]
    section = out.split("reasoning x1 phase 0/2: steady decode tok/s")[1]
    pool_row = next(line for line in section.splitlines() if line.startswith("  pool "))
    assert [float(x) for x in pool_row.split()[3:] if x != "tie"][:2] == [round(w, 3) for w in want]
    assert code == 1 and "predicted" in out  # 1.2x the model: off by more than 10%


def test_the_noise_floor_is_e2e_decodes(runs: dict[str, dict[str, Any]], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    _, out = report(write(tmp_path, runs), capsys)
    floors = {}
    for tag, run in runs.items():
        measured = e2e_pool.Arrangement(tag, run, e2e_pool.by_cell(run)).medians(1)
        assert e2e_decode.measured_pairs(measured) == [("answer", "fixed 2", "phase 0/2")]
        floors[tag] = e2e_decode.noise_floor(measured, e2e_decode.measured_pairs(measured))
    line = next(line for line in out.splitlines() if line.startswith("noise floor x1"))
    assert line.endswith(f"the run's {max(floors.values()):.1%}")
    assert all(f"{tag} {f:.1%}" in line for tag, f in floors.items())


def test_e2e_decodes_own_floor_is_unchanged() -> None:
    measured = {"reasoning": {"fixed 0": 10.0, "phase 0/2": 10.5, "fixed 1": 8.0, "phase 1/2": 8.0, "fixed 2": 6.0},
                "answer": {"fixed 2": 12.0, "phase 0/2": 11.0, "phase 1/2": 12.0}}
    assert e2e_decode.noise_floor(measured) == pytest.approx(max(0.05 / 1.05 + 0, abs(10 / 10.5 - 1), 1 / 11))


@pytest.mark.parametrize(("ratio", "floor", "target", "verdict"), [
    (1.00, 0.05, 1.0, "TIE"), (0.96, 0.05, 1.0, "TIE"), (1.04, 0.05, 1.0, "TIE"), (1.06, 0.05, 1.0, "MET"),
    (0.94, 0.05, 1.0, "NOT MET"), (1.12, 0.05, 1.1, "MET"), (1.08, 0.05, 1.1, "TIE"), (1.0, 0.05, 1.1, "NOT MET"),
    (1.0, 0.0, 1.0, "TIE"), (0.999, 0.0, 1.0, "NOT MET")])
def test_a_target_inside_the_floor_is_a_tie(ratio: float, floor: float, target: float, verdict: str) -> None:
    assert e2e_pool.verdict(ratio, floor, target).strip() == verdict
    assert e2e_pool.tie(ratio, floor) == ("tie" if abs(ratio - 1) <= floor else "")


def test_the_targets_at_reuse_038(runs: dict[str, dict[str, Any]], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out = report(write(tmp_path, runs), capsys)
    assert code == 0, out
    lines = [line for line in out.splitlines() if "reuse 0.38, reasoning phase 0/2: pool >= 1.10x layers" in line]
    assert len(lines) == 1 and lines[0].split()[0] in ("MET", "NOT", "TIE")
    assert any("answer fixed 2: pool no slower than layers within the floor" in line for line in out.splitlines())
    assert "reuse 0, " not in out


def test_the_targets_at_reuse_0(runs: dict[str, dict[str, Any]], tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    for run in runs.values():
        run["routing"] = {"router": "random"}
    code, out = report(write(tmp_path, runs), capsys)
    assert code == 0, out
    assert sum("reuse 0, " in line and "pool no slower than layers" in line for line in out.splitlines()) == 4
    assert "1.10x" not in out


def broken(runs: dict[str, dict[str, Any]], how: str) -> dict[str, dict[str, Any]]:
    runs = copy.deepcopy(runs)
    pool = runs["pool"]
    if how == "missing arrangement":
        del runs["user"]
    elif how == "crashed engine":
        pool.update(ok=False, error="RuntimeError('CUDA error')")
    elif how == "missing cell":
        pool["cells"] = [c for c in pool["cells"] if not (c["policy"] == "phase 0/2" and c["phase"] == "reasoning")]
    elif how == "one round":
        runs["none"]["cells"] = [c for c in runs["none"]["cells"] if c["round"] == 0]
    elif how == "cell measured nothing":
        next(c for c in pool["cells"] if c["phase"] == "reasoning" and c["policy"] == "fixed 2")["tok_s"] = None
    elif how == "missing arrangement key":
        del pool["arrangement"]["gpu_expert_bytes"]
    elif how == "no arrangement":
        del runs["layers"]["arrangement"]
    elif how == "missing pool counter":
        del pool["pool"]["cover_dup"]
    elif how == "missing routing figure":
        del pool["routing"]["measured"]["distinct_2"]
    elif how == "routed otherwise":  # h100-dsv4-e2e-pool-r038's route check
        pool["routing"]["gate_agrees"]["2"]["rows"] = 0.0
    elif how == "no route check":
        del runs["layers"]["routing"]["gate_agrees"]
    elif how == "cell without tokens":
        del runs["user"]["cells"][2]["tokens"]
    elif how == "tokens differ":
        runs["user"]["cells"][3]["tokens"][0][-1] += 1
    elif how == "tokens differ from none":
        for cell in runs["none"]["cells"]:
            if cell["phase"] == "answer":
                cell["tokens"][0][0] += 1
    elif how == "policy swap":
        cell = next(c for c in runs["user"]["cells"] if c["phase"] == "reasoning" and c["policy"] == "phase 0/2")
        cell["steps"] = {"2": cell["steps"]["0"]}
    elif how == "no steps":
        next(c for c in runs["layers"]["cells"] if c["phase"] == "answer" and c["round"] == 1)["steps"] = {}
    elif how == "cover miss":
        pool["pool"]["cover_miss"] = 1.0
    elif how == "cover dup in a cell":
        pool["cells"][0]["pool"]["cover_dup"] = 2.0
    elif how == "counters without a pool":
        runs["layers"]["pool"] = counters(0.1)
    elif how == "a pool that looked up nothing":
        pool["pool"].update(hits=0.0, misses=0.0, hit_rate=0.0)
    elif how == "unequal VRAM":
        pool["arrangement"]["gpu_expert_bytes"] = int(pool["arrangement"]["gpu_expert_bytes"] * 1.08)
    elif how == "wrong arrangement":
        runs["none"]["arrangement"]["pool_slots"] = 12
    elif how == "eager decode step":
        runs["none"]["decode_steps"]["eager"] = {"3": 1}
    elif how == "no graph":
        runs["user"]["decode_steps"]["graph"] = {"1": 10}
        runs["user"]["replays"]["ModelCudaGraphManager"] = {"1": 10}
    elif how == "routing differs":
        runs["none"]["routing"]["reuse"] = 0.6
    elif how == "prediction off":
        for cell in pool["cells"]:
            cell["tok_s"] *= 1.25
    return runs


@pytest.mark.parametrize(("how", "message"), [
    ("missing arrangement", "arrangement user: no e2e-spec-user.json"),
    ("crashed engine", "e2e-spec-pool.json: the engine did not finish"),
    ("missing cell", "pool: reasoning x1 phase 0/2: 0 rounds measured"),
    ("one round", "none: answer x1 fixed 2: 1 rounds measured"),
    ("cell measured nothing", "pool: reasoning x1 fixed 2: 1 rounds measured (2 cells)"),
    ("missing arrangement key", "e2e-spec-pool.json: no arrangement.gpu_expert_bytes"),
    ("no arrangement", "e2e-spec-layers.json: no \"arrangement\" object"),
    ("missing pool counter", "pool: no pool counter(s) cover_dup"),
    ("missing routing figure", "e2e-spec-pool.json: no routing.measured.distinct_2"),
    ("routed otherwise", "e2e-spec-pool.json: the engine routed 0% of its MoE rows as the locality table says"),
    ("no route check", "e2e-spec-layers.json: no routing.gate_agrees"),
    ("cell without tokens", "e2e-spec-user.json: cell 2 has no tokens"),
    ("tokens differ", "user: greedy tokens differ from none's in 1 cell(s)"),
    ("tokens differ from none", "layers: greedy tokens differ from none's in 4 cell(s): answer x1"),
    ("cover miss", "pool: lk_moe counted cover_miss 1 over the run and 0 in its cells, 0 wanted"),
    ("cover dup in a cell", "pool: lk_moe counted cover_dup 0 over the run and 2 in its cells, 0 wanted"),
    ("policy swap", "user: reasoning x1 phase 0/2 round 0: steps at depths ['2'], expected 0"),
    ("no steps", "layers: answer x1 fixed 2 round 1: steps at depths [], expected 2"),
    ("counters without a pool", "layers: pool counters"),
    ("a pool that looked up nothing", "pool: the pool looked up no expert"),
    ("unequal VRAM", "equal VRAM: pool's routed-expert bytes +7.6% off those of layers"),
    ("wrong arrangement", "none: resident [], 12 slots"),
    ("eager decode step", "none: eager decode steps {'3': 1}"),
    ("no graph", "user: no graph replayed at query length(s) ['3']"),
    ("routing differs", "routing differs between arrangements"),
    ("prediction off", "pool reasoning x1 phase 0/2: predicted"),
])
def test_the_report_fails_closed(runs: dict[str, dict[str, Any]], how: str, message: str, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out = report(write(tmp_path, broken(runs, how)), capsys)
    assert code == 1
    assert any(line.startswith("FAIL: ") and message in line for line in out.splitlines()), out[-2000:]


def test_a_missing_profile_fails(runs: dict[str, dict[str, Any]], tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, runs)
    (tmp_path / "measure.json").unlink()
    code, out = report(tmp_path, capsys)
    assert code == 1 and "FAIL: " in out and "measure.json" in out


def test_the_committed_h100_run_fails_for_its_routing(capsys: pytest.CaptureFixture[str]) -> None:
    """h100-dsv4-e2e-pool-r038: every other check passes; the engine's route check found no row routed as asked."""
    assert e2e_pool.main([str(ROOT / "bench/results/h100-dsv4-e2e-pool-r038"), "--arrangements", "pool layers"]) == 1
    fails = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    assert fails and all("the engine routed 0% of its MoE rows as the locality table says" in f or
                         "predicted 134.72 tok/s, measured 113.63" in f for f in fails), fails


def test_no_run_folder_or_bad_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert e2e_pool.main([str(tmp_path / "nothing")]) == 2
    assert "no such run folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        e2e_pool.main([str(tmp_path), "--seeds", "0"])
    assert exit_.value.code == 2


def test_the_hit_rate_is_the_cells_own_where_they_count_it(runs: dict[str, dict[str, Any]], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The run's counters (0.5 here) cover every cell; each cell's own (0.3, what its steps had) price it."""
    runs["pool"]["pool"] = counters(0.5)
    code, out = report(write(tmp_path, runs), capsys)
    assert code == 0, out
    section = out.split("reasoning x1 phase 0/2: steady decode tok/s")[1]
    assert next(line for line in section.splitlines() if line.startswith("  pool ")).split()[-1] == "0.300"
    for cell in runs["pool"]["cells"]:
        del cell["pool"]
    code, out = report(write(tmp_path, runs), capsys)
    section = out.split("reasoning x1 phase 0/2: steady decode tok/s")[1]
    assert next(line for line in section.splitlines() if line.startswith("  pool ")).split()[-1] == "0.500"


def test_a_run_of_layers_and_pool_alone_reads_only_those(runs: dict[str, dict[str, Any]], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """--arrangements "layers pool" (a grid cut to what one device call holds): passes without user and
    none, its ratios against layers only and the rest of a step from layers' steps; one of the two
    missing still fails; an arrangement list without both, or with an unknown one, exits 2."""
    resdir = write(tmp_path, {tag: runs[tag] for tag in ("layers", "pool")})
    code = e2e_pool.main([str(resdir), "--seeds", "4", "--arrangements", "pool layers"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "vs none" not in out and "vs layers" in out and "the rest of a step from layers's steps" in out
    (resdir / "e2e-spec-pool.json").unlink()
    assert e2e_pool.main([str(resdir), "--arrangements", "layers pool"]) == 1
    assert "arrangement pool: no e2e-spec-pool.json" in capsys.readouterr().out
    for bad in ("layers", "layers pool every"):
        with pytest.raises(SystemExit) as exit_:
            e2e_pool.main([str(resdir), "--arrangements", bad])
        assert exit_.value.code == 2


def test_walked_cells_differ_from_one_another_not_between_arrangements(runs: dict[str, dict[str, Any]],
                                                                       tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """E2E_WALK: every cell goes on along its cycle, so no two cells of a phase share tokens; the same
    cell in every arrangement does, and that passes."""
    for run in runs.values():
        for i, cell in enumerate(run["cells"]):
            cell["tokens"] = [[t + 64 * i for t in cell["tokens"][0]]]
    code, out = report(write(tmp_path, runs), capsys)
    assert code == 0, out
