# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""measure: this machine's CPU MoE cost curve, its thread check and draft-depth advice, before the first request.

``python -m vllm.ds4x measure`` (from a checkout: ``python build.py plan --measure``), run on the machine that
will serve.

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
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from . import bounded, out_paths
from .measure_analysis import SPREAD_BOUND
from .measure_worker import GROUP
from .typed_options import request_of

if TYPE_CHECKING:
    from .moe_placement import ModelShape

WORKER = Path(__file__).with_name("measure_worker.py")
"""the timing worker, run by path in the Python with lk_moe (beside this module in the core and in vllm/ds4x)"""
FORMATS = {"fp4": "mxfp4", "bf16": "bf16"}  # expert dtype of the config -> lk_moe class
HELD = 2.2  # peak RAM per layer byte while lk_moe copies the weights in
MAX_K, MAX_SEQS = 16, 1024  # the token counts timed grow as their product
MAX_BUDGET_S, MAX_GPU_MS = 86400, 60000  # a day of timing; a minute per step
MAX_THREADS_PER_CORE = 8  # LK_THREADS above the core count is the trap measured; far above it, a typo
MAX_THREADS = 4096  # the parse's bound; check() holds --threads to MAX_THREADS_PER_CORE x this machine's cores
FIRST_SHARE, RETIMES = 0.5, 2  # the sweep's share of --budget; the rest times a noisy curve again, twice at most
DEFAULT_GPU_MS = 28.5  # the GPU side of DeepSeek-V4-Flash's K=2 step on an RTX 5090 (153.5 - 125.0 ms reported)


