"""measure's prefill curve (#59 item 4): a prefill chunk timed both ways at the best LK_THREADS (the fork's CPU
prefill; its GPU prefill through the hook where a GPU is present), at chunk sizes up to --max-num-batched-tokens
within --prefill-budget, written as the profile's "prefill" section and printed; and `plan` (and --check-launch)
turning that section into prefill tok/s of the model's lk_moe layers, both ways, with the crossover.

The timings come from the deterministic stand-in worker (tests/measure_stand_in.py, given as --python): no test
here reads a clock. The real worker's GPU way needs a GPU and lk_moe 2.7, and does not run here."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ds4x.cli import main as ds4x_main
from tests.measure_stand_in import SPEED, prefill_ms, stand_in
from tests.serve_script import SPEC, USERS
from vllm_ds4x.measure import analysis
from vllm_ds4x.measure import cli as measure_cli
from vllm_ds4x.measure.request import prefill_chunks

SMALL = {"num_hidden_layers": 4, "hidden_size": 512, "moe_intermediate_size": 256, "n_routed_experts": 16,
         "num_experts_per_tok": 2, "vocab_size": 1000, "num_attention_heads": 4, "head_dim": 64,
         "expert_dtype": "fp4"}
CHUNKS = [512, 1024, 2048, 4096, 8192]
FLASH_MOE_LAYERS = 43  # the example DeepSeek-V4-Flash config plan reads by default


def measure(folder: Path, *extra: str, gpu: bool, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """measure's command line through the stand-in: (exit code, stdout, stderr); the profile is folder/p.json."""
    config = folder / "config.json"
    config.write_text(json.dumps(SMALL))
    python = stand_in(folder, gpu=gpu)
    code = measure_cli.main(["--config", str(config), "--python", str(python), "--threads", "1", "2",
                             "--budget", "4", "--profile-out", str(folder / "p.json"), "--force", *extra])
    said = capsys.readouterr()
    return code, said.out, said.err


def profile(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / "p.json").read_text()))


FLASH_LAYER = {"experts": 256, "top_k": 6, "hidden": 4096, "inter": 2048, "format": "mxfp4"}


def as_flash(folder: Path) -> Path:
    """The stand-in's profile with its prefill section's layer made DeepSeek-V4-Flash's, the model plan reads by
    default: as measure writes it on a box that timed Flash's layer (7 GiB of RAM the tests do not ask for)."""
    made = profile(folder)
    made["prefill"]["layer"] = FLASH_LAYER
    path = folder / "flash.json"
    path.write_text(json.dumps(made))
    return path


@pytest.fixture()
def with_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    code, out, err = measure(tmp_path, gpu=True, capsys=capsys)
    assert code == 0, err
    return tmp_path, out


def test_chunks_double_up_to_the_step() -> None:
    assert prefill_chunks(None) == CHUNKS  # the user's 8192
    assert prefill_chunks(3000) == [512, 1024, 2048, 3000]
    assert prefill_chunks(512) == [512] and prefill_chunks(100) == [100]


@pytest.mark.parametrize(("pairs", "expected"), [
    ([(512, 10, 20), (1024, 20, 21), (2048, 40, 22)], 2048),
    ([(512, 10, 20), (1024, 20, 19), (2048, 40, 22)], 1024),
    ([(512, 30, 20), (1024, 20, 21), (2048, 40, 22), (4096, 80, 24)], 2048),  # a win below a loss is noise
    ([(512, 30, 20), (1024, 40, 21), (2048, 40, 45)], None),  # slower at the largest: the GPU never wins
    ([(512, 10, None), (1024, 20, None)], None),  # no GPU timed
    ([(512, 10, 20), (1024, 20, 20)], None),  # a tie is no win
])
def test_the_crossover_is_where_the_gpu_wins_from_then_on(pairs: list[tuple[int, float, float | None]],
                                                           expected: int | None) -> None:
    rows = [{"rows": n, "cpu_ms": cpu, "gpu_ms": gpu} for n, cpu, gpu in pairs]
    assert analysis.crossover(rows) == expected


def test_prefill_tok_s_is_rows_over_layers_times_ms() -> None:
    assert analysis.prefill_tok_s(8192, 41, 100.0) == pytest.approx(8192 / 4.1)
    assert analysis.prefill_tok_s(2048, 43, 83.52) == pytest.approx(2048 / (43 * 0.08352))


