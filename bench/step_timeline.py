"""Where a decode step's time goes on the GPU, from the torch.profiler traces of the
end-to-end benchmark (ci/fork-gpu/e2e writes RESDIR/trace-MODE-xN-DEPTH.json.gz).

A step runs from one replay of the target's decode graph to the next. Of that:
- target graph: its first kernel's start to its last kernel's end. Inside it, the main
  stream is either running kernels (attention, router, norms) or idle, which in a decode
  graph is the wait for lk_moe's `cpu_decode` (the CPU experts) plus launch gaps;
- side streams: kernels on other streams inside the graph (the shared expert, where
  vLLM runs it beside the routed experts), and how much of them ran while the main
  stream was idle, i.e. hidden behind the CPU experts;
- outside the graph: the drafter, sampling, the scheduler and the handoffs; of it, the drafter's
  graph replays (first kernel to last, its own CPU experts' wait included).

Usage: python -m bench.step_timeline RESDIR [--kernels N]   (exit 1 when a trace is missing, unreadable or has
no replay; --kernels N: also each trace's N kernels with the most GPU time a step, on every stream)
"""

import gzip
import json
import statistics
import sys
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

Event = dict[str, Any]  # one Chrome-trace event
Span = tuple[float, float]  # start, end in µs


def union(spans: list[Span]) -> list[Span]:
    """Disjoint, sorted spans covering the same time."""
    out: list[list[float]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def length(spans: list[Span]) -> float:
    return sum(e - s for s, e in spans)


def intersect(a: list[Span], b: list[Span]) -> float:
    """Time two disjoint sorted span lists share."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def graph_replays(events: list[Event]) -> list[list[Event]]:
    """Device events (kernels, copies, sets) of each cudaGraphLaunch, in launch order."""
    launches = {e["args"]["correlation"]: e["ts"] for e in events
                if e.get("ph") == "X" and e.get("name") == "cudaGraphLaunch" and "correlation" in e.get("args", {})}
    by_launch: dict[int, list[Event]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            corr = e.get("args", {}).get("correlation")
            if corr in launches:
                by_launch[corr].append(e)
    return [by_launch[c] for c in sorted(by_launch, key=launches.__getitem__)]


def target_replays(events: list[Event]) -> list[list[Event]]:
    """The target's graph replays: the larger kind (the drafter's graphs hold a layer or two)."""
    return split_replays(events)[0]


def split_replays(events: list[Event]) -> tuple[list[list[Event]], list[list[Event]]]:
    """Graph replays as (the target's, the rest: the drafter's), by kernel count."""
    replays = graph_replays(events)
    if not replays:
        raise ValueError("no graph replay with kernels in the trace")
    most = max(len(r) for r in replays)
    return [r for r in replays if len(r) > most // 2], [r for r in replays if len(r) <= most // 2]


def span(replay: list[Event]) -> Span:
    """A replay's first kernel's start to its last one's end."""
    return min(e["ts"] for e in replay), max(e["ts"] + e["dur"] for e in replay)


def top_kernels(events: list[Event], top: int) -> list[tuple[str, float]]:
    """The `top` kernels by GPU time a step (ms, mean over the steps), on every stream,
    inside the target's graph or not (the drafter's graphs, eager kernels), from one target
    replay's first kernel to the next one's."""
    starts = [span(r)[0] for r in target_replays(events)]
    if len(starts) < 2:
        raise ValueError("fewer than two target graph replays in the trace")
    total: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and starts[0] <= e["ts"] < starts[-1]:
            total[e["name"]] += e["dur"]
    steps = len(starts) - 1
    return [(name, us / steps / 1000) for name, us in sorted(total.items(), key=lambda kv: -kv[1])[:top]]


