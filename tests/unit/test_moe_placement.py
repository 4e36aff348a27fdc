"""GPU-resident MoE layers: grammar, draft layers, budget arithmetic, auto choice.

The module under test is the fork overlay itself, loaded from its file."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from ds4x.deploy.plan import EXAMPLE
from vllm_ds4x.moe import placement as mp

GIB = 1024**3
CONFIG = json.loads(EXAMPLE.read_text())
VAR = "LVLLM_GPU_RESIDENT_MOE_LAYERS"


@pytest.mark.parametrize(
    ("value", "mode", "layers", "budget"),
    [
        (None, "layers", set(), None),
        ("", "layers", set(), None),
        ("none", "layers", set(), None),
        ("0,1", "layers", {0, 1}, None),  # the user's setting keeps its meaning
        (" 0 , 1 ", "layers", {0, 1}, None),
        ("3", "layers", {3}, None),
        ("0-3,10", "layers", {0, 1, 2, 3, 10}, None),
        ("2-2", "layers", {2}, None),
        ("1,1,0-1", "layers", {0, 1}, None),
        ("ALL", "all", set(), None),
        ("auto", "auto", set(), None),
        ("auto:6.5", "auto", set(), 6.5),
        ("auto : 12", "auto", set(), 12.0),
    ],
)
def test_grammar_accepts(value: str | None, mode: str, layers: set[int], budget: float | None) -> None:
    selection = mp.parse_layers(value)
    assert (selection.mode, set(selection.layers), selection.budget_gib) == (mode, layers, budget)


@pytest.mark.parametrize(
    ("value", "part", "why"),
    [
        ("0,x", "x", "is not N or A-B"),
        ("3-1", "3-1", "runs backwards"),
        ("-1", "-1", "is not N or A-B"),
        ("0,,1", "", "is not N or A-B"),
        ("1-", "1-", "is not N or A-B"),
        ("0,all", "all", "must stand alone"),
        ("auto,3", "auto", "must stand alone"),
        ("auto:", "", "is not a budget in GiB, e.g. auto:6.5"),
        ("auto:-1", "-1", "is not a budget in GiB, e.g. auto:6.5"),
        ("auto:lots", "lots", "is not a budget in GiB, e.g. auto:6.5"),
        ("0-4096", "0-4096", "names a layer past 4095"),
        ("0-999999999", "0-999999999", "names a layer past 4095"),
        ("1.5", "1.5", "is not N or A-B"),
        ("0;1", "0;1", "is not N or A-B"),
        ("٣", "٣", "is not N or A-B"),  # a non-ASCII digit is not an index
    ],
)
def test_grammar_refuses_with_the_fix(value: str, part: str, why: str) -> None:
    with pytest.raises(mp.PlacementError) as caught:
        mp.parse_layers(value)
    message = str(caught.value)
    assert message.startswith(f"{VAR}={value!r}: {part!r} {why}")
    assert "e.g. 0,1 or 0-3,10 or all, none, auto, auto:6.5" in message


@pytest.mark.parametrize("value", ["9" * 5000, "0-" + "9" * 5000, ",".join(["1"] * 100000), "auto:" + "1" * 5000])
def test_huge_values_are_refused_in_a_short_message(value: str) -> None:
    """No expansion, no raw int() error, no quoting of the whole value."""
    with pytest.raises(mp.PlacementError) as caught:
        mp.parse_layers(value if "," not in value else value + ",x")
    assert str(caught.value).startswith(f"{VAR}=") and len(str(caught.value)) < 300


@pytest.mark.parametrize("value", ["9" * 5000, "1234567890"])
def test_integer_variables_refuse_huge_values_briefly(value: str) -> None:
    with pytest.raises(mp.PlacementError, match=r"expected an integer >= 0 \(at most 9 digits\)") as caught:
        mp.parse_positive_int(value, mp.PREFETCH_ENV, 3)
    assert len(str(caught.value)) < 200


def test_fuzzed_strings_never_crash_and_garbage_never_passes() -> None:
    rng = random.Random(20261130)
    alphabet = "0123456789,- :.autonelAx\t\u0663"
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        try:
            selection = mp.parse_layers(text)
        except mp.PlacementError:
            continue
        # whatever was accepted re-reads as the same canonical selection
        canonical = "".join(text.split()).lower()
        if selection.mode == "layers" and canonical not in ("", "none"):
            for part in canonical.split(","):
                lo, _, hi = part.partition("-")
                assert lo.isascii() and lo.isdigit() and (not hi or (hi.isdigit() and int(lo) <= int(hi)))
        else:
            assert canonical in ("", "none", "all") or canonical.startswith("auto")


SHAPE = mp.model_shape(CONFIG, num_draft_layers=3)


def test_deepseek_v4_flash_shape_by_hand() -> None:
    assert SHAPE.moe_layers == tuple(range(43)) and SHAPE.top_k == 6
    assert SHAPE.expert_bytes == 3 * 4096 * 2048 * 17 // 32 == 13_369_344  # FP4 + e8m0 per 32
    assert SHAPE.layer_bytes == 256 * 13_369_344 == 3_422_552_064  # 3.19 GiB
    embeddings = 2 * 129280 * 4096 * 2  # bf16 embed + head
    attention = 4096 * 1024 + 1024 * 64 * 512 + 4096 * 512 + 64 * 512 * 1024 + 8 * 1024 * 4096
    per_layer = attention + 3 * 4096 * 2048 + 256 * 4096  # + shared expert + router
    compressor = 21 * 2 * 4096 * 512 * 2 + 20 * 2 * 4096 * 512
    indexer = 21 * (1024 * 64 * 128 + 4096 * 64 + 4 * 4096 * 128)
    fp8 = 43 * per_layer + compressor + indexer
    assert SHAPE.non_expert_bytes == embeddings + int(fp8 * (1 + 4 / 16384))


def test_kv_cache_at_1m_context_by_hand() -> None:
    # 21 C4A layers: 262144 entries x (584 + 132 indexer); 20 HCA layers: 8192 x 584;
    # every layer and the 3 draft layers keep a 128-token window of 584-byte entries.
    expected = 21 * 262144 * (584 + 132) + 20 * 8192 * 584 + (43 + 3) * 128 * 584
    assert mp.kv_cache_bytes(CONFIG, 1048576, "fp8_ds_mla", 3) == expected == 4_040_718_336


def test_budget_on_a_32gb_card_by_hand() -> None:
    plan = mp.budget(SHAPE, gpu_bytes=32 * GIB, gpu_memory_utilization=0.92, max_model_len=1048576,
                     kv_dtype="fp8_ds_mla")
    assert plan.usable == int(32 * GIB * 0.92) == 31_610_959_298
    assert plan.kv_cache == 4_040_718_336 and plan.reserve == int(1.5 * GIB)
    assert plan.draft_layers == 3 * 3_422_552_064
    left = 31_610_959_298 - SHAPE.non_expert_bytes - 4_040_718_336 - int(1.5 * GIB) - 3 * 3_422_552_064
    assert plan.for_resident_layers == left
    auto = mp.place(mp.parse_layers("auto"), SHAPE, plan, draft_resident=True)
    assert sorted(auto.resident) == list(range(left // 3_422_552_064)) == [0, 1]
    # drafts on the CPU free three layers' worth
    cpu_drafts = mp.budget(SHAPE, gpu_bytes=32 * GIB, gpu_memory_utilization=0.92, max_model_len=1048576,
                           kv_dtype="fp8_ds_mla", draft_resident=False)
    assert len(mp.place(mp.parse_layers("auto"), SHAPE, cpu_drafts, draft_resident=False).resident) == 5


def test_tensor_parallel_halves_a_layer_per_gpu() -> None:
    plan = mp.budget(SHAPE, gpu_bytes=24 * GIB, gpu_memory_utilization=0.9, max_model_len=32768,
                     kv_dtype="fp8_ds_mla", tp_size=2, draft_resident=False)
    choice = mp.choose_auto(SHAPE, plan.for_resident_layers, tp_size=2, tokens=1)
    assert len(choice.layers) == plan.for_resident_layers // (3_422_552_064 // 2)


def test_too_many_layers_fail_early_with_numbers() -> None:
    plan = mp.budget(SHAPE, gpu_bytes=32 * GIB, gpu_memory_utilization=0.92, max_model_len=1048576,
                     kv_dtype="fp8_ds_mla")
    with pytest.raises(mp.PlacementError) as caught:
        mp.place(mp.parse_layers("0-3"), SHAPE, plan, draft_resident=True)
    message = str(caught.value)
    assert message.startswith(f"{VAR}: 4 resident layer(s) need 12.75 GiB but only 6.85 GiB is left (29.44 usable")
    assert "3.76 KV cache - 9.56 draft layers - 1.50 reserve" in message


def test_auto_budget_larger_than_what_is_left_is_refused() -> None:
    plan = mp.budget(SHAPE, gpu_bytes=32 * GIB, gpu_memory_utilization=0.92, max_model_len=1048576,
                     kv_dtype="fp8_ds_mla")
    assert len(mp.place(mp.parse_layers("auto:6.5"), SHAPE, plan, draft_resident=True).resident) == 2  # 3.19 GiB each
    with pytest.raises(mp.PlacementError, match=r"auto:40: 40 GiB is more than the 6.85 GiB left for resident"):
        mp.place(mp.parse_layers("auto:40"), SHAPE, plan, draft_resident=True)


def test_index_that_names_no_moe_layer_is_an_error() -> None:
    with pytest.raises(mp.PlacementError, match=r"layer\(s\) 43, 50 name no MoE layer of this model \(MoE layers are 0-42\)"):
        mp.validate(mp.parse_layers("1,43,50"), SHAPE)
    v3 = mp.model_shape({**CONFIG, "first_k_dense_replace": 3})
    with pytest.raises(mp.PlacementError, match=r"layer\(s\) 0 name no MoE layer .*MoE layers are 3-42"):
        mp.validate(mp.parse_layers("0,3"), v3)


@pytest.mark.parametrize(
    ("name", "draft", "index"),
    [
        ("model.layers.0.ffn.experts", False, 0),
        ("model.layers.42.ffn.experts", False, 42),
        ("model.layers.43.ffn.experts", True, 43),  # DSpark layer 0 of the fork's dspark.py
        ("model.layers.45.ffn.experts", True, 45),
        ("mtp.0.ffn.experts", True, 0),  # the fork's old rule, kept
    ],
)
def test_draft_layers_by_the_forks_real_names(name: str, draft: bool, index: int) -> None:
    assert mp.is_draft_layer(name, 43) is draft
    assert mp.layer_index(name) == index
    placement = mp.Placement(resident=frozenset({0}), draft_resident=True, num_hidden_layers=43, explanation="")
    assert placement.is_resident(name) is (draft or index == 0)


def test_routing_statistics_rank_layers() -> None:
    """A layer whose tokens spread over many experts saves more RAM reads per step."""
    small = mp.model_shape({**CONFIG, "num_hidden_layers": 4, "compress_ratios": [0, 0, 4, 128]})
    skewed = [1000] * 6 + [0] * 250  # every token hits the same 6 experts
    routing = {0: skewed, 1: [1] * 256, 2: skewed, 3: [1] * 128 + [0] * 128}
    choice = mp.choose_auto(small, 2 * small.layer_bytes, tp_size=1, tokens=3, routing=routing)
    assert choice.layers == (1, 3) and "routing statistics" in choice.reason
    uniform = mp.choose_auto(small, 2 * small.layer_bytes, tp_size=1, tokens=3)
    assert uniform.layers == (0, 1) and "lowest indices first" in uniform.reason


def test_expected_distinct_experts_matches_the_measured_table() -> None:
    """DESIGN.md measured 6.0, 11.7, 17.6, 23.3, 28.5 distinct experts for 1-5 tokens."""
    uniform = [1 / 256] * 256
    measured = [6.0, 11.7, 17.6, 23.3, 28.5]
    for tokens, seen in enumerate(measured, 1):
        assert abs(mp.expected_distinct(uniform, tokens, 6) - seen) < 0.35


def test_decode_ceiling_by_hand() -> None:
    per_token = 43 * 6 * 13_369_344  # uniform routing: ~6 distinct experts a layer
    ceiling = mp.decode_ceiling(SHAPE, 0, 89.6e9)
    assert ceiling == pytest.approx(89.6e9 / (per_token * mp.expected_distinct([1 / 256] * 256, 1, 6) / 6))
    assert 25 < ceiling < 27
    assert mp.decode_ceiling(SHAPE, 2, 89.6e9) == pytest.approx(ceiling * 43 / 41)


@pytest.mark.parametrize(("value", "ok"), [("", 3), ("4", 4), ("0", 0)])
def test_prefetch_window_is_strict(value: str, ok: int) -> None:
    assert mp.parse_positive_int(value, mp.PREFETCH_ENV, mp.DEFAULT_PREFETCH_WINDOW) == ok


@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_prefetch_window_refuses(value: str) -> None:
    with pytest.raises(mp.PlacementError, match=rf"LVLLM_GPU_PREFETCH_WINDOW={value!r}: expected an integer >= 0"):
        mp.parse_positive_int(value, mp.PREFETCH_ENV, 1)


def test_plan_command_prints_the_hand_figures(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from ds4x.cli import main

    assert main(["plan", "--draft-layers", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_cache"] == 4_040_718_336 and out["resident"] == [0, 1]
    assert out["ceiling_resident"] == pytest.approx(out["ceiling_all_cpu"] * 43 / 41)
    assert main(["plan", "--config", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: not found" in capsys.readouterr().err
