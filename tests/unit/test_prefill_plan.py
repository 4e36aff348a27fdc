"""GPU prefill in `plan`'s VRAM ledger (vllm_ds4x.moe.prefill, ds4x.deploy.prefill_advice): its settings as the
fork and lk_moe 2.7.4 read them, the staging and scratch it holds, what fits beside it at a context length, the
engine's `auto` counting the same bytes, and `--check-launch` reading, advising and writing it."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path

import pytest

from ds4x.cli import main
from ds4x.deploy import script_reader
from tests.doc_figures import assert_quotes, row
from tests.serve_script import SPEC, USERS
from vllm_ds4x.moe import engine_inputs, pool, prefill
from vllm_ds4x.moe import placement as mp
from vllm_ds4x.moe.prefill import PrefillSettings

ROOT = Path(__file__).resolve().parents[2]
CONFIG = json.loads((ROOT / "examples/deepseek-v4-flash/config.json").read_text())
SHAPE = mp.model_shape(CONFIG, num_draft_layers=3)
LAYER = SHAPE.layer_bytes  # 256 experts x 12.75 MiB
BF16_LAYER = 256 * 3 * 4096 * 2048 * 2  # the same experts dequantized: cutlass's arena holds both
TRITON_1 = ("--prefill-engine", "triton", "--prefetch-window", "1")  # one layer staged, fp32 scratch


def test_off_by_default_as_the_fork_runs() -> None:
    settings = prefill.prefill_settings({})
    assert settings == PrefillSettings() and not settings.on and settings.engine == "cutlass" and settings.window == 3
    on = prefill.prefill_settings({mp.PREFILL_MIN_ENV: "1024", prefill.ENGINE_ENV: " Triton ", mp.PREFETCH_ENV: "1"})
    assert on == PrefillSettings(min_batch=1024, engine="triton", window=1) and on.on


@pytest.mark.parametrize(("env", "named"), [
    ({mp.PREFILL_MIN_ENV: "-1"}, mp.PREFILL_MIN_ENV), ({mp.PREFILL_MIN_ENV: "1k"}, mp.PREFILL_MIN_ENV),
    ({prefill.ENGINE_ENV: "fast"}, prefill.ENGINE_ENV), ({mp.PREFETCH_ENV: "two"}, mp.PREFETCH_ENV),
])
def test_a_bad_setting_is_one_error_naming_it(env: dict[str, str], named: str) -> None:
    with pytest.raises(mp.PlacementError, match=named):
        prefill.prefill_settings(env)


@pytest.mark.parametrize(("name", "value", "good"), [
    ("LK_GPU_PREFILL_MIN_TOKENS", "1024", True), ("LK_GPU_PREFILL_MIN_TOKENS", "x", False),
    ("LK_GPU_PREFILL_SUB_M", "16384", True), ("LK_GPU_PREFILL_SUB_M", "-5", False),
    ("LK_GPU_PREFILL_WAVE_EXPERTS", "-1", True), ("LK_GPU_PREFILL_WAVE_EXPERTS", "-2", False),
    ("LK_GPU_PREFETCH_WINDOW", "2", True), ("LK_GPU_PREFETCH_WINDOW", "2.5", False),
    ("LK_GPU_RESERVE_GB", "1.5", True), ("LK_GPU_RESERVE_GB", "nan", False), ("LK_GPU_RESERVE_GB", "-1", False),
])
def test_lk_moes_own_names_are_checked_as_it_documents_them(name: str, value: str, good: bool) -> None:
    if good:
        prefill.check_sglang_name(name, value)
    else:
        with pytest.raises(mp.PlacementError, match=f"{name}="):
            prefill.check_sglang_name(name, value)


def test_staging_is_whole_layers_of_experts() -> None:
    assert prefill.staging_bytes(PrefillSettings(), SHAPE, 1) == 0  # off
    cutlass = [prefill.staging_bytes(PrefillSettings(min_batch=1, window=w), SHAPE, 1) for w in (0, 1, 3)]
    assert cutlass == [LAYER + BF16_LAYER] * 3  # cutlass ignores the window, and holds the layer in bf16 too
    triton = [prefill.staging_bytes(PrefillSettings(min_batch=1, engine="triton", window=w), SHAPE, 1)
              for w in (0, 1, 2, 3)]
    assert triton == [LAYER, LAYER, 2 * LAYER, 2 * LAYER]  # lk_moe's ring: 1 or 2 blocks
    assert prefill.staging_bytes(PrefillSettings(min_batch=1), SHAPE, 2) == (LAYER + BF16_LAYER) // 2
    assert pytest.approx(3.1875) == LAYER / mp.GIB


def test_cutlass_as_planned_is_what_lk_moe_reported_holding() -> None:
    """bench/results/h100-dsv4-prefill: lk_moe 2.7.4's get_device_mem_usage with one Flash-shaped MXFP4 layer
    built for GPU prefill at 8192 tokens (the probe's layer has Flash's routed experts, as SHAPE's)."""
    probe = json.loads((ROOT / "bench/results/h100-dsv4-prefill/prefill-layer.json").read_text())
    cutlass = PrefillSettings(min_batch=1)
    planned = prefill.prefill_bytes(cutlass, SHAPE, probe["max_batch_size"], 1)
    assert probe["engine"] == "cutlass" and abs(planned / probe["device_bytes"] - 1) < 0.02, planned


def test_scratch_grows_with_a_steps_tokens() -> None:
    triton, cutlass = PrefillSettings(min_batch=1, engine="triton"), PrefillSettings(min_batch=1)
    floor = prefill.scratch_bytes(triton, SHAPE, 100, 1)
    assert floor == prefill.scratch_bytes(triton, SHAPE, 1000, 1) < prefill.scratch_bytes(triton, SHAPE, 8192, 1)
    assert prefill.scratch_bytes(cutlass, SHAPE, 2048, 1) == 2048 * 4096 * (4 + 2)  # fp32 sums, bf16 output
    assert prefill.scratch_bytes(PrefillSettings(), SHAPE, 8192, 1) == 0


def test_vllms_default_step_by_gpu_memory() -> None:
    assert prefill.default_batched_tokens(32 * mp.GIB) == 2048
    assert prefill.default_batched_tokens(80 * mp.GIB) == 8192


def plan_json(*args: str, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["plan", "--json", *args]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_the_ledger_counts_gpu_prefill(capsys: pytest.CaptureFixture[str]) -> None:
    off = plan_json(capsys=capsys)
    on = plan_json("--gpu-prefill-min-batch", "1024", *TRITON_1, capsys=capsys)
    expected = LAYER + prefill.scratch_bytes(PrefillSettings(min_batch=1, engine="triton"), SHAPE, 2048, 1)
    assert (off["prefill"], on["prefill"]) == (0, expected)
    assert on["for_resident_layers"] == off["for_resident_layers"] - expected  # type: ignore[operator]
    assert (off["resident"], on["resident"]) == ([0, 1], [0])
    assert main(["plan", "--gpu-prefill-min-batch", "1024", "--prefill-engine", "triton"]) == 0
    table = capsys.readouterr().out
    staging = next(line for line in table.splitlines() if line.startswith("GPU prefill staging (triton, 2 layer"))
    assert staging.endswith(f"{2 * LAYER / mp.GIB:.2f} GiB")


@pytest.mark.parametrize(("length", "with_it", "without"), [("1048576", 1, 2), ("65536", 2, 3)])
def test_the_plan_says_what_fits_beside_gpu_prefill(capsys: pytest.CaptureFixture[str], length: str, with_it: int,
                                                   without: int) -> None:
    assert main(["plan", "--max-model-len", length]) == 0
    out = capsys.readouterr().out
    assert re.search(r"GPU prefill \(cutlass.*does not fit even with no resident layer", out), out
    found = re.search(rf"; triton with {mp.PREFETCH_ENV}=1 \({prefill.ENGINE_ENV}=triton, [0-9.]+ GiB staging\) fits "
                      rf"with (\d+) resident layer\(s\)", out)
    assert found and int(found[1]) == with_it, out
    assert plan_json("--max-model-len", length, capsys=capsys)["resident"] == list(range(without))
    assert plan_json("--max-model-len", length, "--gpu-prefill-min-batch", "1", *TRITON_1, capsys=capsys)["resident"] \
        == list(range(with_it))
    assert main(["plan", "--max-model-len", length, "--gpu-prefill-min-batch", "1"]) == 1  # cutlass: no room
    assert "--prefill-engine triton with --prefetch-window 1" in capsys.readouterr().err


def test_a_threshold_above_the_step_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--gpu-prefill-min-batch", "4096"]) == 2
    assert "--gpu-prefill-min-batch 4096 exceeds --max-num-batched-tokens 2048" in capsys.readouterr().err
    assert main(["plan", "--gpu-prefill-min-batch", "4096", "--max-num-batched-tokens", "8192", *TRITON_1]) == 0


def test_the_engines_auto_counts_the_same_bytes(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(mp.PREFILL_MIN_ENV, "1024")
    monkeypatch.setenv(prefill.ENGINE_ENV, "triton")
    monkeypatch.setenv(mp.PREFETCH_ENV, "1")
    ns = types.SimpleNamespace
    vllm_config = ns(
        model_config=ns(hf_text_config=ns(to_dict=lambda: dict(CONFIG)), max_model_len=1048576),
        speculative_config=ns(draft_model_config=ns(hf_config=ns(n_mtp_layers=3))),
        cache_config=ns(gpu_memory_utilization=0.92, cache_dtype="fp8_ds_mla"),
        parallel_config=ns(tensor_parallel_size=1, pipeline_parallel_size=1),
        scheduler_config=ns(max_num_batched_tokens=4096))
    _, engine = engine_inputs.engine_budget(vllm_config, 32 * 2**30, draft_resident=True)
    plan = plan_json("--gpu-prefill-min-batch", "1024", "--prefill-engine", "triton", "--prefetch-window", "1",
                     "--max-num-batched-tokens", "4096", capsys=capsys)
    assert plan["prefill"] == LAYER + prefill.scratch_bytes(PrefillSettings(min_batch=1, engine="triton"), SHAPE, 4096, 1)
    assert (engine.prefill, engine.for_resident_layers) == (plan["prefill"], plan["for_resident_layers"])


def users_script(tmp_path: Path, env: str = "") -> Path:
    script = tmp_path / "serve.sh"
    script.write_text(USERS.format(threads=12, spec=SPEC).replace("OMP_NUM_THREADS=12\n", env))
    return script


def check(script: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["plan", "--check-launch", str(script), "--cores", "16", *extra])
    return code, capsys.readouterr().out


def prefill_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "GPU prefill (" in line]


def test_the_users_script_gets_the_fit_as_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = check(users_script(tmp_path), capsys)
    lines = prefill_lines(out)
    assert code == 0 and len(lines) == 1 and lines[0].startswith("note: at --max-model-len 1048576"), out
    # the script sets no engine: triton at a ring of one layer, as cutlass's arena (a layer twice) does not fit
    assert "GPU prefill (triton, a ring of 1 layer(s) of experts (window 1)" in lines[0], lines[0]
    assert "fits with 1 resident layer(s), not the 2" in lines[0] and "about fit only" in lines[0]


@pytest.mark.parametrize(("engine", "env"), [
    ("cutlass", {mp.PREFILL_MIN_ENV: "1024", mp.LAYERS_ENV: "0"}),
    ("triton", {mp.PREFILL_MIN_ENV: "1024", mp.LAYERS_ENV: "0", prefill.ENGINE_ENV: "triton", mp.PREFETCH_ENV: "1"}),
])
def test_asked_for_gpu_prefill_write_turns_it_on(tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str,
                                                 env: dict[str, str]) -> None:
    script, out = users_script(tmp_path), tmp_path / "tuned.sh"
    code, said = check(script, capsys, "--gpu-prefill-min-batch", "1024", "--prefill-engine", engine,
                       "--write", str(out))
    assert code == 0 and any(line.startswith(f"warning: {mp.PREFILL_MIN_ENV} is 0") for line in said.splitlines())
    written = script_reader.read(out.read_text()).env
    assert {name: written.get(name) for name in env} == env
    code, again = check(out, capsys)
    assert code == 0 and "0 error(s), 0 warning(s)" in again and prefill_lines(again)[0].startswith("note: ")


def test_cutlass_that_does_not_fit_names_triton(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The script turns GPU prefill on with lk_moe's default engine: its arena (a layer twice) leaves no room."""
    code, out = check(users_script(tmp_path, env=f"export {mp.PREFILL_MIN_ENV}=1024\n"), capsys)
    [error] = [line for line in out.splitlines() if "the model does not fit" in line]
    assert code == 1 and "GiB short on --gpu-mem, GPU prefill included)" in error, out
    assert error.endswith(f"; triton with {mp.PREFETCH_ENV}=1 ({prefill.ENGINE_ENV}=triton, 3.19 GiB staging) fits "
                          f"with 1 resident layer(s)"), error


def test_gpu_prefill_on_with_too_many_layers_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    triton = f"export {prefill.ENGINE_ENV}=triton {mp.PREFETCH_ENV}=1\n"
    code, out = check(users_script(tmp_path, env=f"export {mp.PREFILL_MIN_ENV}=1024\n{triton}"), capsys)
    assert code == 1 and f"error: {mp.LAYERS_ENV}=0,1: 2 resident layers, only 1 fit" in out, out


@pytest.mark.parametrize(("env", "error"), [
    (f"{prefill.ENGINE_ENV}=fast", f"error: {prefill.ENGINE_ENV}='fast': expected cutlass"),
    ("LK_GPU_PREFILL_SUB_M=-1", "error: LK_GPU_PREFILL_SUB_M='-1': expected a whole number >= 0"),
    ("LK_GPU_RESERVE_GB=lots", "error: LK_GPU_RESERVE_GB='lots': expected a number of GB >= 0"),
])
def test_a_bad_prefill_value_in_a_script_is_one_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], env: str,
                                                      error: str) -> None:
    code, out = check(users_script(tmp_path, env=f"export {env}\n"), capsys)
    assert code == 1 and sum(line.startswith(error) for line in out.splitlines()) == 1, out


def test_lk_moes_sglang_names_do_nothing_in_the_fork(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = check(users_script(tmp_path, env="export LK_GPU_PREFILL_MIN_TOKENS=1024\n"), capsys)
    warned = [line for line in out.splitlines() if line.startswith("warning: LK_GPU_PREFILL_MIN_TOKENS=1024")]
    assert code == 0 and len(warned) == 1 and f"set {mp.PREFILL_MIN_ENV} instead" in warned[0], out


@pytest.mark.parametrize("name", ["LK_POOL_DECODE", "LK_VERIFY_RESIDENT", "LK_VERIFY_SKIP_MISS"])
def test_lk_moes_pool_and_verify_names_do_nothing_in_the_fork(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              name: str) -> None:
    code, out = check(users_script(tmp_path, env=f"export {name}=1\n"), capsys)
    warned = [line for line in out.splitlines() if line.startswith(f"warning: {name}=1: lk_moe's name")]
    assert code == 0 and len(warned) == 1 and warned[0].endswith(pool.UNBRIDGED[name]), out


def test_asked_above_the_step_is_a_note_and_no_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script, out = users_script(tmp_path), tmp_path / "tuned.sh"
    code, said = check(script, capsys, "--gpu-prefill-min-batch", "2049", "--write", str(out))
    assert code == 0 and prefill_lines(said)[0].startswith("note: ") and "above the 2048 tokens" in said
    assert mp.PREFILL_MIN_ENV not in script_reader.read(out.read_text()).env


def test_gpu_prefill_beside_the_pool_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The engine's hook (vllm_ds4x.hooks.moe_prefill.configure) refuses both: so do plan and the check."""
    assert main(["plan", "--gpu-prefill-min-batch", "1024", "--pool-slots", "6"]) == 2
    assert "the engine refuses GPU prefill beside the expert pool" in capsys.readouterr().err
    script = users_script(tmp_path, env=f"export {mp.PREFILL_MIN_ENV}=1024\nexport LK_POOL_SLOTS=6\n")
    script.write_text(script.read_text().replace("LAYERS=0,1", "LAYERS=none"))
    code, out = check(script, capsys, "--pool-hit-rate", "0.5")
    errors = [line for line in out.splitlines() if line.startswith("error: LK_POOL_SLOTS=6 with GPU prefill")]
    assert code == 1 and len(errors) == 1 and "expert pool or whole layers" not in out, out


@pytest.mark.parametrize("bandwidth", [25, 50])
def test_the_deploying_bounds_follow_from_their_inputs(bandwidth: int) -> None:
    """deploying.md's prefill bounds: a layer's 256 MXFP4 experts over PCIe at B GB/s, the user's 800 tok/s
    over 41 lk_moe layers as the CPU's cost a token, their crossover, and the GPU's ceiling at 8192."""
    shape = mp.model_shape(json.loads((ROOT / "examples/deepseek-v4-flash/config.json").read_text()))
    layer_s = shape.layer_bytes / (bandwidth * 1e9)
    cpu_s = 1 / (800 * 41)
    assert_quotes(" ".join(row(ROOT / "docs/deploying.md", str(bandwidth), column="GPU wins from")),
                  [bandwidth, layer_s * 1e3, layer_s / cpu_s, 8192 / (41 * layer_s)])
