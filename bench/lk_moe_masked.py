#!/usr/bin/env python3
"""What lk_moe does with the masked rows of a decode batch (#38, design (b): uniform graphs whose
unverified slots route to no expert). The fork calls it from RoutedExperts._cpu_decode
(routed_experts.py) with the batch's hidden states, top-k ids (int32, [tokens, top_k], the local
ids, -1 where the expert map has none), top-k weights (fp32) and a token count that is
hidden_states.size(0): inside a captured graph, the graph's padded size.

One routed-expert layer of DeepSeek-V4-Flash's shape (256 experts, top-6, hidden 4096,
intermediate 2048), built as `measure` builds it (vllm_ds4x/measure/request.py's _layer; MXFP4 by default,
3.2 GiB; --format bf16 is 12 GiB), is called with each masking form the API allows, in three
scenarios: one request at depth 0 in a 3-slot graph (3 rows, rows 1-2 masked), two requests of
3 slots, depths 0 and 2 (6 rows, rows 1-2 masked); and four requests at depths 0, 0, 2, 2 (12 rows,
rows 1-2 and 4-5 masked), past lk_moe's group_min_len of 10 rows. Cells, all in one process:

  real n-m          the real rows alone (count n-m): the baseline every cell is divided by
  real n-m again    the same work again: the noise floor
  real n            every row routed (the masked ones to experts of their own)
  ids -1            masked rows' ids -1, weights 1/top_k
  weights 0         masked rows routed to experts of their own, weights 0
  ids -1, weights 0 both
  repeat, weights 0 masked rows routed to the experts of their request's real row, weights 0
  count n-m         the real rows packed first in the n-row buffers, count n-m (inside a graph the
                    count is fixed at capture, so this needs a graph per count and a gather)

Each trial draws fresh routing, shared by its cells, runs every cell once in a shuffled order with
the caches flushed before each, and divides each cell by the trial's baseline (paired); the first
trials warm up. cpu_decode on a CUDA stream with inputs on the GPU when torch sees a GPU, as in the
engine's graphs; cpu_prefill on host buffers otherwise (measure's CPU path: without a GPU,
cpu_decode returns at once and computes nothing). Each masking form first runs once on a small
layer in a process of its own: one that crashes is left out of the timing and the exit status is 1.

Usage, from the repo root, in a Python 3.12 with lk-moe and numpy (ds4x/deploy/lkvenv.py makes one in
the ds4x cache; torch with CUDA for the cpu_decode path):
    python -m bench.lk_moe_masked [--trials 20] [--threads 1] [--format mxfp4|bf16]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parents[1]
EXPERTS, TOP_K, HIDDEN, INTER = 256, 6, 4096, 2048  # DeepSeek-V4-Flash's routed experts
SMALL = {"experts": 32, "top_k": TOP_K, "hidden": 256, "inter": 128}  # the crash probe's layer
BASELINE, AGAIN = "real n-m", "real n-m again"
FORMS = (BASELINE, AGAIN, "real n", "ids -1", "weights 0", "ids -1, weights 0", "repeat, weights 0", "count n-m")
MASKING = FORMS[3:]  # the forms whose masked rows lk_moe sees (the probe's)
FLUSH_BYTES = 128 << 20  # read before each timed call: more than any L3 here, so no cell finds another's experts
WARM_TRIALS = 2

Ids = npt.NDArray[np.int32]
Weights = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Scenario:
    name: str
    rows: int  # n: the graph's rows
    masked: tuple[int, ...]  # the unverified slots
    requests: tuple[tuple[int, ...], ...]  # each request's rows, real first

    @property
    def real(self) -> list[int]:
        return [r for r in range(self.rows) if r not in self.masked]


SCENARIOS = (
    Scenario("1 request at depth 0, 3 slots", 3, (1, 2), ((0, 1, 2),)),
    Scenario("2 requests at depths 0 and 2, 3 slots each", 6, (1, 2), ((0, 1, 2), (3, 4, 5))),
    Scenario("4 requests at depths 0, 0, 2 and 2, 3 slots each", 12, (1, 2, 4, 5),
             ((0, 1, 2), (3, 4, 5), (6, 7, 8), (9, 10, 11))),
)
"""the issue's two batches, and one past lk_moe's group_min_len (10 rows: measure's config, the fork's)"""


@dataclass(frozen=True)
class Batch:
    """What one cpu_decode call is given: `rows` of hidden states (the buffer), ids and weights for
    those rows, and the count it is told."""

    rows: list[int]  # the scenario's rows, in buffer order
    ids: Ids
    weights: Weights
    count: int


def masked_batch(form: str, scenario: Scenario, routing: Ids) -> Batch:
    """The call of one form for routing ([n, top_k], a row's own experts for every row)."""
    if form not in FORMS:
        raise ValueError(f"unknown form {form!r}")
    if routing.shape[0] != scenario.rows:
        raise ValueError(f"routing for {routing.shape[0]} rows, the scenario has {scenario.rows}")
    top_k = routing.shape[1]
    real, masked = scenario.real, list(scenario.masked)
    ids = routing.astype(np.int32).copy()
    weights = np.full(ids.shape, 1 / top_k, np.float32)
    everything = list(range(scenario.rows))
    if form in (BASELINE, AGAIN):
        return Batch(real, ids[real].copy(), weights[real].copy(), len(real))
    if form == "count n-m":
        order = real + masked
        return Batch(order, ids[order].copy(), weights[order].copy(), len(real))
    if form == "real n":
        return Batch(everything, ids, weights, scenario.rows)
    if form in ("ids -1", "ids -1, weights 0"):
        ids[masked] = -1
    if form == "repeat, weights 0":
        for rows in scenario.requests:
            source = next(r for r in rows if r not in scenario.masked)
            ids[[r for r in rows if r in scenario.masked]] = ids[source]
    if form.endswith("weights 0"):
        weights[masked] = 0.0
    return Batch(everything, ids, weights, scenario.rows)


def distinct(batch: Batch) -> int:
    """Experts the call routes to: ids >= 0 of its first `count` rows."""
    used = batch.ids[: batch.count]
    return len(np.unique(used[used >= 0]))


# ---- the workers (lk_moe's Python): lk_moe imported only here


def measure_module() -> ModuleType:
    """vllm_ds4x's measure, found through the checkout root (lk_moe's Python has no ds4x installed)."""
    sys.path.insert(0, str(ROOT))
    from vllm_ds4x.measure import request as measure

    return measure


def layer_spec(fmt: str, small: bool) -> dict[str, Any]:
    shape = SMALL if small else {"experts": EXPERTS, "top_k": TOP_K, "hidden": HIDDEN, "inter": INTER}
    return {**shape, "format": fmt, "max_tokens": max(s.rows for s in SCENARIOS)}


def gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


class Caller:
    """One layer call for a Batch: cpu_decode on a CUDA stream with inputs on the GPU when torch
    sees one (the engine's graphs), cpu_prefill on host buffers otherwise; inputs are placed before
    the clock starts."""

    def __init__(self, moe: Any, spec: dict[str, Any], x: npt.NDArray[np.uint16]) -> None:
        self.moe, self.spec, self.x = moe, spec, x
        self.path = "cpu_decode" if gpu() else "cpu_prefill"
        if self.path == "cpu_decode":
            import torch

            self.stream = torch.cuda.Stream()  # type: ignore[no-untyped-call, unused-ignore]
            self.out_gpu = torch.zeros(spec["max_tokens"], spec["hidden"], device="cuda")

    def __call__(self, batch: Batch) -> tuple[float, npt.NDArray[np.float32]]:
        """Seconds of the call, and its output rows (fp32, `count` of them)."""
        top_k, hidden = self.spec["top_k"], self.spec["hidden"]
        x = np.ascontiguousarray(self.x[batch.rows])
        ids, weights = np.ascontiguousarray(batch.ids), np.ascontiguousarray(batch.weights)
        if self.path == "cpu_prefill":
            out = np.zeros((batch.count, hidden), np.float32)
            start = time.perf_counter()
            self.moe.cpu_prefill(batch.count, top_k, ids.ctypes.data, weights.ctypes.data, x.ctypes.data,
                                 out.ctypes.data)
            return time.perf_counter() - start, out
        import torch

        x_gpu = torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16)
        ids_gpu, w_gpu = torch.from_numpy(ids).cuda(), torch.from_numpy(weights).cuda()
        self.out_gpu.zero_()
        torch.cuda.synchronize()
        start = time.perf_counter()
        self.moe.cpu_decode(self.stream.cuda_stream, batch.count, top_k, x_gpu.data_ptr(), ids_gpu.data_ptr(),
                            w_gpu.data_ptr(), self.out_gpu.data_ptr())
        self.stream.synchronize()  # type: ignore[no-untyped-call, unused-ignore]
        seconds = time.perf_counter() - start
        return seconds, self.out_gpu[: batch.count].cpu().numpy().astype(np.float32)


