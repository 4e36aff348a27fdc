# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""measure: this machine's CPU MoE cost curve, its thread check and draft-depth advice, before the first request.

``python -m vllm_ds4x measure`` (from a checkout: ``python build.py plan --measure``), run on the machine that
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
starts from. Then a prefill chunk both ways at the best LK_THREADS, within --prefill-budget: the
fork's CPU prefill (cpu_prefill, with the host copies where a GPU holds the activations) and, where a
GPU is present, its GPU prefill through vllm_ds4x.hooks.moe_prefill, at chunk sizes up to
--max-num-batched-tokens; the ms a layer call of each, the crossover where the GPU wins, in the
profile's "prefill" section that plan's prefill advice reads.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from vllm_ds4x import bounded, out_paths
from vllm_ds4x.measure.worker import GROUP
from vllm_ds4x.typed_options import request_of

if TYPE_CHECKING:
    from vllm_ds4x.moe.placement import ModelShape

FORMATS = {"fp4": "mxfp4", "bf16": "bf16"}  # expert dtype of the config -> lk_moe class
HELD = 2.2  # peak RAM per layer byte while lk_moe copies the weights in
MAX_K, MAX_SEQS = 16, 1024  # the token counts timed grow as their product
MAX_BUDGET_S, MAX_GPU_MS = 86400, 60000  # a day of timing; a minute per step
MAX_THREADS_PER_CORE = 8  # LK_THREADS above the core count is the trap measured; far above it, a typo
MAX_THREADS = 4096  # the parse's bound; check() holds --threads to MAX_THREADS_PER_CORE x this machine's cores
FIRST_SHARE, RETIMES = 0.5, 2  # the sweep's share of --budget; the rest times a noisy curve again, twice at most
DEFAULT_BATCHED_TOKENS = 8192  # the user's --max-num-batched-tokens: the largest prefill chunk timed by default
PREFILL_CHUNK_FLOOR = 512  # the smallest prefill chunk timed; chunks double from it up to --max-num-batched-tokens
MAX_BATCHED_TOKENS = 1 << 20  # a chunk of a million rows: above any step the fork takes
DEFAULT_PREFILL_BUDGET = 60.0  # seconds of prefill timing, both ways together
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
    max_num_batched_tokens: int | None
    """the largest prefill chunk timed; None: DEFAULT_BATCHED_TOKENS"""
    prefill_budget: float
    """seconds of prefill timing; 0: none"""

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


def prefill_chunks(max_num_batched_tokens: int | None) -> list[int]:
    """The prefill chunk sizes measure times: PREFILL_CHUNK_FLOOR doubling up to --max-num-batched-tokens,
    and that itself (a step's largest chunk); below the floor, that alone."""
    most = max_num_batched_tokens or DEFAULT_BATCHED_TOKENS
    sizes, size = {most}, PREFILL_CHUNK_FLOOR
    while size < most:
        sizes.add(size)
        size *= 2
    return sorted(sizes)


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


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object file (config.json, routing statistics) of at most
    bounded.MAX_JSON_BYTES, in UTF-8, every number finite; `what` is the option."""
    where = f"{what} {path}"
    try:
        found = bounded.read_json(path)
    except bounded.BoundError as e:
        raise MeasureError(f"{where}: {str(e)[:150]}") from None
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
    batched = request.max_num_batched_tokens
    if batched is not None and not 1 <= batched <= MAX_BATCHED_TOKENS:
        raise MeasureError(f"{where}: --max-num-batched-tokens {batched}: give tokens in 1..{MAX_BATCHED_TOKENS}, "
                           f"e.g. {DEFAULT_BATCHED_TOKENS} (vllm serve's)")
    if not 0 <= request.prefill_budget <= MAX_BUDGET_S:  # NaN fails this too
        raise MeasureError(f"{where}: --prefill-budget {request.prefill_budget}: give seconds in [0, {MAX_BUDGET_S}], "
                           f"e.g. {DEFAULT_PREFILL_BUDGET:g} (0: no prefill timing)")
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
    from vllm_ds4x.moe.placement import PlacementError, model_shape

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
    # the prefill worker's buffers at the largest chunk (activations, fp32 output, their copies), beside its layer
    chunk_bytes = 16 * shape.hidden * max(prefill_chunks(request.max_num_batched_tokens)) if request.prefill_budget else 0
    if free is not None and HELD * need + chunk_bytes > 0.9 * free:
        raise MeasureError(f"one {fmt} layer of this shape is {need / 2**30:.2f} GiB, {HELD * need / 2**30:.2f} GiB "
                           f"while lk_moe copies it in (and {chunk_bytes / 2**30:.2f} GiB for the largest prefill "
                           f"chunk); {free / 2**30:.2f} GiB of RAM is available (90% usable): free memory, lower "
                           f"--max-num-batched-tokens, or measure on the serving machine", 1)
    return spec, fmt, len(shape.moe_layers), need
