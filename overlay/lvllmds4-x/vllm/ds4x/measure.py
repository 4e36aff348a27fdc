# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""This machine's CPU MoE cost curve, its thread check and draft-depth advice,
before the first request: ``python -m vllm.ds4x measure`` (from a checkout:
``python build.py plan --measure``), run on the machine that will serve.

One routed-expert layer of the model's shape (config.json) in its expert format
is built through lk_moe (MXFP4 for FP4 experts, as the fork builds them; BF16
when asked), and calls with fresh random routing are timed for 1..K+1 verified
tokens per request and 1..max_num_seqs requests: through ``cpu_decode`` on a
CUDA stream where a GPU is present, ``cpu_prefill`` otherwise, every count in
turn for a few rounds. Every LK_THREADS value runs in a process of its own (lk_moe
reads it once). The curve at the best thread count is timed again, within
--budget, while it is noisy (more tokens costing less, or rounds spread past a
bound); one that stays noisy is reported with its spread, and nothing is advised
from it. From a clean curve: tok/s per phase of fixed 0..K, phase and adaptive
(the simulation of depth_sim), and a profile whose step costs the adaptive policy
starts from.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if __name__ != "__main__":  # the timing worker runs this file by path, outside the package, and parses nothing
    from . import bounded, out_paths
    from .measure_analysis import SPREAD_BOUND

if TYPE_CHECKING:
    from .moe_placement import ModelShape

FORMATS = {"fp4": "mxfp4", "bf16": "bf16"}  # expert dtype of the config -> lk_moe class
GROUP = 32  # MXFP4: one e8m0 scale per 32 weights along K
SCALE = 118  # e8m0 exponent of every block: small enough that random weights give finite outputs
HELD = 2.2  # peak RAM per layer byte while lk_moe copies the weights in
BATCHED_TOKENS = 8192  # the engine's max_num_batched_tokens, which sizes lk_moe's prefill groups
MAX_JSON_BYTES = 16 * 2**20  # far above any config.json or routing statistics; /dev/zero is refused quickly
MAX_K, MAX_SEQS = 16, 1024  # the token counts timed grow as their product
MAX_BUDGET_S, MAX_GPU_MS = 86400, 60000  # a day of timing; a minute per step
MAX_THREADS_PER_CORE = 8  # LK_THREADS above the core count is the trap measured; far above it, a typo
MAX_THREADS = 4096  # the parse's bound; check() holds --threads to MAX_THREADS_PER_CORE x this machine's cores
ROUNDS = 3  # the worker times every token count in turn this often; the rounds' medians are the repeats
FIRST_SHARE, RETIMES = 0.5, 2  # the sweep's share of --budget; the rest times a noisy curve again, twice at most
DEFAULT_GPU_MS = 28.5  # the GPU side of DeepSeek-V4-Flash's K=2 step on an RTX 5090 (153.5 - 125.0 ms reported)