def engine(fmt: str, small: bool, seed: int) -> tuple[Caller, dict[str, Any], np.random.Generator]:
    measure_module()  # the checkout root on the path
    from vllm_ds4x.measure import worker as measure_worker

    spec = layer_spec(fmt, small)
    moe, arrays = measure_worker._layer(spec)
    del arrays  # lk_moe holds its own copy
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((spec["max_tokens"], spec["hidden"]), np.float32)
    x = (values.view(np.uint32) >> 16).astype(np.uint16)  # bf16 bits
    return Caller(moe, spec, x), spec, rng


def route(rng: np.random.Generator, rows: int, experts: int, top_k: int) -> Ids:
    return np.argsort(rng.random((rows, experts)), axis=1)[:, :top_k].astype(np.int32)


def probe(form: str, fmt: str) -> dict[str, Any]:
    """One call of `form` on a small layer in every scenario, against the real rows alone: the real
    rows' largest difference (relative to their largest output), the masked rows' largest absolute
    output and whether every output is finite."""
    call, spec, rng = engine(fmt, small=True, seed=2)
    worst: dict[str, Any] = {"form": form, "path": call.path, "real_rel_diff": 0.0, "masked_abs_max": None,
                             "finite": True}
    for scenario in SCENARIOS:
        routing = route(rng, scenario.rows, spec["experts"], spec["top_k"])
        _, reference = call(masked_batch(BASELINE, scenario, routing))
        batch = masked_batch(form, scenario, routing)
        _, out = call(batch)
        rows = {row: out[i] for i, row in enumerate(batch.rows[: batch.count])}
        real = np.stack([rows[r] for r in scenario.real])
        scale = float(np.abs(reference).max()) or 1.0
        worst["real_rel_diff"] = max(worst["real_rel_diff"], float(np.abs(real - reference).max()) / scale)
        for row in (r for r in scenario.masked if r in rows):
            worst["masked_abs_max"] = max(worst["masked_abs_max"] or 0.0, float(np.abs(rows[row]).max()))
        worst["finite"] = worst["finite"] and bool(np.isfinite(out).all())
    return worst


