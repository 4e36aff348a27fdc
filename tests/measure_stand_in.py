"""measure's timing worker stood in, for the tests of `plan --measure` that check what measure does
with a curve (the sweep, the advice, the profile) rather than what a machine's clock says: given as
--python, it answers measure's lk_moe check and each `-m vllm_ds4x.measure.worker --worker JOB` with
a curve computed from the job alone, so that it is the same on any machine, however busy. A prefill job
gets a straight line per way (prefill_ms), its chunks left out past the job's budget by the worker's own
rule; made with `gpu`, it answers as a machine with a GPU does (cpu_decode, and a GPU prefill way)."""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPT = '''#!{python}
import json, os, sys

if sys.argv[1] == "-c":  # measure's check that this Python has lk_moe and numpy
    sys.exit(0)
job, threads = json.loads(sys.argv[-1]), int(os.environ["LK_THREADS"])
experts, top_k = job["experts"], job["top_k"]
if job.get("prefill"):
    from vllm_ds4x.measure.worker import prefill_skips  # the worker's rule, on the stand-in's own clock

    way, timed, skipped = job["prefill"]["path"], [], []
    if sys.argv[2] != MODULES[way]:  # the GPU way runs through the fork's hook
        sys.exit(f"the {{way}} prefill job ran as {{sys.argv[2]}}, not {{MODULES[way]}}")
    if way == "gpu" and not GPU:
        sys.exit("a GPU prefill job, and torch sees no GPU here")
    base, slope = PREFILL[way]
    left = job["prefill"]["budget_s"]
    for rows in sorted(job["prefill"]["chunks"]):
        if prefill_skips(timed, rows, left):
            skipped.append(rows)
            continue
        ms = (base + slope * rows) * (SPEED.get(threads, 1.0) if way == "cpu" else 1.0)
        left -= 3 * ms / 1000  # a warm-up and two timed calls
        timed.append({{"rows": rows, "ms": ms, "calls": 2}})
    engine = os.environ.get("LK_GPU_PREFILL_ENGINE") or "cutlass" if way == "gpu" else None
    print(json.dumps({{"threads": threads, "prefill": {{"path": way, "engine": engine, "how": way + " stand-in",
                                                     "rows": timed, "skipped": skipped}}}}))
    sys.exit(0)
cases = []
for tokens in job["tokens"]:
    distinct = experts * (1 - (1 - top_k / experts) ** tokens)  # a random routing's mean distinct experts
    ms = (MS_BASE + MS_PER_EXPERT * distinct) * SPEED.get(threads, 1.0)
    cases.append({{"tokens": tokens, "ms": ms, "calls": 9, "distinct": distinct, "repeats": [ms, ms, ms]}})
result = {{"threads": threads, "path": "cpu_decode" if GPU else "cpu_prefill", "cases": cases}}
if job.get("bandwidth"):
    result["ram_gbs"] = RAM_GBS
print(json.dumps(result))
'''
MS_BASE, MS_PER_EXPERT = 0.2, 0.1
"""a layer call's ms: a fixed part and one per distinct expert the tokens reach"""
SPEED = {2: 0.8}
"""LK_THREADS=2 a fifth faster than 1 (no thread count 1.5x the best: no warning)"""
RAM_GBS = 10.0
PREFILL = {"cpu": (2.0, 0.05), "gpu": (60.0, 0.005)}
"""a prefill layer call's ms by way: a fixed part and one per row (the CPU's cores against the GPU's PCIe
upload of the layer's experts and its compute); the GPU wins from 1290 rows, the 2048 chunk"""
MODULES = {"cpu": "vllm_ds4x.measure.worker", "gpu": "vllm_ds4x.hooks.prefill_timing"}
"""the module measure runs a prefill job of each way with"""


def stand_in(folder: Path, speed: dict[int, float] = SPEED, gpu: bool = False) -> Path:
    """The stand-in as an executable `python` in `folder` (`speed`: ms by LK_THREADS, as a share of 1 thread's;
    `gpu`: answer as a machine with a GPU)."""
    path = folder / "python"
    body = SCRIPT.format(python=sys.executable)
    constants = (f"MS_BASE, MS_PER_EXPERT, SPEED, RAM_GBS = {MS_BASE!r}, {MS_PER_EXPERT!r}, {speed!r}, {RAM_GBS!r}\n"
                 f"PREFILL, GPU, MODULES = {PREFILL!r}, {gpu!r}, {MODULES!r}\n")
    first, rest = body.split("\n", 1)
    path.write_text(f"{first}\n{constants}{rest}")
    path.chmod(0o755)
    return path


def ms(experts: int, top_k: int, tokens: int, threads: int, speed: dict[int, float] = SPEED) -> float:
    """What the stand-in answers for a token count."""
    distinct = experts * (1 - (1 - top_k / experts) ** tokens)
    return (MS_BASE + MS_PER_EXPERT * distinct) * speed.get(threads, 1.0)


def prefill_ms(way: str, rows: int, threads: int, speed: dict[int, float] = SPEED) -> float:
    """What the stand-in answers for a prefill chunk of `rows` one way (the CPU's at `threads`)."""
    base, slope = PREFILL[way]
    return (base + slope * rows) * (speed.get(threads, 1.0) if way == "cpu" else 1.0)