class MeasureError(Exception):
    """Bad input (exit 2), or a machine that cannot run the measurement (exit 1);
    the message names the input and the fix."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# ---- the worker: one process per LK_THREADS value, lk_moe imported only here


def _layer(spec: dict[str, Any]) -> tuple[Any, tuple[Any, ...]]:
    """lk_moe's engine over one random layer, and the arrays it reads."""
    import lk_moe
    import numpy as np

    experts, top_k, hidden, inter = spec["experts"], spec["top_k"], spec["hidden"], spec["inter"]
    cfg = lk_moe.MOEConfigV2()  # the fields Lvllmds4-x's routed_experts.py sets, as it sets them
    cfg.num_processes, cfg.process_id, cfg.gpu_id = 1, 0, 0
    cfg.has_gate_proj = True
    cfg.expert_num, cfg.top_k = experts, top_k
    cfg.hidden_size, cfg.intermediate_size = hidden, inter
    cfg.max_num_seqs = spec["max_tokens"]  # max_num_seqs x (1 + K), as the fork sizes it
    cfg.max_batch_size = BATCHED_TOKENS
    cfg.stride, cfg.group_min_len, cfg.group_max_len = 32, 10, min(4096, BATCHED_TOKENS) + 128
    cfg.activation_type = 0  # silu
    cfg.use_gpu_prefill = False
    rng = np.random.default_rng(0)

    def filled(shape: tuple[int, ...], one_expert: np.ndarray) -> np.ndarray:
        """Every expert a copy of one random expert: each page is written (a
        never-written page reads as zeros from no memory at all)."""
        out = np.empty(shape, one_expert.dtype)
        out[:] = one_expert
        return out

    if spec["format"] == "mxfp4":  # packed e2m1 pairs and e8m0 scales, as the fork passes them
        cfg.groupN, cfg.groupK = 1, GROUP
        w13 = filled((experts, 2 * inter, hidden // 2), rng.integers(0, 256, (2 * inter, hidden // 2), np.uint8))
        w2 = filled((experts, hidden, inter // 2), rng.integers(0, 256, (hidden, inter // 2), np.uint8))
        s13 = np.full((experts, 2 * inter, hidden // GROUP), SCALE, np.uint8)
        s2 = np.full((experts, hidden, inter // GROUP), SCALE, np.uint8)
        moe = lk_moe.MOE_MXFP4(cfg, w13.ctypes.data, w2.ctypes.data, s13.ctypes.data, s2.ctypes.data, 0, 0)
        return moe, (w13, w2, s13, s2)

    def bf16(shape: tuple[int, ...], scale: float) -> np.ndarray:
        values = rng.standard_normal(shape, np.float32) * scale
        return (values.view(np.uint32) >> 16).astype(np.uint16)  # bf16 bits

    w13 = filled((experts, 2 * inter, hidden), bf16((2 * inter, hidden), hidden**-0.5))
    w2 = filled((experts, hidden, inter), bf16((hidden, inter), inter**-0.5))
    moe = lk_moe.MOE_BF16(cfg, w13.ctypes.data, w2.ctypes.data, 0, 0, 0, 0)
    return moe, (w13, w2)


def _caller(moe: Any, spec: dict[str, Any], tokens: int) -> tuple[str, Callable[[Any], None], Callable[[Any], Any]]:
    """One layer call for `tokens` tokens routed by ids (int32 [tokens, top_k]):
    cpu_decode on a CUDA stream with inputs on the GPU, as inside the engine's
    graphs, when torch sees a GPU; cpu_prefill on host buffers otherwise."""
    import numpy as np

    hidden, top_k = spec["hidden"], spec["top_k"]
    weights = np.full((tokens, top_k), 1 / top_k, np.float32)
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    if not gpu:
        x = np.zeros((tokens, hidden), np.uint16)
        out = np.empty((tokens, hidden), np.float32)

        def prefill(ids: np.ndarray) -> None:
            moe.cpu_prefill(tokens, top_k, ids.ctypes.data, weights.ctypes.data, x.ctypes.data, out.ctypes.data)

        return "cpu_prefill", prefill, lambda ids: ids
    x_gpu = torch.randn(tokens, hidden, device="cuda").bfloat16()
    w_gpu = torch.from_numpy(weights).cuda()
    out_gpu = torch.empty(spec["max_tokens"], hidden, device="cuda")
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call, unused-ignore]

    def decode(ids_gpu: Any) -> None:
        moe.cpu_decode(stream.cuda_stream, tokens, top_k, x_gpu.data_ptr(), ids_gpu.data_ptr(), w_gpu.data_ptr(),
                       out_gpu.data_ptr())
        stream.synchronize()

    return "cpu_decode", decode, lambda ids: torch.from_numpy(ids).cuda()


Timed = dict[int, tuple[list[list[float]], list[int]]]
"""by token count: each round's seconds a call, and the distinct experts of every call's routing"""


def _rounds(moe: Any, spec: dict[str, Any]) -> tuple[str, Timed]:
    """Every token count timed in turn, ROUNDS times, each within its share of the
    budget (at least 2 timed calls after one that warms up); the path timed. One
    count's buffers at a time, as the engine holds them."""
    import numpy as np

    rng = np.random.default_rng(1)
    experts, top_k, path = spec["experts"], spec["top_k"], ""
    share = spec["budget_s"] / len(spec["tokens"]) / ROUNDS
    timed: Timed = {tokens: ([], []) for tokens in spec["tokens"]}
    for _ in range(ROUNDS):
        for tokens in spec["tokens"]:
            path, call, place = _caller(moe, spec, tokens)
            samples: list[float] = []
            end = time.perf_counter() + share
            while len(samples) < 3 or (time.perf_counter() < end and len(samples) < 500 // ROUNDS):
                ids = np.argsort(rng.random((tokens, experts)), axis=1)[:, :top_k].astype(np.int32)
                routed = place(ids)
                start = time.perf_counter()
                call(routed)
                samples.append(time.perf_counter() - start)
                timed[tokens][1].append(len(np.unique(ids)))
            timed[tokens][0].append(samples[1:])  # the first call after another token count warms up
    return path, timed


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Median ms per layer call for each token count, over ROUNDS in turn (so load
    that comes and goes reaches every count), with each round's median (the repeats
    measure's noise check reads) and mean distinct experts; with `bandwidth`, RAM
    read bandwidth first."""
    result: dict[str, Any] = {"threads": int(os.environ.get("LK_THREADS", "0"))}
    if spec.get("bandwidth"):
        result["ram_gbs"] = ram_read_gbs(spec["bandwidth"])
    moe, arrays = _layer(spec)
    del arrays  # lk_moe holds its own copy
    path, timed = _rounds(moe, spec)
    cases = [{"tokens": tokens, "ms": 1000 * statistics.median([s for one in rounds for s in one]),
              "calls": sum(map(len, rounds)), "repeats": [1000 * statistics.median(one) for one in rounds],
              "distinct": statistics.fmean(distinct)} for tokens, (rounds, distinct) in timed.items()]
    return {**result, "path": path, "cases": cases}


# ---- the driver


def ram_read_gbs(nbytes: int = 1 << 30) -> float:
    """RAM read bandwidth for reference: numpy sums over a buffer larger than
    any cache, one slice per core in threads (numpy lets go of the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    data = np.ones(nbytes // 8, np.float64)
    parts = np.array_split(data, os.cpu_count() or 1)
    with ThreadPoolExecutor(len(parts)) as pool:
        list(pool.map(np.sum, parts))  # warm
        start = time.perf_counter()
        list(pool.map(np.sum, parts))
        return nbytes / (time.perf_counter() - start) / 1e9


def available_ram() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def thread_counts(cores: int) -> list[int]:
    """A few values up to the core count, the core count itself included (the trap)."""
    return sorted({max(1, cores // 4), max(1, cores // 2), max(1, cores * 3 // 4), cores})


def layer_spec(shape: ModelShape, fmt: str, k: int, max_num_seqs: int) -> dict[str, Any]:
    if shape.hidden % GROUP or shape.moe_intermediate % GROUP:
        raise MeasureError(f"hidden_size {shape.hidden} and moe_intermediate_size {shape.moe_intermediate} must be "
                           f"multiples of {GROUP} for lk_moe's expert formats")
    tokens = sorted({n * r for n in range(1, k + 2) for r in range(1, max_num_seqs + 1)})
    return {"experts": shape.n_routed_experts, "top_k": shape.top_k, "hidden": shape.hidden,
            "inter": shape.moe_intermediate, "format": fmt, "tokens": tokens, "max_tokens": max(tokens)}


def layer_bytes(spec: dict[str, Any]) -> int:
    params = spec["experts"] * 3 * spec["hidden"] * spec["inter"]
    return cast(int, params * 2 if spec["format"] == "bf16" else params // 2 + params // GROUP)


def check_python(python: str) -> None:
    found = subprocess.run([python, "-c", "import lk_moe, numpy"], capture_output=True, text=True)
    if found.returncode:
        raise MeasureError(f"--python {python} cannot import lk_moe and numpy: give a Python 3.12 with lk-moe "
                           f"installed (cp312 wheels only)")


def run_workers(spec: dict[str, Any], threads: list[int], budget_s: float, python: str,
                bandwidth_bytes: int) -> list[dict[str, Any]]:
    """One process per LK_THREADS value (the first also reads RAM bandwidth);
    one that overruns its budget by ten minutes is killed."""
    from tqdm import tqdm

    runs: list[dict[str, Any]] = []
    for count in tqdm(threads, desc="LK_THREADS", unit="setting", disable=not sys.stderr.isatty()):
        env = {**os.environ, "LK_THREADS": str(count)}
        job = {**spec, "budget_s": budget_s / len(threads), "bandwidth": 0 if runs else bandwidth_bytes}
        limit = job["budget_s"] + 600
        try:
            done = subprocess.run([python, __file__, "--worker", json.dumps(job)], env=env, capture_output=True,
                                  text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            raise MeasureError(f"lk_moe with LK_THREADS={count} did not finish in {limit:.0f} s", 1) from None
        results = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not results:
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            raise MeasureError(f"lk_moe with LK_THREADS={count} failed (exit {done.returncode}): {tail}", 1)
        runs.append(json.loads(results[-1]))
    return runs


def retimed(spec: dict[str, Any], runs: list[dict[str, Any]], budget_s: float, python: str,
            bound: float) -> tuple[list[dict[str, Any]], list[str]]:
    """The best curve timed again, RETIMES times at most, with `budget_s` each, while
    it is noisy (measure_analysis.noise): the runs with the last timing in place of
    the noisy one, and the noise of the best curve left (none: advice may be written)."""
    from . import measure_analysis as analysis

    for _ in range(RETIMES):
        best = analysis.thread_warnings(runs)[0]
        noisy = analysis.noise(best, bound)
        if not noisy:
            return runs, []
        print(f"noisy curve at LK_THREADS={best['threads']} ({'; '.join(noisy)}): timing it again, {budget_s:.0f} s")
        again = run_workers(spec, [best["threads"]], budget_s, python, 0)[0]
        runs = [{**run, **again, "timed": run.get("timed", 1) + 1} if run is best else run for run in runs]
    return runs, analysis.noise(analysis.thread_warnings(runs)[0], bound)


def plot(path: Path, runs: list[dict[str, Any]], moe_layers: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for run in runs:
        ax.plot([c["tokens"] for c in run["cases"]], [c["ms"] * moe_layers for c in run["cases"]], marker=".",
                label=f"LK_THREADS={run['threads']}")
    ax.set_xlabel("tokens verified per step (all requests)")
    ax.set_ylabel("CPU MoE ms per step")
    ax.set_title(f"lk_moe {runs[0]['path']}, {moe_layers} MoE layers")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def add_arguments(p: argparse.ArgumentParser, shared: bool = True) -> None:
    """shared: also --config, --max-num-seqs and --plot (plan has its own)."""
    if shared:
        p.add_argument("--config", type=Path, required=True, help="the model's config.json")
        p.add_argument("--max-num-seqs", type=bounded.count(1, MAX_SEQS), default=1, help="requests per batch to time (default 1)")
        p.add_argument("--plot", type=Path, help="write a PNG of the curve per LK_THREADS")
        p.add_argument("--force", action="store_true", help="write over an existing --profile-out or --plot")
    p.add_argument("--format", choices=["auto", "mxfp4", "bf16"], default="auto",
                   help="expert format (auto: the config's expert_dtype; fp4 -> mxfp4)")
    p.add_argument("--num-speculative-tokens", "-k", type=bounded.count(1, MAX_K), default=2, help="K: draft depths 0..K (default 2)")
    p.add_argument("--threads", type=bounded.count(1, MAX_THREADS), nargs="+", help="LK_THREADS values (default: up to the core count)")
    p.add_argument("--budget", type=float, default=90.0,
                   help="seconds of timing in all: half for the sweep, half kept to time a noisy curve again (more "
                        "tokens costing less, or rounds spread past --noise-bound; default 90)")
    p.add_argument("--noise-bound", type=bounded.fraction(0.01, 100), default=SPREAD_BOUND, metavar="SHARE",
                   help=f"noise a curve may have and still advise: each token count's rounds within SHARE of their "
                        f"median, and no count costing SHARE/4 less than the one below (default {SPREAD_BOUND}; a busy "
                        "machine may need more, and its advice is then as noisy)")
    p.add_argument("--acceptance", type=bounded.fraction(0, 1), nargs=2, metavar=("REASONING", "ANSWER"), default=(0.39, 0.89),
                   help="draft acceptance per phase at depth K (default 0.39 0.89, DSpark K=2 as reported)")
    p.add_argument("--gpu-ms", type=float, nargs="+", default=[DEFAULT_GPU_MS], metavar="MS",
                   help=f"the rest of a decode step besides the CPU experts (GPU side, drafter, scheduler) in ms: "
                        f"one figure, or one per verified depth 0..K as the end-to-end benchmark measures it "
                        f"(default {DEFAULT_GPU_MS}: RTX 5090, DeepSeek-V4-Flash)")
    p.add_argument("--profile-out", type=Path, default=Path("ds4x-step-cost.json"),
                   help="where to write the step-cost profile (default ds4x-step-cost.json)")
    p.add_argument("--python", default=sys.executable, help="the Python with lk_moe (default: this one)")


def cli(argv: list[str]) -> int:
    """`python -m vllm.ds4x measure ...`"""
    parser = argparse.ArgumentParser(prog="python -m vllm.ds4x measure", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    try:
        return main(parser.parse_args(argv))
    except MeasureError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object file (config.json, routing statistics) of at most
    MAX_JSON_BYTES, in UTF-8, every number finite; `what` is the option."""
    where = f"{what} {path}"
    try:
        with path.open("rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)
        if len(data) > MAX_JSON_BYTES:
            raise MeasureError(f"{where}: larger than {MAX_JSON_BYTES >> 20} MiB; give the model's config.json")
        found = bounded.loads(data.decode("utf-8"))
    except FileNotFoundError:
        raise MeasureError(f"{where}: not found") from None
    except IsADirectoryError:
        raise MeasureError(f"{where}: a folder; give the JSON file in it") from None
    except OSError as e:
        raise MeasureError(f"{where}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise MeasureError(f"{where}: byte {e.start} is not UTF-8; give a JSON file") from None
    except bounded.BoundError as e:
        raise MeasureError(f"{where}: {str(e)[:150]}; give a JSON file") from None
    if not isinstance(found, dict):
        raise MeasureError(f"{where}: a JSON {type(found).__name__}, not an object")
    return found


def check_program(python: str, what: str = "--python") -> None:
    """A program that exists and may be run (a name is looked up on PATH)."""
    found = shutil.which(python)
    if found is None:
        why = "is not executable" if Path(python).is_file() else "not found"
        raise MeasureError(f"{what} {python}: {why}; give a Python 3.12 with lk-moe installed")


def check(args: argparse.Namespace) -> None:
    where = "measure"
    if not (1 <= args.num_speculative_tokens <= MAX_K and 1 <= args.max_num_seqs <= MAX_SEQS):
        raise MeasureError(f"{where}: -k must be in 1..{MAX_K}, --max-num-seqs in 1..{MAX_SEQS}")
    if not 0 < args.budget <= MAX_BUDGET_S:  # NaN fails this too
        raise MeasureError(f"{where}: --budget {args.budget}: give seconds in (0, {MAX_BUDGET_S}], e.g. 90")
    if len(args.gpu_ms) not in (1, args.num_speculative_tokens + 1) or not all(0 <= ms <= MAX_GPU_MS for ms in args.gpu_ms):
        raise MeasureError(f"{where}: --gpu-ms {' '.join(map(str, args.gpu_ms))[:60]}: one figure in 0..{MAX_GPU_MS} "
                           f"ms, or one per depth 0..{args.num_speculative_tokens}")
    most = MAX_THREADS_PER_CORE * (os.cpu_count() or 1)
    if any(not 1 <= t <= most for t in args.threads or ()) or len(args.threads or ()) > 64:
        raise MeasureError(f"{where}: --threads {' '.join(map(str, args.threads))[:60]}: up to 64 values in 1..{most} "
                           f"({MAX_THREADS_PER_CORE} x the {os.cpu_count()} cores here)")
    if not all(0 < a < 1 for a in args.acceptance):
        raise MeasureError(f"{where}: --acceptance {args.acceptance}: rates in (0, 1), e.g. 0.39 0.89")
    if args.profile_out.is_dir():
        raise MeasureError(f"{where}: --profile-out {args.profile_out} is a folder; give a file name, e.g. "
                           f"{args.profile_out / 'ds4x-step-cost.json'}")
    why = out_paths.refusal({"--profile-out": args.profile_out, "--plot": args.plot}, {"--config": args.config},
                            args.force)
    if why:
        raise MeasureError(f"{where}: {why}")
    if args.plot is not None:
        if args.plot.suffix.lower() != ".png":
            raise MeasureError(f"{where}: --plot {args.plot}: give a .png path")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise MeasureError(f"{where}: --plot needs matplotlib: pip install matplotlib") from None
    if args.python is not None:  # None: the caller finds one once every input is checked (plan: find_python)
        check_program(args.python)


def layer_to_time(args: argparse.Namespace) -> tuple[dict[str, Any], str, int, int]:
    """The routed-expert layer of --config in its lk_moe format, refused before any
    allocation when it would not fit in RAM: (spec, format, MoE layers, bytes)."""
    from .moe_placement import PlacementError, model_shape

    config = read_json(args.config, "--config")
    try:
        shape = model_shape(config)
    except (KeyError, TypeError, PlacementError) as e:
        raise MeasureError(f"--config {args.config}: {e}") from None
    expert_dtype = str(config.get("expert_dtype", "fp4"))
    fmt = FORMATS.get(expert_dtype) if args.format == "auto" else args.format
    if fmt is None:
        raise MeasureError(f"--config {args.config}: expert_dtype {expert_dtype!r} has no lk_moe measurement here; "
                           f"pass --format mxfp4 or bf16")
    spec = layer_spec(shape, fmt, args.num_speculative_tokens, args.max_num_seqs)
    need, free = layer_bytes(spec), available_ram()
    if free is not None and HELD * need > 0.9 * free:
        raise MeasureError(f"one {fmt} layer of this shape is {need / 2**30:.2f} GiB, {HELD * need / 2**30:.2f} GiB "
                           f"while lk_moe copies it in; {free / 2**30:.2f} GiB of RAM is available (90% usable): "
                           f"free memory, or measure on the serving machine", 1)
    return spec, fmt, len(shape.moe_layers), need


def main(args: argparse.Namespace) -> int:
    check(args)
    spec, fmt, moe_layers, need = layer_to_time(args)
    if args.python is None:
        args.python = args.find_python()
    check_python(args.python)
    threads = sorted(set(args.threads or thread_counts(os.cpu_count() or 1)))
    print(f"lk_moe layer: {spec['experts']} experts, top-{spec['top_k']}, hidden {spec['hidden']}, intermediate "
          f"{spec['inter']}, {fmt} ({need / 2**30:.2f} GiB); {moe_layers} MoE layers a step; "
          f"LK_THREADS {threads}; {args.budget:.0f} s budget")
    free = available_ram()
    runs = run_workers(spec, threads, args.budget * FIRST_SHARE, args.python, min(1 << 30, (free or 1 << 32) // 4))
    print(f"RAM read bandwidth (numpy, {os.cpu_count()} threads): {runs[0]['ram_gbs']:.1f} GB/s")
    from . import measure_analysis as analysis

    runs, noisy = retimed(spec, runs, args.budget * (1 - FIRST_SHARE) / RETIMES, args.python, args.noise_bound)
    best, warnings = analysis.thread_warnings(runs)
    for run in runs:
        print(f"LK_THREADS={run['threads']}: {run['cases'][0]['ms']:.2f} ms a layer call at 1 token ({run['path']})")
    for warning in warnings:
        print(f"warning: {warning}; leave cores free (LK_THREADS={best['threads']})")
    print(f"\ncurve at LK_THREADS={best['threads']} ({best['path']}), timed {best.get('timed', 1)} time(s):")
    print("\n".join(analysis.curve_table(best, layer_bytes(spec) / spec["experts"], moe_layers)))
    if noisy:
        raise MeasureError(f"the curve at LK_THREADS={best['threads']} stayed noisy, timed {best.get('timed', 1)} "
                           f"times within --budget {args.budget:g}: {'; '.join(noisy)}; no profile written and no "
                           f"advice from it: measure with the machine idle, or give a larger --budget", 1)
    if args.max_num_seqs > 1:  # one request never splits
        print(analysis.ubatch_advice(best, args.gpu_ms[0], moe_layers))
    k, shape = args.num_speculative_tokens, (moe_layers, args.gpu_ms, args.max_num_seqs)
    predicted, lines = analysis.predict(best, k, *shape, args.acceptance)
    print("\n".join(lines + analysis.mixed(best, k, *shape, args.acceptance)))
    profile = analysis.profile(best, runs, fmt, k, *shape, args.acceptance, predicted)
    part = args.profile_out.with_name(f".{args.profile_out.name}.part-{os.getpid()}")
    try:  # built aside, then renamed into place: a reader sees the old profile whole or the new one
        part.write_text(json.dumps(profile, indent=2) + "\n")
        os.replace(part, args.profile_out)
    finally:
        part.unlink(missing_ok=True)
    spec_config = {"method": "dspark", "num_speculative_tokens": k, "draft_depth": profile["draft_depth"]}
    print(f"\nprofile: {args.profile_out}; start adaptive from it with\n  --speculative-config "
          f"'{json.dumps(spec_config)}'\n  and LK_THREADS={best['threads']}")
    if args.plot:
        plot(args.plot, runs, moe_layers)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    print(json.dumps(worker(json.loads(sys.argv[2]))), flush=True)