class MeasureError(Exception):
    """Bad input (exit 2), or a machine that cannot run the measurement (exit 1);
    the message names the input and the fix."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True, kw_only=True)
class MeasureRequest:
    """What to time and where to write it: measure's options (plan --measure's too), checked by check()."""

    config: Path
    max_num_seqs: int
    plot: Path | None
    force: bool
    format: str
    num_speculative_tokens: int
    threads: tuple[int, ...] | None
    budget: float
    noise_bound: float
    acceptance: tuple[float, ...]
    """at depth K: reasoning, answer"""
    gpu_ms: tuple[float, ...]
    profile_out: Path
    python: str | None
    """None: run() asks its find_python once every input is checked (plan)"""

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> MeasureRequest:
        """The request the parsed command line's options hold."""
        return request_of(cls, options)


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
            done = subprocess.run([python, str(WORKER), "--worker", json.dumps(job)], env=env, capture_output=True,
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


def add_arguments(p: argparse._ActionsContainer, shared: bool = True) -> None:
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
    p.add_argument("--noise-bound", type=bounded.fraction(0.01, 10000), default=SPREAD_BOUND, metavar="SHARE",
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


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object file (config.json, routing statistics) of at most
    bounded.MAX_JSON_BYTES, in UTF-8, every number finite; `what` is the option."""
    where = f"{what} {path}"
    try:
        with path.open("rb") as f:
            data = f.read(bounded.MAX_JSON_BYTES + 1)
        if len(data) > bounded.MAX_JSON_BYTES:
            raise MeasureError(f"{where}: larger than {bounded.MAX_JSON_BYTES >> 20} MiB; give the model's config.json")
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


def check(request: MeasureRequest) -> None:
    """Every input in its bounds, every output writable, before any work."""
    _check_counts(request)
    _check_outputs(request)
    if request.python is not None:  # None: the caller finds one once every input is checked (plan: find_python)
        check_program(request.python)


def _check_counts(request: MeasureRequest) -> None:
    where, k, gpu_ms, threads = "measure", request.num_speculative_tokens, request.gpu_ms, request.threads or ()
    if not (1 <= k <= MAX_K and 1 <= request.max_num_seqs <= MAX_SEQS):
        raise MeasureError(f"{where}: -k must be in 1..{MAX_K}, --max-num-seqs in 1..{MAX_SEQS}")
    if not 0 < request.budget <= MAX_BUDGET_S:  # NaN fails this too
        raise MeasureError(f"{where}: --budget {request.budget}: give seconds in (0, {MAX_BUDGET_S}], e.g. 90")
    if len(gpu_ms) not in (1, k + 1) or not all(0 <= ms <= MAX_GPU_MS for ms in gpu_ms):
        raise MeasureError(f"{where}: --gpu-ms {' '.join(map(str, gpu_ms))[:60]}: one figure in 0..{MAX_GPU_MS} "
                           f"ms, or one per depth 0..{k}")
    most = MAX_THREADS_PER_CORE * (os.cpu_count() or 1)
    if any(not 1 <= t <= most for t in threads) or len(threads) > 64:
        raise MeasureError(f"{where}: --threads {' '.join(map(str, threads))[:60]}: up to 64 values in 1..{most} "
                           f"({MAX_THREADS_PER_CORE} x the {os.cpu_count()} cores here)")
    if not all(0 < a < 1 for a in request.acceptance):
        raise MeasureError(f"{where}: --acceptance {list(request.acceptance)}: rates in (0, 1), e.g. 0.39 0.89")


def _check_outputs(request: MeasureRequest) -> None:
    where, out, plot_path = "measure", request.profile_out, request.plot
    if out.is_dir():
        raise MeasureError(f"{where}: --profile-out {out} is a folder; give a file name, e.g. "
                           f"{out / 'ds4x-step-cost.json'}")
    why = out_paths.refusal({"--profile-out": out, "--plot": plot_path}, {"--config": request.config}, request.force)
    if why:
        raise MeasureError(f"{where}: {why}")
    if plot_path is not None:
        if plot_path.suffix.lower() != ".png":
            raise MeasureError(f"{where}: --plot {plot_path}: give a .png path")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise MeasureError(f"{where}: --plot needs matplotlib: pip install matplotlib") from None


def layer_to_time(request: MeasureRequest) -> tuple[dict[str, Any], str, int, int]:
    """The routed-expert layer of --config in its lk_moe format, refused before any
    allocation when it would not fit in RAM: (spec, format, MoE layers, bytes)."""
    from .moe_placement import PlacementError, model_shape

    config = read_json(request.config, "--config")
    try:
        shape = model_shape(config)
    except (KeyError, TypeError, PlacementError) as e:
        raise MeasureError(f"--config {request.config}: {e}") from None
    expert_dtype = str(config.get("expert_dtype", "fp4"))
    fmt = FORMATS.get(expert_dtype) if request.format == "auto" else request.format
    if fmt is None:
        raise MeasureError(f"--config {request.config}: expert_dtype {expert_dtype!r} has no lk_moe measurement "
                           f"here; pass --format mxfp4 or bf16")
    spec = layer_spec(shape, fmt, request.num_speculative_tokens, request.max_num_seqs)
    need, free = layer_bytes(spec), available_ram()
    if free is not None and HELD * need > 0.9 * free:
        raise MeasureError(f"one {fmt} layer of this shape is {need / 2**30:.2f} GiB, {HELD * need / 2**30:.2f} GiB "
                           f"while lk_moe copies it in; {free / 2**30:.2f} GiB of RAM is available (90% usable): "
                           f"free memory, or measure on the serving machine", 1)
    return spec, fmt, len(shape.moe_layers), need


def run(request: MeasureRequest, find_python: Callable[[], str] | None = None) -> int:
    """Check, time, report and write the profile; `find_python` answers when the request names no Python."""
    check(request)
    spec, fmt, moe_layers, need = layer_to_time(request)
    python = request.python or (find_python() if find_python else sys.executable)
    check_python(python)
    threads = sorted(set(request.threads or thread_counts(os.cpu_count() or 1)))
    print(f"lk_moe layer: {spec['experts']} experts, top-{spec['top_k']}, hidden {spec['hidden']}, intermediate "
          f"{spec['inter']}, {fmt} ({need / 2**30:.2f} GiB); {moe_layers} MoE layers a step; "
          f"LK_THREADS {threads}; {request.budget:.0f} s budget")
    runs, best = _timed_curve(request, spec, threads, python, moe_layers)
    _advise(request, best, runs, fmt, moe_layers)
    if request.plot:
        plot(request.plot, runs, moe_layers)
        print(f"plot: {request.plot}")
    return 0


def _timed_curve(request: MeasureRequest, spec: dict[str, Any], threads: list[int], python: str,
                 moe_layers: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every thread count timed, the best curve again while noisy: the runs and the best, or MeasureError."""
    from . import measure_analysis as analysis

    free = available_ram()
    runs = run_workers(spec, threads, request.budget * FIRST_SHARE, python, min(1 << 30, (free or 1 << 32) // 4))
    print(f"RAM read bandwidth (numpy, {os.cpu_count()} threads): {runs[0]['ram_gbs']:.1f} GB/s")
    runs, noisy = retimed(spec, runs, request.budget * (1 - FIRST_SHARE) / RETIMES, python, request.noise_bound)
    best, warnings = analysis.thread_warnings(runs)
    for one in runs:
        print(f"LK_THREADS={one['threads']}: {one['cases'][0]['ms']:.2f} ms a layer call at 1 token ({one['path']})")
    for warning in warnings:
        print(f"warning: {warning}; leave cores free (LK_THREADS={best['threads']})")
    print(f"\ncurve at LK_THREADS={best['threads']} ({best['path']}), timed {best.get('timed', 1)} time(s):")
    print("\n".join(analysis.curve_table(best, layer_bytes(spec) / spec["experts"], moe_layers)))
    if noisy:
        raise MeasureError(f"the curve at LK_THREADS={best['threads']} stayed noisy, timed {best.get('timed', 1)} "
                           f"times within --budget {request.budget:g}: {'; '.join(noisy)}; no profile written and "
                           f"no advice from it: measure with the machine idle, or give a larger --budget", 1)
    return runs, best


def _advise(request: MeasureRequest, best: dict[str, Any], runs: list[dict[str, Any]], fmt: str,
            moe_layers: int) -> None:
    """The predictions from a clean curve, and the profile written (atomically) with how to start from it."""
    from . import measure_analysis as analysis

    if request.max_num_seqs > 1:  # one request never splits
        print(analysis.ubatch_advice(best, request.gpu_ms[0], moe_layers))
    k, shape = request.num_speculative_tokens, (moe_layers, request.gpu_ms, request.max_num_seqs)
    predicted, lines = analysis.predict(best, k, *shape, request.acceptance)
    print("\n".join(lines + analysis.mixed(best, k, *shape, request.acceptance)))
    profile = analysis.profile(best, runs, fmt, k, *shape, request.acceptance, predicted)
    out = request.profile_out
    part = out.with_name(f".{out.name}.part-{os.getpid()}")
    try:  # built aside, then renamed into place: a reader sees the old profile whole or the new one
        part.write_text(json.dumps(profile, indent=2) + "\n")
        os.replace(part, out)
    finally:
        part.unlink(missing_ok=True)
    spec_config = {"method": "dspark", "num_speculative_tokens": k, "draft_depth": profile["draft_depth"]}
    print(f"\nprofile: {out}; start adaptive from it with\n  --speculative-config "
          f"'{json.dumps(spec_config)}'\n  and LK_THREADS={best['threads']}")


def main(argv: list[str]) -> int:
    """`python -m vllm.ds4x measure ...`: parse, measure, print an error and its exit code."""
    parser = argparse.ArgumentParser(prog="python -m vllm.ds4x measure", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    try:
        return run(MeasureRequest.of(vars(parser.parse_args(argv))))
    except MeasureError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
