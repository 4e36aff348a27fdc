"""`plan`: will DeepSeek-V4-Flash fit, which MoE layers stay on the GPU, how fast can decode go.

The arithmetic is the fork engine's own (vllm_ds4x/moe/placement.py, which the fork overlay
ships as vllm_ds4x.moe.placement): the plan and the running engine cannot disagree.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ds4x import inputs
from ds4x.checkout import EXAMPLE_CONFIG, HOME
from ds4x.deploy import launch, prefill_advice, script_reader, script_writer, wrap
from ds4x.deploy.planned import MAX_MODEL_LEN, MAX_PARALLEL, Plan, PlanCommand, PlanRequest
from ds4x.errors import Ds4xError, InputError
from ds4x.scratch import atomic_path
from vllm_ds4x import bounded, out_paths
from vllm_ds4x.depth import sim
from vllm_ds4x.depth.named_policies import profile_start
from vllm_ds4x.measure import analysis
from vllm_ds4x.measure import cli as measure_cli
from vllm_ds4x.measure import request as measure
from vllm_ds4x.moe import placement as mp
from vllm_ds4x.moe import pool, prefill

EXAMPLE = HOME.examples / EXAMPLE_CONFIG
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)", re.I)
MAX_SIZE = 2**50  # 1 PiB: above any GPU or RAM bandwidth a plan is for
DSPARK_LAYERS = 3  # the draft layers DSpark ships with DeepSeek-V4-Flash (the README's configuration)
_UNITS = {"": 1024**3, **{unit: 1024**power for power, letter in ((2, "m"), (3, "g"), (4, "t"))
                          for unit in (letter, f"{letter}i", f"{letter}ib")},
          "mb": 10**6, "gb": 10**9, "tb": 10**12}
"""a size's units, lower case: a bare number, G, Gi and GiB are 2^30 bytes (M, T alike); GB is 10^9 (MB, TB alike)"""
SIZE_UNITS = "none, G, Gi or GiB: 2^30 bytes; M, MiB: 2^20; T, TiB: 2^40; GB, MB, TB: 10^9, 10^6, 10^12; any case"


KV_DTYPES = ("fp8_ds_mla", "fp8", "fp8_e4m3", "fp8_e5m2", "auto", "bf16", "bfloat16")
_MAX_TEXT = 40  # longer values are cut in messages
MAX_CORES = 2**16


def _shown(text: str) -> str:
    return repr(text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "...")


def size(text: str) -> int:
    """`32`, `32G`, `32 gib`, `31.5GB`: bytes (a bare number is GiB; _UNITS)."""
    found = _SIZE.fullmatch(text.strip()) if len(text) <= _MAX_TEXT else None
    if found and found[2].lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: unknown unit {found[2]!r} ({SIZE_UNITS})")
    value = int(float(found[1]) * _UNITS[found[2].lower()]) if found else -1
    if not 0 <= value <= MAX_SIZE:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a size like 32GiB or 31.5GB (at most 1 PiB)")
    return value