def test_measure_times_both_ways_where_a_gpu_is(with_gpu: tuple[Path, str]) -> None:
    folder, out = with_gpu
    section, best = profile(folder)["prefill"], profile(folder)["measured"]["lk_threads"]
    assert best == min(SPEED, key=SPEED.__getitem__) == 2
    assert section["lk_threads"] == best and section["engine"] == "cutlass"
    assert section["max_num_batched_tokens"] == 8192 and section["not_timed_in_budget"] == {"cpu": [], "gpu": []}
    assert [row["rows"] for row in section["rows"]] == CHUNKS
    for row in section["rows"]:  # the stand-in's line each way, the CPU's at the best LK_THREADS
        assert row["cpu_ms"] == pytest.approx(prefill_ms("cpu", row["rows"], best))
        assert row["gpu_ms"] == pytest.approx(prefill_ms("gpu", row["rows"], best))
    assert section["crossover"] == 2048  # the stand-in's GPU wins from 1290 rows
    assert section["layer"] == {"experts": 16, "top_k": 2, "hidden": 512, "inter": 256, "format": "mxfp4"}
    assert "the GPU (cutlass) is faster from 2048 tokens a chunk" in out
    table = out.partition("prefill per chunk")[2].splitlines()
    row_8192 = next(line.split() for line in table if line.split()[:1] == ["8192"])
    cpu, gpu = prefill_ms("cpu", 8192, best), prefill_ms("gpu", 8192, best)
    assert row_8192[1:] == [f"{cpu:.2f}", f"{8192 / (4 * cpu / 1000):.0f}", f"{gpu:.2f}", f"{8192 / (4 * gpu / 1000):.0f}"]


def test_without_a_gpu_only_the_cpu_way_is_timed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = measure(tmp_path, "--max-num-batched-tokens", "3000", gpu=False, capsys=capsys)
    assert code == 0, err
    section = profile(tmp_path)["prefill"]
    assert [row["rows"] for row in section["rows"]] == [512, 1024, 2048, 3000]
    assert all(row["gpu_ms"] is None for row in section["rows"]) and section["engine"] is None
    assert section["crossover"] is None and section["gpu_path"] is None
    assert "GPU prefill not timed: no GPU here" in out


