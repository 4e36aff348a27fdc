# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""measure's command line: `python -m vllm_ds4x measure` (and `plan --measure`, which builds the same
request): run the timing worker once per LK_THREADS value, print the curve and the advice, write
the profile. The library beside it (request, analysis, worker) neither prints nor starts processes."""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import vllm_ds4x
from vllm_ds4x import bounded
from vllm_ds4x.measure.analysis import SPREAD_BOUND
from vllm_ds4x.measure.request import (
    DEFAULT_BATCHED_TOKENS,
    DEFAULT_GPU_MS,
    DEFAULT_PREFILL_BUDGET,
    FIRST_SHARE,
    MAX_BATCHED_TOKENS,
    MAX_K,
    MAX_SEQS,
    MAX_THREADS,
    RETIMES,
    MeasureError,
    MeasureRequest,
    available_ram,
    check,
    layer_bytes,
    layer_to_time,
    prefill_chunks,
    thread_counts,
)

WORKER = "vllm_ds4x.measure.worker"
"""the timing worker's module, run with `-m` in the Python with lk_moe; PYTHONPATH gets this
package's folder first, so a Python that has no ds4x installed runs the same code"""
GPU_PREFILL_WORKER = "vllm_ds4x.hooks.prefill_timing"
"""the same worker for the GPU prefill job, through the fork's hook (a module above this layer, run by name)"""


