"""`plan` answers every bad input with exit 2 and one message naming it, and a
model that does not fit with exit 1 and the numbers; --json is strict JSON."""

from __future__ import annotations

import json
import os
import types
from pathlib import Path
from typing import Any

import pytest

from ds4x.cli import main
from ds4x.deploy.plan import EXAMPLE
from vllm_ds4x.moe import engine_inputs as residency
from vllm_ds4x.moe import placement as mp

LONG = "9" * 5000


def example(**changes: object) -> dict[str, Any]:
    return {**json.loads(EXAMPLE.read_text()), **changes}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-model-len", "0"], "--max-model-len: '0': expected a whole number in 1..16777216"),
        (["--max-model-len", "-5"], "--max-model-len: '-5': expected a whole number in 1..16777216"),
        (["--max-model-len", "1" + "0" * 12], "--max-model-len: '1000000000000': expected a whole number in 1..16777216"),
        (["--max-model-len", "\u00b2"], "--max-model-len: '\u00b2': expected a whole number in 1..16777216"),
        (["--max-num-seqs", "1.5"], "--max-num-seqs: '1.5': expected a whole number in 1..1024"),
        (["--max-num-seqs", "1000000000"], "--max-num-seqs: '1000000000': expected a whole number in 1..1024"),
        (["--tp", "0"], "--tp: '0': expected a whole number in 1..64"),
        (["--tp", "\u0661\u0662"], "--tp: '\u0661\u0662': expected a whole number in 1..64"),
        (["--pp", LONG], "--pp: '9999"),
        (["--draft-layers", "-1"], "--draft-layers: '-1': expected a whole number in 0..64"),
        (["--verify-tokens", "0"], "--verify-tokens: '0': expected a whole number in 1..17"),
        (["--verify-tokens", "1000000000"], "--verify-tokens: '1000000000': expected a whole number in 1..17"),
        (["-k", "0"], "--num-speculative-tokens/-k: '0': expected a whole number in 1..16"),
        (["-k", "1" + "0" * 30], "--num-speculative-tokens/-k: '1000000000000000000000000000000': expected a whole"),
        (["--threads", "\u00b2"], "--threads: '\u00b2': expected a whole number in 1..4096"),
        (["--cores", "0", "--check-launch", str(EXAMPLE)], "--cores: '0': expected a whole number in 1..65536"),
        (["--acceptance", "nan", "0.5"], "--acceptance: 'nan': expected a number in [0, 1]"),
        (["--acceptance", "0.4", "1.5"], "--acceptance: '1.5': expected a number in [0, 1]"),
        (["--gpu-memory-utilization", "0"], "expected a fraction in (0, 1]"),
        (["--gpu-memory-utilization", "1.5"], "expected a fraction in (0, 1]"),
        (["--gpu-memory-utilization", "nan"], "expected a fraction in (0, 1]"),
        (["--kv-cache-dtype", "fp8_bogus"], "--kv-cache-dtype: invalid choice: 'fp8_bogus'"),
        (["--gpu-mem=-3GiB"], "is not a size like 32GiB"),
        (["--gpu-mem", LONG], "is not a size like 32GiB"),
        (["--plot", "curve.svg"], "--plot: 'curve.svg': expected a .png path"),
        (["--ram-bandwidth", "0"], "--ram-bandwidth: '0': expected more than 0"),
        (["--plot", "/nonexistent/dir/c.png"], "folder /nonexistent/dir does not exist or is not writable"),
        (["--overlap", "shared"], "--overlap: invalid choice: 'shared'"),
        (["--overlap-outside-ms", "nan"], "--overlap-outside-ms: 'nan': expected ms in 0..60000"),
        (["--overlap-outside-ms", "-1"], "--overlap-outside-ms: '-1': expected ms in 0..60000"),
        (["--ubatch-gpu", "0"], "--ubatch-gpu: '0': expected a fraction in (0, 1]"),
    ],
)
def test_bad_options_exit_2_naming_the_option(capsys: pytest.CaptureFixture[str], args: list[str],
                                               message: str) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["plan", *args])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and message in err and len(err) < 3000 and "Traceback" not in err
    assert len([line for line in err.splitlines() if "error:" in line]) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1, 2]", "a JSON list, not an object"),
        ("{not json", "Expecting property name"),
        (json.dumps(example(n_routed_experts=0)), "n_routed_experts=0: expected an integer in 1..65536"),
        (json.dumps(example(n_routed_experts=None)), "neither n_routed_experts nor num_experts"),
        (json.dumps(example(hidden_size="4096")), "hidden_size='4096': expected an integer in 1..16777216"),
        (json.dumps(example(num_hidden_layers=None)), "num_hidden_layers=None: expected an integer in 1..4096"),
        (json.dumps(example(num_experts_per_tok=300)), "num_experts_per_tok=300 is more than its 256"),
        (json.dumps(example(num_hidden_layers=10**9)), "num_hidden_layers=1000000000: expected an integer in 1..4096"),
        (json.dumps(example(n_routed_experts=10**9)), "n_routed_experts=1000000000: expected an integer in 1..65536"),
    ],
)
def test_bad_configs_exit_2_naming_the_field(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str,
                                             message: str) -> None:
    config = tmp_path / "config.json"
    config.write_text(content)
    assert main(["plan", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(config) in err and "Traceback" not in err


def test_a_directory_as_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["plan", "--config", str(tmp_path)]) == 2
    assert "a folder; give the JSON file in it" in capsys.readouterr().err


def test_does_not_fit_is_exit_1_with_the_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--gpu-mem", "8GiB", "--json"]) == 1
    out, err = capsys.readouterr()
    plan = json.loads(out)
    assert plan["fits"] is False and plan["for_resident_layers"] < 0
    assert "the model does not fit: 22.59 GiB needed" in err and "7.36 GiB usable" in err  # DSpark's 3 draft layers
    assert "--max-model-len" in err  # the knob to turn


def test_json_is_strict_when_nothing_is_left_on_the_cpu(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Every MoE layer resident: the RAM-bandwidth ceiling is unbounded, null in JSON."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(example(num_hidden_layers=2, n_routed_experts=8, compress_ratios=[0, 0])))
    assert main(["plan", "--config", str(config), "--json", "--draft-layers", "0"]) == 0
    plan = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert plan["resident"] == [0, 1] and plan["ceiling_resident"] is None
    assert main(["plan", "--config", str(config), "--draft-layers", "0"]) == 0
    assert "decode ceiling, 2 resident" in (out := capsys.readouterr().out) and "inf" not in out
    assert "no RAM-bandwidth bound: no MoE layer is left on the CPU" in out


ROUTING_CASES = [
    ("[1, 2]", "a JSON list, not an object"),
    ('{"x": [1]}', "layer 'x': not one of the model's 43 MoE layers (0..42)"),
    ('{"\u00b2": [1]}', "layer '\u00b2': not one of the model's 43 MoE layers"),
    ('{"99": [1]}', "layer '99': not one of the model's 43 MoE layers"),
    ('{"0": "abc"}', "layer 0: a JSON str, not one per routed expert (256)"),
    ('{"0": [1, 2]}', "layer 0: 2 counts, not one per routed expert (256)"),
    ('{"0": [' + ", ".join(["1"] * 255 + ["NaN"]) + "]}", "0[255]: nan is not a finite number"),
    ('{"0": [' + ", ".join(["1"] * 255 + ["-1"]) + "]}", "layer 0, expert 255: '-1' is not a count in 0..1e+18"),
    ('{"0": [' + ", ".join(["1"] * 255 + ["true"]) + "]}", "layer 0, expert 255: 'True' is not a count"),
    ('{"0": [' + ", ".join(["1"] * 255 + ['"5"']) + "]}", "layer 0, expert 255: \"'5'\" is not a count"),
    ('{"0": ' + "[" * 50 + "]" * 50 + "}", "nested deeper than 32"),
]


@pytest.mark.parametrize(("stats", "message"), ROUTING_CASES)
def test_bad_routing_stats_name_their_file(capsys: pytest.CaptureFixture[str], tmp_path: Path, stats: str,
                                           message: str) -> None:
    path = tmp_path / "routing.json"
    path.write_text(stats)
    assert main(["plan", "--routing-stats", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"--routing-stats {path}: " in err and message in err and "Traceback" not in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["routing.json"]


@pytest.mark.parametrize(("stats", "message"), ROUTING_CASES)
def test_the_engine_refuses_what_plan_refuses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stats: str,
                                              message: str) -> None:
    path = tmp_path / "routing.json"
    path.write_text(stats)
    monkeypatch.setenv(mp.ROUTING_ENV, str(path))
    with pytest.raises(mp.PlacementError) as refused:
        residency.routing_stats(mp.model_shape(example()))
    assert str(refused.value).startswith(f"{mp.ROUTING_ENV}={str(path)!r}: ") and message in str(refused.value)


def test_the_engine_refuses_a_pipe_for_routing_stats(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Refused by its kind before it is opened: a read would hold the engine's start-up."""
    path = tmp_path / "routing.json"
    os.mkfifo(path)
    monkeypatch.setenv(mp.ROUTING_ENV, str(path))
    with pytest.raises(mp.PlacementError, match="not a regular file"):
        residency.routing_stats(mp.model_shape(example()))


def test_the_engine_reads_good_routing_stats(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "routing.json"
    path.write_text(json.dumps({"3": list(range(256))}))
    monkeypatch.setenv(mp.ROUTING_ENV, str(path))
    assert residency.routing_stats(mp.model_shape(example())) == {3: [float(c) for c in range(256)]}


def test_plan_and_the_engines_auto_call_one_budget(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan` at the user's settings (1M context, 0.92, two sequences, DSpark's 3 draft
    layers) and the engine's `auto` (moe_engine_inputs.engine_budget, which moe_residency calls,
    fed a vLLM config of the same settings) give the same budget: the KV pool holds max_model_len
    once, and two resident layers fit in 32 GB, as the user runs it."""
    assert main(["plan", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["resident"] == [0, 1]
    ns = types.SimpleNamespace
    vllm_config = ns(
        model_config=ns(hf_text_config=ns(to_dict=example), max_model_len=1048576),
        speculative_config=ns(draft_model_config=ns(hf_config=ns(n_mtp_layers=3))),
        cache_config=ns(gpu_memory_utilization=0.92, cache_dtype="fp8_ds_mla"),
        parallel_config=ns(tensor_parallel_size=1, pipeline_parallel_size=1))
    _, engine = residency.engine_budget(vllm_config, 32 * 2**30, draft_resident=True)
    assert {k: getattr(engine, k) for k in ("usable", "non_expert", "kv_cache", "reserve", "draft_layers",
                                            "for_resident_layers")} == {
        k: plan[k] for k in ("usable", "non_expert", "kv_cache", "reserve", "draft_layers", "for_resident_layers")}