def test_the_engine_is_the_one_the_environment_names(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LK_GPU_PREFILL_ENGINE", "triton")
    code, out, err = measure(tmp_path, gpu=True, capsys=capsys)
    assert code == 0, err
    assert profile(tmp_path)["prefill"]["engine"] == "triton" and "the GPU (triton) is faster" in out


def test_the_budget_leaves_the_largest_chunks_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """1 s a way: at 8192 rows the three calls the worker's guess gives (the line through the last two chunks)
    do not fit what the smaller chunks left, on either way; plan then states the largest chunk timed."""
    code, out, err = measure(tmp_path, "--prefill-budget", "2", gpu=True, capsys=capsys)
    assert code == 0, err
    section = profile(tmp_path)["prefill"]
    assert section["not_timed_in_budget"] == {"cpu": [8192], "gpu": [8192]}
    assert [row["rows"] for row in section["rows"]] == [512, 1024, 2048, 4096] and section["crossover"] == 2048
    assert "not timed within --prefill-budget: CPU 8192 rows; GPU 8192 rows" in out
    assert ds4x_main(["plan", "--profile", str(as_flash(tmp_path)), "--max-num-batched-tokens", "8192"]) == 0
    line = prefill_line(capsys.readouterr().out)
    assert "a 4096-token chunk (the nearest timed to --max-num-batched-tokens 8192) prefills on the CPU" in line


def test_the_budget_guess_follows_the_last_two_chunks() -> None:
    from vllm_ds4x.measure.worker import next_chunk_ms, prefill_skips

    one = [{"rows": 512, "ms": 10.0}]
    assert next_chunk_ms(one, 2048) == 40.0  # in proportion to the one chunk
    two = [*one, {"rows": 1024, "ms": 12.0}]
    assert next_chunk_ms(two, 2048) == 16.0  # on the line through the last two
    assert next_chunk_ms([*one, {"rows": 1024, "ms": 9.0}], 2048) == 9.0  # never falling
    assert not prefill_skips([], 8192, 0.0)  # the first chunk is always timed
    assert prefill_skips(two, 2048, 0.047) and not prefill_skips(two, 2048, 0.049)  # 3 calls of 16 ms


def test_no_prefill_budget_no_prefill_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = measure(tmp_path, "--prefill-budget", "0", gpu=True, capsys=capsys)
    assert code == 0, err
    assert "prefill" not in profile(tmp_path) and "prefill: not timed (--prefill-budget 0)" in out


@pytest.mark.parametrize(("args", "message"), [
    (["--prefill-budget", "-1"], "--prefill-budget -1.0: give seconds in [0, 86400]"),
    (["--prefill-budget", "nan"], "--prefill-budget nan: give seconds in [0, 86400]"),
    (["--max-num-batched-tokens", "0"], "--max-num-batched-tokens: '0': expected a whole number in 1.."),
])
def test_bad_prefill_options_are_one_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                           message: str) -> None:
    try:
        code, _, err = measure(tmp_path, *args, gpu=True, capsys=capsys)
    except SystemExit as e:  # argparse's own refusal
        code, err = int(e.code or 0), capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize(("answer", "why"), [
    ({"prefill": {"path": "gpu", "rows": [], "skipped": []}}, "no \"prefill\" object for the cpu path"),
    ({"prefill": {"path": "cpu", "rows": [], "skipped": []}}, "no timed prefill chunk"),
    ({"prefill": {"path": "cpu", "rows": [{"rows": 1024, "ms": 1.0}], "skipped": [512]}}, "not the [512, 1024] asked"),
    ({"prefill": {"path": "cpu", "rows": [{"rows": 512, "ms": 1.0}], "skipped": []}}, "not the [512, 1024] asked"),
    ({"prefill": {"path": "cpu", "rows": [{"rows": 512, "ms": 0}], "skipped": [1024]}}, "finite and above 0"),
])
def test_a_bad_worker_answer_is_named(answer: dict[str, Any], why: str) -> None:
    assert why in str(analysis.prefill_answer_problem(answer, "cpu", [512, 1024]))


def test_a_gpu_answer_names_its_engine() -> None:
    good: dict[str, Any] = {"prefill": {"path": "gpu", "engine": "cutlass", "rows": [{"rows": 512, "ms": 1.0}],
                                        "skipped": []}}
    assert analysis.prefill_answer_problem(good, "gpu", [512]) is None
    good["prefill"]["engine"] = None
    assert analysis.prefill_answer_problem(good, "gpu", [512]) == "no GPU prefill engine named"


def prefill_line(out: str) -> str:
    [line] = [line for line in out.splitlines() if "GPU prefill (" in line]
    return line