def worker_env(threads: int) -> dict[str, str]:
    here = str(Path(vllm_ds4x.__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "LK_THREADS": str(threads), "PYTHONPATH": path}

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
        job = {**spec, "budget_s": budget_s / len(threads), "bandwidth": 0 if runs else bandwidth_bytes}
        line = _one_worker(job, count, python, job["budget_s"], f"lk_moe with LK_THREADS={count}")
        runs.append(_answer(line, count, spec["tokens"], bool(job["bandwidth"])))
    return runs


def _one_worker(job: dict[str, Any], threads: int, python: str, budget_s: float, what: str, fix: str = "",
                module: str = WORKER) -> str:
    """The timing worker (`module`) run once on `job` at LK_THREADS=`threads`: its last JSON line; killed ten
    minutes past its budget. `what` names it in the error, `fix` ends it."""
    limit = budget_s + 600
    try:
        done = subprocess.run([python, "-m", module, "--worker", json.dumps(job)], env=worker_env(threads),
                              capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        raise MeasureError(f"{what} did not finish in {limit:.0f} s{fix}", 1) from None
    results = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not results:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise MeasureError(f"{what} failed (exit {done.returncode}): {tail}{fix}", 1)
    return results[-1]


SKIP_PREFILL = "; --prefill-budget 0 measures decode alone"


def timed_prefill(request: MeasureRequest, spec: dict[str, Any], best: dict[str, Any], python: str,
                  moe_layers: int) -> dict[str, Any] | None:
    """A prefill chunk timed both ways at the best LK_THREADS, one worker process a way, within
    --prefill-budget (halved between the ways where there are two): the profile's "prefill" section,
    printed; None with --prefill-budget 0. The GPU way where the decode curve ran on a GPU (cpu_decode)."""
    from vllm_ds4x.measure import analysis

    if not request.prefill_budget:
        print("\nprefill: not timed (--prefill-budget 0)")
        return None
    chunks = prefill_chunks(request.max_num_batched_tokens)
    ways = analysis.PREFILL_PATHS if best["path"] == "cpu_decode" else analysis.PREFILL_PATHS[:1]
    share, threads = request.prefill_budget / len(ways), best["threads"]
    print(f"\nprefill: one layer call per chunk of {', '.join(map(str, chunks))} tokens, {' and '.join(ways)}, at "
          f"LK_THREADS={threads}, {request.prefill_budget:g} s budget")
    answers: dict[str, dict[str, Any]] = {}
    for way in ways:
        job = {**spec, "prefill": {"path": way, "chunks": chunks, "budget_s": share}}
        what = f"lk_moe's {way.upper()} prefill at LK_THREADS={threads}"
        module = GPU_PREFILL_WORKER if way == "gpu" else WORKER
        line = _one_worker(job, threads, python, share, what, SKIP_PREFILL, module)
        answer, why = _checked(line, functools.partial(analysis.prefill_answer_problem, path=way, chunks=chunks))
        if why:
            raise MeasureError(f"the timing worker ({module}) for {what} answered {why}; nothing is written from it: "
                               f"check lk_moe (and torch) in --python{SKIP_PREFILL}", 1)
        answers[way] = cast(dict[str, Any], answer)
    section = analysis.prefill_section(answers["cpu"], answers.get("gpu"), max(chunks), spec)
    print(f"prefill per chunk (tok/s: all {moe_layers} MoE layers on lk_moe, the routed experts only; CPU: "
          f"{section['cpu_path']}{'; GPU: ' + section['gpu_path'] if section['gpu_path'] else ''}):")
    print("\n".join(analysis.prefill_table(section, moe_layers)))
    return section


def _checked(line: str, problem: Callable[[Any], str | None]) -> tuple[Any, str | None]:
    """A worker's answer line, parsed, and what `problem` finds wrong with it (None: nothing)."""
    try:
        answer = bounded.loads(line)
    except bounded.BoundError as e:
        return None, f"no JSON ({str(e)[:80]})"
    return answer, problem(answer)


def _answer(line: str, threads: int, tokens: list[int], bandwidth: bool) -> dict[str, Any]:
    """A worker's answer, checked whole (analysis.answer_problem) before anything reads it."""
    from vllm_ds4x.measure import analysis

    answer, why = _checked(line, lambda a: analysis.answer_problem(a, tokens, bandwidth))
    if why:
        raise MeasureError(f"the timing worker ({WORKER}) with LK_THREADS={threads} answered {why}; nothing is "
                           f"advised from it: check lk_moe in --python, or run the worker alone", 1)
    return cast(dict[str, Any], answer)


def retimed(spec: dict[str, Any], runs: list[dict[str, Any]], budget_s: float, python: str,
            bound: float) -> tuple[list[dict[str, Any]], list[str]]:
    """The best curve timed again, RETIMES times at most, with `budget_s` each, while
    it is noisy (measure_analysis.noise): the runs with the last timing in place of
    the noisy one, and the noise of the best curve left (none: advice may be written)."""
    from vllm_ds4x.measure import analysis

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
    """shared: also --config, --max-num-seqs, --plot, --force and --python (plan has its own: its --python
    finds or makes a Python with lk_moe)."""
    if shared:
        p.add_argument("--config", type=Path, required=True, help="the model's config.json")
        p.add_argument("--max-num-seqs", type=bounded.count(1, MAX_SEQS), default=1, help="requests per batch to time (default 1)")
        p.add_argument("--plot", type=Path, help="write a PNG of the curve per LK_THREADS")
        p.add_argument("--force", action="store_true", help="write over an existing --profile-out or --plot")
        p.add_argument("--max-num-batched-tokens", type=bounded.count(1, MAX_BATCHED_TOKENS), metavar="N",
                       help=f"vllm serve's: the largest prefill chunk timed (default {DEFAULT_BATCHED_TOKENS}, the "
                            f"user's); chunks double from 512 up to it")
        p.add_argument("--python", default=sys.executable,
                       help="the Python with lk_moe and numpy that runs the timing worker, one process per LK_THREADS "
                            "value (default: this one, the Python running measure; refused before any timing where "
                            "it cannot import them)")
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
    p.add_argument("--prefill-budget", type=float, default=DEFAULT_PREFILL_BUDGET, metavar="S",
                   help=f"seconds to time a prefill chunk both ways at the best LK_THREADS (the fork's CPU prefill; "
                        f"its GPU prefill through lk_moe's driver where a GPU is present) at chunk sizes up to "
                        f"--max-num-batched-tokens, smallest first, larger ones left out when they would not fit "
                        f"(default {DEFAULT_PREFILL_BUDGET:g}; 0: none)")
    p.add_argument("--profile-out", type=Path, default=Path("ds4x-step-cost.json"),
                   help="where to write the step-cost profile (default ds4x-step-cost.json)")


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
    prefill = timed_prefill(request, spec, best, python, moe_layers)
    _advise(request, best, runs, fmt, moe_layers, prefill)
    if request.plot:
        plot(request.plot, runs, moe_layers)
        print(f"plot: {request.plot}")
    return 0


def _timed_curve(request: MeasureRequest, spec: dict[str, Any], threads: list[int], python: str,
                 moe_layers: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every thread count timed, the best curve again while noisy: the runs and the best, or MeasureError."""
    from vllm_ds4x.measure import analysis

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
            moe_layers: int, prefill: dict[str, Any] | None = None) -> None:
    """The predictions from a clean curve, and the profile written (atomically) with how to start from it."""
    from vllm_ds4x.measure import analysis

    if request.max_num_seqs > 1:  # one request never splits
        print(analysis.ubatch_advice(best, request.gpu_ms[0], moe_layers))
    k, shape = request.num_speculative_tokens, (moe_layers, request.gpu_ms, request.max_num_seqs)
    predicted, lines = analysis.predict(best, k, *shape, request.acceptance)
    print("\n".join(lines + analysis.mixed(best, k, *shape, request.acceptance)))
    profile = analysis.profile(best, runs, fmt, k, *shape, request.acceptance, predicted, prefill)
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
    """`python -m vllm_ds4x measure ...`: parse, measure, print an error and its exit code."""
    parser = argparse.ArgumentParser(prog="python -m vllm_ds4x measure", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    try:
        return run(MeasureRequest.of(vars(parser.parse_args(argv))))
    except MeasureError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