def step_split(events: list[Event]) -> dict[str, float]:
    """Medians over the steps of one trace, in ms. The target's graph is the larger kind
    of replay (the drafter's graphs hold a layer or two); a step runs from one target
    replay's first kernel to the next one's."""
    target, drafter = split_replays(events)
    drafter_spans = [span(r) for r in drafter]
    rows = defaultdict(list)
    for this, after in pairwise(target):
        start, end = span(this)
        streams = [e["args"].get("stream") for e in this]
        main = max(set(streams), key=streams.count)  # the capture stream holds most of the kernels
        on_main = union([(e["ts"], e["ts"] + e["dur"]) for e in this if e["args"].get("stream") == main])
        side = union([(e["ts"], e["ts"] + e["dur"]) for e in this if e["args"].get("stream") != main])
        idle = [(a_end, b_start) for (_, a_end), (b_start, _) in pairwise(on_main)]
        next_start = span(after)[0]
        rows["step"].append(next_start - start)
        rows["target graph"].append(end - start)
        rows["main stream busy"].append(length(on_main))
        rows["main stream idle"].append(length(idle))
        rows["side streams busy"].append(length(side))
        rows["side inside main idle"].append(intersect(side, idle))
        rows["outside the graph"].append(next_start - end)
        rows["drafter graphs"].append(sum(b - a for a, b in drafter_spans if start <= a < next_start))
    out = {k: statistics.median(v) / 1000 for k, v in rows.items()}
    out["steps"] = len(rows["step"])
    return out


def read(path: Path) -> list[Event]:
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        trace = json.load(f)
    events: list[Event] = trace["traceEvents"] if isinstance(trace, dict) else trace
    return events


COLUMNS = ("step", "target graph", "main stream busy", "main stream idle", "side streams busy",
           "side inside main idle", "outside the graph", "drafter graphs")
LABELS = ("step", "graph", "main busy", "main idle", "side busy", "side hidden", "outside", "drafter")  # 11 wide


def main(resdir: Path, kernels: int = 0) -> int:
    traces = sorted(resdir.glob("trace-*.json*"))
    if not traces:
        print(f"no trace-*.json.gz in {resdir}: run ci/fork-gpu/e2e with E2E_PROFILE=1 (the default)")
        return 1
    print("a decode step on the GPU, from torch.profiler (median ms over the steps; profiler on, so slower)")
    print("columns: step ≈ graph + outside; graph ≈ main busy + main idle (the CPU experts' wait); "
          "side hidden: side-stream kernel time inside main idle; drafter: the drafter's graph replays, first "
          "kernel to last (its own CPU experts included), part of outside")
    print(f"{'trace':28} {'steps':>5} " + " ".join(f"{c:>11}" for c in LABELS))
    failed = 0
    for path in traces:
        name = path.name.split(".")[0].removeprefix("trace-")
        try:
            split = step_split(read(path))
        except (OSError, ValueError, KeyError) as e:
            print(f"{name:28} FAILED: {e}")
            failed += 1
            continue
        print(f"{name:28} {split['steps']:5.0f} " + " ".join(f"{split[c]:11.2f}" for c in COLUMNS))
    if kernels:
        failed += print_top_kernels(traces, kernels)
    return 1 if failed else 0


def print_top_kernels(traces: list[Path], top: int) -> int:
    """Each trace's `top` kernels by GPU time a step; the count of traces that failed."""
    failed = 0
    for path in traces:
        name = path.name.split(".")[0].removeprefix("trace-")
        try:
            rows = top_kernels(read(path), top)
        except (OSError, ValueError, KeyError) as e:
            print(f"{name}: FAILED: {e}")
            failed += 1
            continue
        print(f"{name}: top {top} kernels, ms a step (every stream, the drafter's graphs and eager kernels too)")
        for kernel, ms in rows:
            print(f"  {ms:9.3f}  {kernel[:110]}")
    return failed


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Where a decode step's time goes, from the e2e benchmark's traces.")
    parser.add_argument("resdir", type=Path, help="the folder of trace-*.json.gz")
    parser.add_argument("--kernels", type=int, default=0, metavar="N",
                        help="also each trace's N kernels with the most GPU time a step")
    options = parser.parse_args()
    sys.exit(main(options.resdir, options.kernels))