def test_plan_turns_the_section_into_tok_s_both_ways(with_gpu: tuple[Path, str],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    folder, _ = with_gpu
    rows = {row["rows"]: row for row in profile(folder)["prefill"]["rows"]}
    # 48 GiB: cutlass's arena (a layer's experts twice, once in bf16) fits beside fewer resident layers
    assert ds4x_main(["plan", "--profile", str(as_flash(folder)), "--max-num-batched-tokens", "8192",
                      "--gpu-mem", "48"]) == 0
    line = prefill_line(capsys.readouterr().out)
    found = re.search(r"fits with (\d+) resident layer\(s\), not the (\d+)", line)
    assert found, line
    beside, without = int(found[1]), int(found[2])
    cpu, gpu = rows[8192]["cpu_ms"], rows[8192]["gpu_ms"]
    cpu_layers, gpu_layers = FLASH_MOE_LAYERS - without, FLASH_MOE_LAYERS - beside
    assert f"measured (--profile {folder / 'flash.json'}, LK_THREADS=2): a 8192-token chunk prefills on the CPU at " \
           f"{8192 / (cpu_layers * cpu / 1000):.0f} tok/s ({cpu_layers} lk_moe layers x {cpu:.1f} ms a layer call) " \
           f"and on the GPU (cutlass) at {8192 / (gpu_layers * gpu / 1000):.0f} tok/s ({gpu_layers} lk_moe layers x " \
           f"{gpu:.1f} ms a layer call); the GPU is faster from 2048 tokens a chunk" in line, line
    assert "not measured" not in line


def test_plan_takes_the_nearest_chunk_to_its_step(with_gpu: tuple[Path, str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    folder, _ = with_gpu
    assert ds4x_main(["plan", "--profile", str(as_flash(folder)), "--max-num-batched-tokens", "3000"]) == 0
    line = prefill_line(capsys.readouterr().out)
    assert "a 2048-token chunk (the nearest timed to --max-num-batched-tokens 3000) prefills on the CPU at" in line


def test_without_a_gpu_curve_plan_says_the_gpu_is_not_timed(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert measure(tmp_path, gpu=False, capsys=capsys)[0] == 0
    assert ds4x_main(["plan", "--profile", str(as_flash(tmp_path))]) == 0
    line = prefill_line(capsys.readouterr().out)
    assert re.search(r"a 2048-token chunk prefills on the CPU at \d+ tok/s \(41 lk_moe layers", line), line
    assert "GPU prefill was not timed (measure ran where torch saw no GPU), so its speed is not known" in line


def test_without_the_section_the_wording_stays_fit_only(with_gpu: tuple[Path, str], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert ds4x_main(["plan"]) == 0
    assert "so this is about fit only" in prefill_line(capsys.readouterr().out)
    old = {key: value for key, value in profile(with_gpu[0]).items() if key != "prefill"}
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert ds4x_main(["plan", "--profile", str(tmp_path / "old.json")]) == 0
    line = prefill_line(capsys.readouterr().out)
    assert "about fit only" in line and "old.json has no \"prefill\" section: measure again to time it" in line


def test_a_curve_of_another_layer_is_not_this_models(with_gpu: tuple[Path, str],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The stand-in timed a small layer: plan's Flash gets no figures from it, and is told why."""
    assert ds4x_main(["plan", "--profile", str(with_gpu[0] / "p.json")]) == 0
    line = prefill_line(capsys.readouterr().out)
    assert "about fit only" in line and "measured (" not in line
    assert "it timed a layer of 16 experts, top-2, hidden 512, intermediate 256, not --config's 256 experts, " \
           "top-6, hidden 4096, intermediate 2048; measure with this --config" in line, line


@pytest.mark.parametrize(("section", "why"), [
    ({"rows": []}, "no \"rows\" list"),
    ({"rows": [{"rows": 512, "cpu_ms": -1, "gpu_ms": None}]}, "cpu_ms -1: finite and above 0, or null"),
    ({"rows": [{"rows": 512, "cpu_ms": None, "gpu_ms": 3}]}, "no chunk timed on the CPU"),
    ({"rows": [{"rows": True, "cpu_ms": 1}]}, "no whole number of \"rows\""),
    ({"rows": [{"rows": 512, "cpu_ms": 1}], "layer": {"experts": "256"}}, "whole numbers for experts, top_k"),
])
def test_a_bad_section_is_one_error_naming_the_profile(with_gpu: tuple[Path, str], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str], section: dict[str, Any],
                                                       why: str) -> None:
    bad = {**profile(with_gpu[0]), "prefill": section}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert ds4x_main(["plan", "--profile", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert f"--profile {tmp_path / 'bad.json'}: its \"prefill\" section is not the one measure writes: " in err
    assert why in err and err.count("error:") == 1


def test_profile_with_measure_is_refused(with_gpu: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    given = with_gpu[0] / "p.json"
    assert ds4x_main(["plan", "--measure", "--profile", str(given)]) == 2
    assert f"--profile {given} with --measure: measure writes the profile it reads" in capsys.readouterr().err


def test_check_launch_states_the_measured_figures(with_gpu: tuple[Path, str], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "serve.sh"
    script.write_text(USERS.format(threads=12, spec=SPEC))
    code = ds4x_main(["plan", "--check-launch", str(script), "--cores", "16", "--profile",
                      str(as_flash(with_gpu[0]))])
    out = capsys.readouterr().out
    line = prefill_line(out)
    assert code in (0, 1) and line.startswith("note: at --max-model-len"), out
    assert re.search(r"prefills on the CPU at \d+ tok/s .* and on the GPU \(cutlass\) at \d+ tok/s .*; the GPU is "
                     r"faster from 2048 tokens", line), line
    assert "not measured" not in line


def test_with_every_layer_resident_nothing_prefills_on_lk_moe(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """plan --measure --launch reads the profile it just wrote: the small model's 4 layers all fit on the GPU."""
    assert measure(tmp_path, gpu=True, capsys=capsys)[0] == 0
    assert ds4x_main(["plan", "--config", str(tmp_path / "config.json"), "--profile", str(tmp_path / "p.json")]) == 0
    line = prefill_line(capsys.readouterr().out)
    assert line.endswith(f"measured (--profile {tmp_path / 'p.json'}): every MoE layer is resident beside either way "
                         f"of prefilling, so none runs on lk_moe"), line


def test_plan_measure_launch_reads_the_profile_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(SMALL))
    python = stand_in(tmp_path, gpu=True)
    assert ds4x_main(["plan", "--measure", "--config", str(config), "--python", str(python), "--threads", "1",
                      "--budget", "1", "--profile-out", str(tmp_path / "p.json"), "--launch",
                      str(tmp_path / "serve.sh")]) == 0
    assert f"measured (plan --measure ({tmp_path / 'p.json'}))" in prefill_line(capsys.readouterr().out)


def test_the_gpu_way_goes_through_the_hook_with_one_driver_per_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU job's way (vllm_ds4x.hooks.prefill_timing) without a GPU: configure is the hook's (the fork's
    config fields for LK_GPU_PREFILL_ENGINE, at the smallest chunk as the minimum), and every chunk's call reaches
    moe_prefill.gpu_prefill on one layer object, so lk_moe's driver is made once. Its torch and lk_moe half runs
    only on a GPU machine, not here."""
    import types

    from vllm_ds4x.hooks import moe_prefill, prefill_timing

    monkeypatch.setenv("LK_GPU_PREFILL_ENGINE", "triton")
    monkeypatch.delenv("LK_POOL_SLOTS", raising=False)
    way = prefill_timing.HookWay()
    cfg = types.SimpleNamespace(use_gpu_prefill=True, prefill_gpu=False)
    way.configure(cfg, 512)
    assert (cfg.use_gpu_prefill, cfg.prefill_gpu, cfg.prefill_min_tokens, cfg.layer_id) == (False, True, 512, 0)
    assert way.engine() == "triton"
    seen: list[object] = []
    monkeypatch.setattr(moe_prefill, "gpu_prefill", lambda experts, x, w, ids: seen.append(experts))
    moe = object()
    for _ in range(2):
        way.caller(moe)("x", "w", "ids")
    assert len(seen) == 2 and seen[0] is seen[1] and seen[0].lk_moe is moe  # type: ignore[attr-defined]


def test_plan_json_carries_the_measured_figures(with_gpu: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    folder, _ = with_gpu
    rows = {row["rows"]: row for row in profile(folder)["prefill"]["rows"]}
    # 48 GiB, 1M context: 6 resident layers beside CPU prefill, 1 beside cutlass's arena
    assert ds4x_main(["plan", "--json", "--profile", str(as_flash(folder)), "--max-num-batched-tokens", "8192",
                      "--gpu-mem", "48"]) == 0
    measured = json.loads(capsys.readouterr().out)["prefill_measured"]
    assert measured == {"chunk": 8192, "lk_threads": 2, "engine": "cutlass", "cpu_lk_moe_layers": 37,
                        "gpu_lk_moe_layers": 42, "crossover": 2048,
                        "cpu_tok_s": pytest.approx(8192 / (37 * rows[8192]["cpu_ms"] / 1000)),
                        "gpu_tok_s": pytest.approx(8192 / (42 * rows[8192]["gpu_ms"] / 1000))}
    assert ds4x_main(["plan", "--json", "--profile", str(as_flash(folder)), "--max-num-batched-tokens", "8192"]) == 0
    assert json.loads(capsys.readouterr().out)["prefill_measured"]["gpu_tok_s"] is None  # 32 GiB: cutlass does not fit
    assert ds4x_main(["plan", "--json", "--profile", str(folder / "p.json")]) == 0  # another layer: none
    assert json.loads(capsys.readouterr().out)["prefill_measured"] is None
    assert ds4x_main(["plan", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["prefill_measured"] is None
