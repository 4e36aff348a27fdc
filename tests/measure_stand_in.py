"""measure's timing worker stood in, for the tests of `plan --measure` that check what measure does
with a curve (the sweep, the advice, the profile) rather than what a machine's clock says: given as
--python, it answers measure's lk_moe check and each `-m vllm_ds4x.measure.worker --worker JOB` with
a curve computed from the job alone, so that it is the same on any machine, however busy."""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPT = '''#!{python}
import json, os, sys

if sys.argv[1] == "-c":  # measure's check that this Python has lk_moe and numpy
    sys.exit(0)
job, threads = json.loads(sys.argv[-1]), int(os.environ["LK_THREADS"])
experts, top_k = job["experts"], job["top_k"]
cases = []
for tokens in job["tokens"]:
    distinct = experts * (1 - (1 - top_k / experts) ** tokens)  # a random routing's mean distinct experts
    ms = (MS_BASE + MS_PER_EXPERT * distinct) * SPEED.get(threads, 1.0)
    cases.append({{"tokens": tokens, "ms": ms, "calls": 9, "distinct": distinct, "repeats": [ms, ms, ms]}})
result = {{"threads": threads, "path": "cpu_prefill", "cases": cases}}
if job.get("bandwidth"):
    result["ram_gbs"] = RAM_GBS
print(json.dumps(result))
'''
MS_BASE, MS_PER_EXPERT = 0.2, 0.1
"""a layer call's ms: a fixed part and one per distinct expert the tokens reach"""
SPEED = {2: 0.8}
"""LK_THREADS=2 a fifth faster than 1 (no thread count 1.5x the best: no warning)"""
RAM_GBS = 10.0


def stand_in(folder: Path, speed: dict[int, float] = SPEED) -> Path:
    """The stand-in as an executable `python` in `folder` (`speed`: ms by LK_THREADS, as a share of 1 thread's)."""
    path = folder / "python"
    body = SCRIPT.format(python=sys.executable)
    constants = f"MS_BASE, MS_PER_EXPERT, SPEED, RAM_GBS = {MS_BASE!r}, {MS_PER_EXPERT!r}, {speed!r}, {RAM_GBS!r}\n"
    first, rest = body.split("\n", 1)
    path.write_text(f"{first}\n{constants}{rest}")
    path.chmod(0o755)
    return path


def ms(experts: int, top_k: int, tokens: int, threads: int, speed: dict[int, float] = SPEED) -> float:
    """What the stand-in answers for a token count."""
    distinct = experts * (1 - (1 - top_k / experts) ** tokens)
    return (MS_BASE + MS_PER_EXPERT * distinct) * speed.get(threads, 1.0)
