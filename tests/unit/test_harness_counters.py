"""bench/counters.py: the one typed reader of the GPU harness's counters, as both reports read them."""

from __future__ import annotations

import json
from pathlib import Path

from bench.counters import HarnessCounters

RES = Path(__file__).resolve().parents[2] / "bench/results/h200-fork-harness-ubatch/tokens-3/res"


def test_a_committed_case_reads_whole() -> None:
    raw = json.loads((RES / "moe-adaptive.json").read_text())
    counters = HarnessCounters.read(raw)
    assert counters.graph_steps == raw["decode_steps"]["graph"] and counters.eager_steps == raw["decode_steps"]["eager"]
    assert counters.replayed() == {q for q, n in raw["decode_steps"]["graph"].items() if n} != set()
    assert counters.prefill_in_decode == raw["lk_moe"].get("_cpu_prefill (decode)", 0) == 0
    assert counters.decode_captured == raw["lk_moe"]["_cpu_decode (capturing)"] > 0
    assert counters.graphs == raw["graphs"] and counters.drafter_after == raw["drafter_after"]


def test_counters_a_run_did_not_write_read_empty_so_checks_fail_closed() -> None:
    counters = HarnessCounters.read({"ok": True, "decode_steps": {"graph": {"3": 0}, "eager": {"1": 2, "3": 0}}})
    assert counters.replayed() == set() and counters.eager_decode_steps() == {"1": 2}
    assert (counters.graphs, counters.replays, counters.lk_moe, counters.drafter_after) == ({}, {}, {}, {})
    assert counters.decode_captured == 0 and counters.prefill_in_decode == 0
    assert HarnessCounters.read({"decode_steps": None, "lk_moe": [1]}).graph_steps == {}
