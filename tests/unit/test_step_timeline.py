"""bench/step_timeline.py on a Kineto-shaped trace written here: graph replays found by
their launch's correlation, the target told from the drafter, and a step split into the
main stream's kernels, its idle time (the CPU experts' wait), side-stream kernels hidden
in that idle time, and what runs outside the graph; a trace without replays fails."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from bench import step_timeline

MAIN, SIDE = 7, 21


def kernel(corr: int, ts: float, dur: float, stream: int = MAIN, name: str = "k") -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "stream": stream}}


def launch(corr: int, ts: float) -> dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": ts, "dur": 5,
            "args": {"correlation": corr}}


def target_step(corr: int, t0: float) -> list[dict[str, Any]]:
    """Two layers: 100 µs of kernels, a 1000 µs wait for the CPU experts with a 300 µs
    shared expert on the side stream inside it, then 100 µs of kernels; 1200 µs in all."""
    return [launch(corr, t0 - 10), kernel(corr, t0, 100), kernel(corr, t0 + 150, 300, SIDE, "shared"),
            kernel(corr, t0 + 1100, 100)]


def drafter(corr: int, t0: float) -> list[dict[str, Any]]:
    return [launch(corr, t0 - 10), kernel(corr, t0, 50, name="draft")]


def trace(steps: int = 4) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for i in range(steps):  # a step every 2000 µs: 1200 in the graph, the drafter after it
        t0 = 10_000 + 2000 * i
        events += target_step(2 * i + 1, t0) + drafter(2 * i + 2, t0 + 1500)
    events.append(kernel(999, 5, 5))  # an eager kernel, in no graph
    return events


def test_step_split_names_where_the_time_goes() -> None:
    split = step_timeline.step_split(trace())
    assert split["steps"] == 3
    assert split["step"] == pytest.approx(2.0)
    assert split["target graph"] == pytest.approx(1.2)
    assert split["main stream busy"] == pytest.approx(0.2)
    assert split["main stream idle"] == pytest.approx(1.0)
    assert split["side streams busy"] == pytest.approx(0.3)
    assert split["side inside main idle"] == pytest.approx(0.3)
    assert split["outside the graph"] == pytest.approx(0.8)
    assert split["drafter graphs"] == pytest.approx(0.05)


def test_side_kernels_outside_the_idle_time_are_not_counted_as_hidden() -> None:
    events = trace()
    for e in events:  # the shared expert now runs beside the first layer's kernels
        if e["args"].get("stream") == SIDE:
            e["ts"] -= 100
            e["dur"] = 150
    split = step_timeline.step_split(events)
    assert split["side streams busy"] == pytest.approx(0.15)
    assert split["side inside main idle"] == pytest.approx(0.1)


def test_report_reads_gzip_and_fails_closed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert step_timeline.main(tmp_path) == 1  # no trace at all
    with gzip.open(tmp_path / "trace-spec-x1-0.json.gz", "wt") as f:
        json.dump({"traceEvents": trace()}, f)
    assert step_timeline.main(tmp_path) == 0
    assert "spec-x1-0" in capsys.readouterr().out
    (tmp_path / "trace-spec-x2-0.json.gz").write_bytes(gzip.compress(json.dumps({"traceEvents": []}).encode()))
    assert step_timeline.main(tmp_path) == 1
    assert "spec-x2-0" in capsys.readouterr().out.split("FAILED")[0].splitlines()[-1]


def test_top_kernels_are_ranked_by_gpu_time_a_step_on_every_stream() -> None:
    top = step_timeline.top_kernels(trace(), 2)  # the eager kernel before the first step is left out
    assert [name for name, _ in top] == ["shared", "k"]
    assert [ms for _, ms in top] == pytest.approx([0.3, 0.2])
    name, ms = step_timeline.top_kernels(trace(), 5)[-1]
    assert name == "draft" and ms == pytest.approx(0.05)
    with pytest.raises(ValueError, match="fewer than two"):
        step_timeline.top_kernels(trace(steps=1), 2)


def test_report_prints_each_traces_top_kernels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with gzip.open(tmp_path / "trace-spec-x2-0.json.gz", "wt") as f:
        json.dump({"traceEvents": trace()}, f)
    assert step_timeline.main(tmp_path, kernels=3) == 0
    out = capsys.readouterr().out.split("top 3 kernels")[1].splitlines()
    assert [line.split()[1] for line in out[1:4]] == ["shared", "k", "draft"]