def positive_size(text: str) -> int:
    """A size that must be more than 0 (a bandwidth divides)."""
    value = size(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: expected more than 0, e.g. 89.6GB")
    return value


def _float(text: str) -> float | None:
    """text as a number, None when it is not one (or too long to be one)."""
    try:
        return float(text) if len(text) <= _MAX_TEXT else None
    except ValueError:
        return None


def fraction(text: str) -> float:
    """gpu_memory_utilization: in (0, 1]."""
    try:
        value: float | None = bounded.rate(text, 0, 1)
    except bounded.BoundError:
        value = None
    if value is None or value == 0:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: expected a fraction in (0, 1], e.g. 0.92")
    return value


def milliseconds(text: str) -> float:
    """A duration in ms, 0 up to measure's bound on a step (--overlap-outside-ms)."""
    value, most = _float(text), measure.MAX_GPU_MS
    if value is None or not 0 <= value <= most:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: expected ms in 0..{most}, e.g. 0.57")
    return value


def pool_slots(text: str) -> int:
    """--pool-slots, checked as the engine checks LK_POOL_SLOTS."""
    try:
        return pool.pool_settings({pool.SLOTS_ENV: text}).slots
    except mp.PlacementError as e:
        raise argparse.ArgumentTypeError(str(e).replace(f"{pool.SLOTS_ENV}=", "", 1)) from None


def png(text: str) -> Path:
    """A PNG path whose folder exists and can be written."""
    if Path(text).suffix.lower() != ".png":
        raise argparse.ArgumentTypeError(f"{_shown(text)}: expected a .png path")
    return inputs.output_file(text)  # the one output rule (out_paths.unfit_file)


def _check_launch_arguments(p: argparse.ArgumentParser) -> None:
    """--check-launch and what goes with it."""
    p.add_argument("--check-launch", type=inputs.existing_file, metavar="FILE",
                   help="check a serving script (generated or your own) against the plan at its settings")
    p.add_argument("--write", type=inputs.output_file, metavar="OUT",
                   help="with --check-launch: write the script with only what the check flags changed, each change "
                        "under a comment saying why (never over the script; over an existing OUT only with --force)")
    p.add_argument("--force", action="store_true",
                   help="write over an existing output file (--write, --launch, --plot, --profile-out)")
    p.add_argument("--cores", type=bounded.count(1, MAX_CORES), metavar="N",
                   help="with --check-launch: check LK_THREADS for a machine of N cores (default: this machine's)")
    p.add_argument("--profile", type=inputs.existing_file, metavar="FILE",
                   help="a measure profile (plan --measure's --profile-out): its prefill section turns the GPU "
                        "prefill line into this machine's prefill tok/s on the CPU and the GPU; with --check-launch "
                        "it also advises the draft depth (default: the committed runs that "
                        "bench/results/advice.toml lists)")
    p.add_argument("--pool-hit-rate", type=bounded.fraction(0, 1), metavar="H",
                   help="with --check-launch: your expert-pool hit rate in [0, 1] (lk_moe's [pool] lines, cum hit: "
                        "docs/expert-pool.md), to advise the pool or whole resident layers (default: none, so the "
                        "advice gives the hit rate above which the pool wins)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    most_k, most_seqs = measure.MAX_K, measure.MAX_SEQS  # measure's bounds, for plan's options too
    p.add_argument("--config", type=Path, default=EXAMPLE, help="model config.json (default: DeepSeek-V4-Flash example)")
    p.add_argument("--gpu-mem", type=size, default=size("32GiB"), metavar="SIZE",
                   help=f"memory of one GPU: 32, 32G and 32GiB are all 32 GiB (units: {SIZE_UNITS}; "
                        f"default: 32GiB, RTX 5090)")
    p.add_argument("--gpu-memory-utilization", type=fraction, default=0.92, help="vLLM's setting (default: 0.92)")
    p.add_argument("--max-model-len", type=bounded.count(1, MAX_MODEL_LEN), default=1048576, help="tokens (default: 1048576)")
    p.add_argument("--kv-cache-dtype", default="fp8_ds_mla", choices=KV_DTYPES, help="default: fp8_ds_mla")
    p.add_argument("--max-num-seqs", type=bounded.count(1, most_seqs), default=2,
                   help="requests decoding together; they share one max-model-len KV pool (default: 2)")
    p.add_argument("--tp", type=bounded.count(1, MAX_PARALLEL), default=1, help="tensor-parallel size")
    p.add_argument("--pp", type=bounded.count(1, MAX_PARALLEL), default=1, help="pipeline-parallel size")
    p.add_argument("--draft-layers", type=bounded.count(0, MAX_PARALLEL), default=DSPARK_LAYERS,
                   help=f"draft layers on the GPU's budget (default: {DSPARK_LAYERS}, DSpark's; MTP: 1, none: 0)")
    p.add_argument("--cpu-draft-layers", action="store_true", help="keep draft layers on the CPU")
    p.add_argument("--reserve", type=size, default=size("1.5GiB"), metavar="SIZE",
                   help="activations, CUDA graphs, in --gpu-mem's units (default: 1.5GiB)")
    p.add_argument("--ram-bandwidth", type=positive_size, default=size("89.6GB"), metavar="SIZE",
                   help="bytes/s, in --gpu-mem's units (default: 89.6GB, DDR5-5600 x2)")
    p.add_argument("--verify-tokens", type=bounded.count(1, most_k + 1), help="tokens per request and decode step (default: 1 + K, -k below)")
    p.add_argument("--routing-stats", type=Path, help='JSON {"<layer>": [count per expert, ...]} to rank layers')
    p.add_argument("--pool-slots", type=pool_slots, default=0, metavar="N",
                   help="lk_moe's GPU expert pool: slots per MoE layer, LK_POOL_SLOTS (docs/expert-pool.md; "
                        "default: 0, no pool)")
    p.add_argument("--gpu-prefill-min-batch", type=bounded.count(0, MAX_MODEL_LEN), default=0, metavar="N",
                   help="GPU prefill of lk_moe's layers for batches of N tokens or more, LVLLM_GPU_PREFILL_MIN_BATCH_SIZE "
                        "(default: 0, CPU prefill); with --check-launch: asks for it, and --write sets it")
    p.add_argument("--prefill-engine", choices=prefill.ENGINES, default="cutlass",
                   help="lk_moe's GPU prefill engine, LK_GPU_PREFILL_ENGINE (default: cutlass, lk_moe's)")
    p.add_argument("--prefetch-window", type=bounded.count(0, 999_999_999), default=mp.DEFAULT_PREFETCH_WINDOW,
                   metavar="N", help=f"LVLLM_GPU_PREFETCH_WINDOW: the triton engine's staging ring, in whole layers "
                                     f"of experts, at most {prefill.MAX_RING} (default: {mp.DEFAULT_PREFETCH_WINDOW})")
    p.add_argument("--max-num-batched-tokens", type=bounded.count(1, MAX_MODEL_LEN), metavar="N",
                   help=f"vllm serve's, for GPU prefill's scratch (default: vLLM's, {prefill.SMALL_GPU_TOKENS} below "
                        f"{prefill.LARGE_GPU // 2**30} GiB of --gpu-mem, else {prefill.LARGE_GPU_TOKENS})")
    p.add_argument("--plot", type=png, help="write a PNG of the decode ceiling against resident layers")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--launch", type=inputs.output_file, metavar="FILE",
                   help="write a serving script from the plan (with --measure: LK_THREADS and the adaptive profile)")
    p.add_argument("--model", type=inputs.text_value,
                   help="the model folder the script serves (default: the folder of --config)")
    _check_launch_arguments(p)
    p.add_argument("--measure", action="store_true",
                   help="time lk_moe on this machine instead: cost curve per LK_THREADS, tok/s per draft-depth "
                        "policy, a step-cost profile for the adaptive policy (options below)")
    group = p.add_argument_group("--measure")
    outside = sim.OUTSIDE_MS
    measure_cli.add_arguments(group, shared=False)
    group.add_argument("--overlap", choices=("off", "ubatch"), default="off",
                       help="also predict tok/s at --max-num-seqs with LVLLM_MOE_OVERLAP=ubatch (two micro-batches) "
                            "against off (default: off, no overlap lines)")
    group.add_argument("--overlap-outside-ms", type=milliseconds, default=outside, metavar="MS",
                       help=f"ms of the rest of a step that cannot overlap: drafter, scheduler, handoffs (default "
                            f"{outside}: outside the decode graph on the H200)")
    group.add_argument("--ubatch-gpu", type=fraction, default=1.0, metavar="F",
                       help="one micro-batch's GPU part as a fraction of the whole batch's (default 1.0: the GPU "
                            "side hardly grows with requests; 0.5: splitting adds no GPU work)")
    group.add_argument("--python", metavar="PYTHON",
                       help="the Python with lk_moe and numpy that runs the timing worker (default: this one if it "
                            "has them, else the venv ds4x keeps for lk_moe in its cache, made on first use from a "
                            "CPython 3.12 found on PATH or through pyenv: lk_moe ships cp312 wheels only)")


def _load_json(path: Path, what: str) -> dict[str, Any]:
    """measure's reader (size cap, UTF-8, finite numbers, an object), as the fork's measure uses it."""
    try:
        return measure.read_json(path, what)
    except measure.MeasureError as e:
        raise InputError(str(e)) from None


def _routing(path: Path, shape: Any) -> dict[int, list[float]]:
    """--routing-stats, checked as the engine checks LVLLM_GPU_RESIDENT_ROUTING_STATS (mp.parse_routing)."""
    try:
        return mp.parse_routing(_load_json(path, "--routing-stats"), shape)
    except mp.PlacementError as e:
        raise InputError(f"--routing-stats {path}: {e}") from None


def compute(args: PlanRequest) -> Plan:
    config = _load_json(args.config, "--config")
    try:
        shape = mp.model_shape(config, num_draft_layers=args.draft_layers)
        slots = pool.PoolSettings(slots=args.pool_slots)
        pool.check_layer(slots, shape.n_routed_experts, shape.top_k, named="--pool-slots ")
        plan = mp.budget(shape, gpu_bytes=args.gpu_mem, gpu_memory_utilization=args.gpu_memory_utilization,
                         max_model_len=args.max_model_len, kv_dtype=args.kv_cache_dtype,
                         tp_size=args.tp, pp_size=args.pp,
                         reserve_bytes=args.reserve, draft_resident=not args.cpu_draft_layers,
                         pool_bytes=pool.budget_pool_bytes(slots, shape, args.tp),
                         prefill_bytes=prefill.prefill_bytes(prefill_advice.settings(args), shape,
                                                            prefill_advice.batched_tokens(args), args.tp))
    except (mp.PlacementError, KeyError, TypeError, ValueError, ZeroDivisionError) as e:
        problem = f"missing field {e}" if isinstance(e, KeyError) else str(e)[:200]
        raise InputError(f"{args.config}: {problem}", "check the config.json and the plan options") from None
    routing = _routing(args.routing_stats, shape) if args.routing_stats else None
    tokens = verify_tokens(args)
    choice = mp.choose_auto(shape, max(plan.for_resident_layers, 0), args.tp, tokens, routing)
    ceiling = [mp.decode_ceiling(shape, n, args.ram_bandwidth, tokens) for n in range(len(shape.moe_layers) + 1)]
    by_phase = {phase: mp.decode_ceiling(shape, len(choice.layers), args.ram_bandwidth, tokens, made)
                for phase, made in tokens_made(args, tokens).items()}
    return Plan(shape=shape, budget=plan, choice=choice, ceiling=ceiling, by_phase=by_phase)


def verify_tokens(args: PlanRequest) -> int:
    return int(args.verify_tokens or 1 + args.num_speculative_tokens)


def tokens_made(args: PlanRequest, tokens: int) -> dict[str, float]:
    """Tokens a request makes per step in each phase at --acceptance (given at depth K)."""
    k = args.num_speculative_tokens
    made = {}
    for phase, rate in zip(("reasoning", "answer"), args.acceptance):
        p = sim.conditional(rate, k)
        made[phase] = 1 + sum(p**i for i in range(1, tokens))
    return made


def table(args: PlanRequest, result: Plan, curve: prefill_advice.Measured | None = None) -> str:
    """The ledger, the resident layers, the ceilings, and the GPU prefill line (with `curve`: measured speeds)."""
    shape, plan, choice, ceiling = result.shape, result.budget, result.choice, result.ceiling
    gib = mp.GIB
    fits = len(choice.layers)
    rows = [
        ("GPU memory usable", f"{args.gpu_mem / gib:.2f} GiB x {args.gpu_memory_utilization} = {plan.usable / gib:.2f} GiB"),
        ("non-expert weights", f"{plan.non_expert / gib:.2f} GiB"),
        (f"KV cache ({args.max_model_len} tokens, {args.kv_cache_dtype}, shared by {args.max_num_seqs} seq)",
         f"{plan.kv_cache / gib:.2f} GiB"),
        ("reserve (activations, graphs)", f"{plan.reserve / gib:.2f} GiB"),
        (f"draft layers ({shape.num_draft_layers}, {'CPU' if args.cpu_draft_layers else 'GPU'})", f"{plan.draft_layers / gib:.2f} GiB"),
        *([(f"expert pool ({args.pool_slots} slots x {len(shape.moe_layers)} layers x "
            f"{shape.expert_bytes / 2**20:.2f} MiB, at most)", f"{plan.pool / gib:.2f} GiB")] if args.pool_slots else []),
        *_prefill_rows(args, result),
        ("left for resident MoE layers", f"{plan.for_resident_layers / gib:.2f} GiB"),
        (f"MoE layer ({shape.n_routed_experts} experts x {shape.expert_bytes / 2**20:.2f} MiB)", f"{shape.layer_bytes_per_gpu(args.tp) / gib:.2f} GiB per GPU"),
        ("resident layers that fit", f"{fits}: {','.join(map(str, choice.layers)) or 'none'}"),
        (f"decode ceiling, all {len(shape.moe_layers)} MoE layers on CPU", f"{ceiling[0]:.1f} tok/s"),
        (f"decode ceiling, {fits} resident", f"{ceiling[fits]:.1f} tok/s ({ceiling[fits] / ceiling[0] - 1:+.1%})"
         if math.isfinite(ceiling[fits]) else "no RAM-bandwidth bound: no MoE layer is left on the CPU"),
    ]
    if math.isfinite(ceiling[fits]):
        rates = " / ".join(f"{r:.0%}" for r in args.acceptance)
        made = " / ".join(f"{result.by_phase[phase]:.1f}" for phase in ("reasoning", "answer"))
        rows.append((f"  at --acceptance {rates} (reasoning / answer)", f"{made} tok/s"))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines.append(f"why: {choice.reason}")
    if plan.for_resident_layers >= 0 and not args.pool_slots:  # GPU prefill beside the pool: refused (main)
        on = replace(args, gpu_prefill_min_batch=args.gpu_prefill_min_batch or 1)
        lines.append(prefill_advice.sentence(prefill_advice.fit(on, compute), args.max_model_len, curve, shape)
                     + prefill_advice.alternative(on, compute))
    lines.append(f"RAM bandwidth {args.ram_bandwidth / 1e9:.1f} GB/s, {verify_tokens(args)} token(s) verified per request "
                 f"and step; the decode ceilings count every verified token as accepted, the --acceptance row the "
                 f"expected accepted ones")
    return "\n".join(lines)


def _prefill_rows(args: PlanRequest, result: Plan) -> list[tuple[str, str]]:
    """The GPU-prefill lines of the ledger, while it is on."""
    on = prefill_advice.settings(args)
    if not on.on:
        return []
    shape, tokens = result.shape, prefill_advice.batched_tokens(args)
    staging, scratch = prefill.staging_bytes(on, shape, args.tp), prefill.scratch_bytes(on, shape, tokens, args.tp)
    return [(f"GPU prefill staging ({on.engine}, {on.ring} layer(s) of experts)", f"{staging / mp.GIB:.2f} GiB"),
            (f"GPU prefill scratch ({tokens} tokens a step)", f"{scratch / mp.GIB:.2f} GiB")]


def plot(path: Path, ceiling: list[float], fits: int) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise Ds4xError("--plot needs matplotlib", "pip install 'ds4x[plot]'") from None
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(range(len(ceiling)), ceiling, marker=".")
    ax.set_yscale("log")  # the bound is hyperbolic: only the left end is reachable on one GPU
    ax.axvline(fits, color="tab:red", linestyle="--", label=f"{fits} fit in VRAM: {ceiling[fits]:.1f} tok/s")
    ax.set_xlabel("resident MoE layers")
    ax.set_ylabel("decode ceiling (tok/s)")
    ax.set_title("RAM-bandwidth bound on decode")
    ax.legend()
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def save_png(fig: Any, path: Path) -> None:
    """Written aside and renamed into place: a failed or killed save leaves the old plot whole."""
    with atomic_path(path) as part:
        fig.savefig(part, dpi=120, format="png")


def measure_curve(command: PlanCommand, request: measure.MeasureRequest) -> int:
    """--measure: measure's run (with plan's way to a Python with lk_moe), then --overlap's lines."""
    if command.json:
        raise InputError("--json does not apply to --measure", "read the profile it writes (--profile-out), JSON")
    try:
        done = measure_cli.run(request, find_python=_find_python)  # called when --python was not given
    except measure.MeasureError as e:
        raise Ds4xError(str(e), exit_code=e.exit_code) from None
    if not done and command.overlap.mode != "off":
        profile = json.loads(request.profile_out.read_text(encoding="utf-8"))
        print("\n" + "\n".join(overlap_lines(profile, command.overlap, gpu_ms=request.gpu_ms,
                                             max_num_seqs=request.max_num_seqs,
                                             k_max=request.num_speculative_tokens, acceptance=request.acceptance)))
    return done


def overlap_lines(profile: dict[str, Any], overlap: sim.Overlap, *, gpu_ms: Sequence[float], max_num_seqs: int,
                  k_max: int, acceptance: Sequence[float]) -> list[str]:
    """depth_sim's overlap prediction at --max-num-seqs on the curve measure just
    wrote, with measure's own --gpu-ms, --acceptance, tokens and seeds (so the off
    column is measure's prediction above)."""
    curve, layers = sim.profile_curve(profile["measured"])
    by_phase = dict(zip(("reasoning", "answer"), acceptance))
    lines = sim.overlap_report(curve, layers, gpu_ms, max_num_seqs, k_max,
                               by_phase, analysis.PREDICT_TOKENS, analysis.PREDICT_SEEDS, overlap,
                               start=profile_start(profile["draft_depth"]))  # as measure's own table
    return ["predicted with CPU-GPU overlap (two micro-batches, depth_sim.step_ms), " + lines[0], *lines[1:]]


def _find_python() -> str:
    """No --python: this one if it has lk_moe, else the lk_moe venv in the ds4x cache, made once."""
    from ds4x.build import sources
    from ds4x.deploy import lkvenv

    if subprocess.run([sys.executable, "-c", "import lk_moe, numpy"], capture_output=True).returncode == 0:
        return sys.executable
    print("lk_moe is not in this Python: using (or making) its venv in the ds4x cache", file=sys.stderr)
    python = lkvenv.ensure(sources.default_cache())
    if python is None:
        raise Ds4xError("plan --measure needs lk_moe, whose wheels are for CPython 3.12 only, and no 3.12 was found",
                        lkvenv.HOW)
    return str(python)


def _finite(value: float) -> float | None:
    """JSON has no Infinity: an unbounded ceiling (no expert left on the CPU) is null."""
    return value if math.isfinite(value) else None


def _check_files(config: Path | None, routing_stats: Path | None) -> None:
    """Every input file a regular file, before any is opened: a pipe or a device
    would block the read or never end it."""
    for option, path in (("--config", config), ("--routing-stats", routing_stats)):
        if path is not None and path.exists() and not path.is_file() and not path.is_dir():
            raise InputError(f"{option} {path}: not a regular file (a pipe or a device)", "give the JSON file")


def main(command: PlanCommand) -> int:
    """The plan (or --check-launch, or --measure) the command asks for; printed, and written where it says."""
    request = command.request
    _check_files(request.config, request.routing_stats)
    if command.check_launch:
        return check_launch(command, command.check_launch)
    given = [name for name in ("write", "cores", "pool_hit_rate") if getattr(command, name) is not None]
    if given:
        raise InputError(f"--{given[0].replace('_', '-')} applies to --check-launch only",
                         "add --check-launch SCRIPT, or leave it out")
    tokens = prefill_advice.batched_tokens(request)
    if request.gpu_prefill_min_batch and request.pool_slots:
        raise InputError(f"--gpu-prefill-min-batch {request.gpu_prefill_min_batch} with --pool-slots "
                         f"{request.pool_slots}: the engine refuses GPU prefill beside the expert pool (lk_moe's "
                         f"prefill borrows the pool's VRAM, which ds4x does not bracket yet)", "give one of them")
    if request.gpu_prefill_min_batch > tokens:
        raise InputError(f"--gpu-prefill-min-batch {request.gpu_prefill_min_batch} exceeds --max-num-batched-tokens "
                         f"{tokens}: GPU prefill would never run", "lower it, or raise --max-num-batched-tokens")
    measuring = command.measure
    if measuring and command.profile:
        raise InputError(f"--profile {command.profile} with --measure: measure writes the profile it reads "
                         f"(--profile-out)", "leave --profile out, or plan from it without --measure")
    _check_outputs(command, {"--launch": command.launch, "--plot": command.plot,
                             "--profile-out": measuring.profile_out if measuring else None})
    profile = None
    if measuring:
        done = measure_curve(command, measuring)
        if done or not command.launch:
            return done
        profile = json.loads(measuring.profile_out.read_text(encoding="utf-8"))
        curve = prefill_advice.measured(profile, f"plan --measure ({measuring.profile_out})")
    else:
        given_profile = _load_json(command.profile, "--profile") if command.profile else None
        curve = prefill_advice.measured(given_profile, f"--profile {command.profile}")
    result = compute(request)
    print(json.dumps(plan_json(request, result, curve), indent=2, allow_nan=False) if command.json else
          table(request, result, curve))
    if command.plot:
        plot(command.plot, result.ceiling, len(result.choice.layers))
        print(f"plot: {command.plot}")
    _refuse_what_does_not_fit(result.budget)
    if command.launch:
        write_launch(command, command.launch, result, profile)
    return 0


def plan_json(request: PlanRequest, result: Plan, curve: prefill_advice.Measured | None = None) -> dict[str, Any]:
    """--json: the budget, the resident layers and the ceilings (null where unbounded), and with a --profile whose
    prefill section holds for this model the prefill tok/s it measured (prefill_advice.figures; else null)."""
    plan, choice = result.budget, result.choice
    measured = None
    section = prefill_advice.usable(curve, result.shape)
    if section is not None and plan.for_resident_layers >= 0 and not request.pool_slots:
        on = replace(request, gpu_prefill_min_batch=request.gpu_prefill_min_batch or 1)
        measured = prefill_advice.figures(prefill_advice.fit(on, compute), section, len(result.shape.moe_layers))
    return {"prefill_measured": measured, "usable": plan.usable, "non_expert": plan.non_expert, "kv_cache": plan.kv_cache,
            "reserve": plan.reserve, "draft_layers": plan.draft_layers, "pool": plan.pool, "prefill": plan.prefill,
            "for_resident_layers": plan.for_resident_layers, "fits": plan.for_resident_layers >= 0,
            "resident": list(choice.layers), "ceiling_all_cpu": _finite(result.ceiling[0]),
            "ceiling_resident": _finite(result.ceiling[len(choice.layers)]),
            "acceptance": dict(zip(("reasoning", "answer"), request.acceptance)),
            "ceiling_resident_at_acceptance": {k: _finite(v) for k, v in result.by_phase.items()}}


def _refuse_what_does_not_fit(plan: mp.Budget) -> None:
    if plan.for_resident_layers < 0:
        gib = mp.GIB
        need = plan.usable - plan.for_resident_layers
        raise Ds4xError(
            f"the model does not fit: {need / gib:.2f} GiB needed (weights, KV cache, reserve, draft layers"
            f"{', expert pool' if plan.pool else ''}{', GPU prefill' if plan.prefill else ''}), "
            f"{plan.usable / gib:.2f} GiB usable on the GPU",
            f"lower --max-model-len, use --cpu-draft-layers{', fewer --pool-slots' if plan.pool else ''}"
            f"{', --prefill-engine triton with --prefetch-window 1, or CPU prefill' if plan.prefill else ''}, "
            f"raise --tp, or a larger GPU",
        )


def write_launch(command: PlanCommand, path: Path, result: Plan, profile: dict[str, Any] | None) -> None:
    """--launch: the serving script of the plan (with --measure's profile), written atomically and executable."""
    request = command.request
    env, options = launch.lines(request, result, profile)
    with atomic_path(path) as part:
        part.write_text(launch.script(str(command.model or request.config.parent), env, options), encoding="utf-8")
        part.chmod(0o755)
    print(f"launch script: {path} (check an edited one with --check-launch)")


def check_launch(command: PlanCommand, script_path: Path) -> int:
    """Every disagreement between a serving script and the plan at its settings; 1 on an error."""
    _check_outputs(command, {"--write": command.write})
    script = launch.read(script_path)
    profile = (_load_json(command.profile, "--profile"), command.profile) if command.profile else None
    found = launch.check(script, command.request, compute, profile, command.cores, command.pool_hit_rate)
    cores = f"{command.cores} cores (--cores)" if command.cores else f"{os.cpu_count() or 1} cores (this machine)"
    print(f"checked for: {cores}, a GPU of {command.request.gpu_mem / 2**30:.2f} GiB (--gpu-mem)")
    for kind, said in (("note", found.notes), ("warning", found.warnings), ("error", found.errors)):
        for line in said:
            print("\n".join(wrap.lines(line, f"{kind}: ")) if sys.stdout.isatty() else f"{kind}: {line}")
    print(f"{script_path}: {len(found.errors)} error(s), {len(found.warnings)} warning(s)")
    if command.write:
        return write_fixed(command, script_path, command.write, script, found, profile)
    return 1 if found.errors else 0


def _check_outputs(command: PlanCommand, outputs: dict[str, Path | None]) -> None:
    """Every output checked before the work that fills it: none is an input, none written over without --force."""
    given = {"--config": command.request.config, "--routing-stats": command.request.routing_stats,
             "--profile": command.profile, "--check-launch": command.check_launch}
    why = out_paths.refusal(outputs, given, command.force)
    if why:
        raise InputError(why)


def write_fixed(command: PlanCommand, script_path: Path, out: Path, script: script_reader.Launch,
                found: launch.Findings, profile: tuple[dict[str, Any], Path] | None) -> int:
    """--write: the script with the check's fixes, written only if it then passes with 0 errors."""
    text = script_writer.written(script, found.fixes)
    again = launch.check(script_reader.read(text), command.request, compute, profile, command.cores,
                         command.pool_hit_rate)
    if again.errors:
        raise Ds4xError(f"--write {out}: not written, {len(again.errors)} error(s) it cannot fix: "
                        f"{again.errors[0]}", "change those settings by hand (or the plan options), then check again")
    with atomic_path(out) as part:
        part.write_text(text, encoding="utf-8")
        part.chmod(script_path.stat().st_mode & 0o777)
    print(f"wrote {out}: {len(found.fixes)} change(s), each under a comment saying why; "
          f"it passes --check-launch with 0 errors, {len(again.warnings)} warning(s)")
    return 0