def time_cells(forms: Sequence[str], fmt: str, trials: int, seed: int) -> dict[str, Any]:
    """ms of every (scenario, form) cell each trial, cells shuffled within a trial, caches flushed
    before each call; the first WARM_TRIALS trials are dropped."""
    built = time.perf_counter()
    call, spec, rng = engine(fmt, small=False, seed=seed)
    built = time.perf_counter() - built
    flush = np.ones(FLUSH_BYTES // 8, np.float64)
    order = random.Random(seed)
    cells = [(s, f) for s in range(len(SCENARIOS)) for f in forms]
    ms: dict[str, list[float]] = {f"{s}|{f}": [] for s, f in cells}
    experts: dict[str, list[int]] = {f"{s}|{f}": [] for s, f in cells}
    for trial in range(trials + WARM_TRIALS):
        routings = [route(rng, s.rows, spec["experts"], spec["top_k"]) for s in SCENARIOS]
        order.shuffle(cells)
        for s, form in cells:
            batch = masked_batch(form, SCENARIOS[s], routings[s])
            float(flush.sum())  # evicts the last call's experts from the caches
            seconds, _ = call(batch)
            if trial >= WARM_TRIALS:
                ms[f"{s}|{form}"].append(1000 * seconds)
                experts[f"{s}|{form}"].append(distinct(batch))
    return {"path": call.path, "threads": os.environ.get("LK_THREADS"), "build_s": built, "ms": ms,
            "experts": experts}


# ---- the analysis (any Python)


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


@dataclass(frozen=True)
class Cell:
    form: str
    ms: tuple[float, float, float]  # quartiles of ms a call
    ratio: tuple[float, float, float]  # quartiles of ms / the same trial's baseline
    excess_ms: float  # median of ms - the same trial's baseline
    experts: float  # mean distinct experts routed


def summarize(ms: dict[str, list[float]], experts: dict[str, list[int]], forms: Sequence[str]) -> list[Cell]:
    """One scenario's cells (ms and experts by form, trial by trial), each paired with the same
    trial's baseline."""
    base = ms[BASELINE]
    out = []
    for form in forms:
        values = ms[form]
        if len(values) != len(base):
            raise ValueError(f"{form}: {len(values)} trials, the baseline {len(base)}")
        out.append(Cell(form, quartiles(values), quartiles([v / b for v, b in zip(values, base)]),
                        statistics.median(v - b for v, b in zip(values, base)), statistics.fmean(experts[form])))
    return out


def table(cells: Sequence[Cell]) -> list[str]:
    lines = [f"{'cell':<19}{'experts':>8}{'ms median':>11}{'ms IQR':>17}{'x n-m':>8}{'x IQR':>15}{'+ms':>8}"]
    for c in cells:
        lines.append(f"{c.form:<19}{c.experts:8.1f}{c.ms[1]:11.2f}{f'{c.ms[0]:.2f}-{c.ms[2]:.2f}':>17}"
                     f"{c.ratio[1]:8.3f}{f'{c.ratio[0]:.3f}-{c.ratio[2]:.3f}':>15}{c.excess_ms:8.2f}")
    return lines


# ---- the driver


def worker_run(args: list[str], env: dict[str, str], timeout: float) -> tuple[int, dict[str, Any] | None, str]:
    """A worker in a process of its own: exit status, its JSON line, and the tail of its stderr."""
    try:
        done = subprocess.run([sys.executable, "-m", "bench.lk_moe_masked", "--worker", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, None, f"did not finish in {timeout:.0f} s"
    results = [line for line in done.stdout.splitlines() if line.startswith("{")]
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])
    return done.returncode, json.loads(results[-1]) if results else None, tail


def probe_forms(fmt: str, env: dict[str, str]) -> tuple[list[str], list[str]]:
    """The forms to time (the baselines, then each masking form whose probe ran) and the forms that crashed,
    each probe's finding printed."""
    failed = []
    forms = [BASELINE, AGAIN, "real n"]
    print("\nprobe (a small layer, every scenario): real rows against the real rows alone, the worst scenario")
    for form in MASKING:
        code, found, tail = worker_run(["probe", form, "--format", fmt], env, 300)
        if code or found is None:
            failed.append(form)
            print(f"  {form:<19} CRASHED (exit {code}): {tail}")
            continue
        forms.append(form)
        masked = found["masked_abs_max"]
        print(f"  {form:<19} {found['path']}: real rows differ by {found['real_rel_diff']:.1e} of their largest; "
              f"masked rows' largest output {'not returned' if masked is None else f'{masked:.3g}'}; "
              f"{'all finite' if found['finite'] else 'NOT FINITE'}")
    return forms, failed


def print_timed(timed: dict[str, Any], forms: list[str]) -> None:
    """The timing worker's figures: a table per scenario, with its noise floor."""
    print(f"\n{timed['path']}, LK_THREADS={timed['threads']}; layer built in {timed['build_s']:.0f} s; ms a layer "
          f"call, median and IQR over trials; x n-m: each trial's call over that trial's real n-m (paired)")
    for s, scenario in enumerate(SCENARIOS):
        ms = {form: timed["ms"][f"{s}|{form}"] for form in forms}
        experts = {form: timed["experts"][f"{s}|{form}"] for form in forms}
        cells = summarize(ms, experts, forms)
        print(f"\n{scenario.name}: n={scenario.rows}, masked rows {list(scenario.masked)} (m={len(scenario.masked)})")
        print("\n".join(table(cells)))
        floor = cells[1].ratio
        print(f"noise floor ({AGAIN} / {BASELINE}): {floor[1]:.3f}, IQR {floor[0]:.3f}-{floor[2]:.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20, help=f"timed trials (after {WARM_TRIALS} warm-up ones)")
    parser.add_argument("--threads", type=int, default=1, help="LK_THREADS (default 1: leave a core free)")
    parser.add_argument("--format", choices=["mxfp4", "bf16"], default="mxfp4")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, *rest = args.worker
        result = probe(rest[0], args.format) if kind == "probe" else time_cells(
            json.loads(rest[0]), args.format, args.trials, args.seed)
        print(json.dumps(result), flush=True)
        return 0
    if args.trials < 1 or args.threads < 1:
        parser.error("--trials and --threads must be at least 1")
    measure = measure_module()
    spec = layer_spec(args.format, small=False)
    need, free = measure.layer_bytes(spec), measure.available_ram()
    if free is not None and measure.HELD * need > 0.9 * free:
        print(f"error: one {args.format} layer is {need / 2**30:.2f} GiB, {measure.HELD * need / 2**30:.2f} GiB "
              f"while lk_moe copies it in; {free / 2**30:.2f} GiB of RAM is available", file=sys.stderr)
        return 1
    env = {**os.environ, "LK_THREADS": str(args.threads), "PYTHONUNBUFFERED": "1"}
    load = os.getloadavg()
    print(f"lk_moe masked rows: {EXPERTS} experts, top-{TOP_K}, hidden {HIDDEN}, intermediate {INTER}, "
          f"{args.format} ({need / 2**30:.2f} GiB), LK_THREADS={args.threads}, {os.cpu_count()} CPUs, "
          f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {args.trials} trials")
    forms, failed = probe_forms(args.format, env)
    code, timed, tail = worker_run(["time", json.dumps(forms), "--format", args.format, "--trials",
                                    str(args.trials), "--seed", str(args.seed)], env, 3600)
    if code or timed is None:
        print(f"\nerror: the timing worker failed (exit {code}): {tail}", file=sys.stderr)
        return 1
    print_timed(timed, forms)
    load = os.getloadavg()
    print(f"\nload after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if failed:
        print(f"error: crashed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
