"""End to end on CPU: the patched vLLM engine, a tiny random reasoning model,
n-gram speculation with K_max=2 and the phase policy (1/2, then 0/2), and the
same prompts without speculation. Each engine runs three batches: reasoning
requests alone, answer requests alone, then all four together (one verify
depth for the batch: the deepest chosen). check() returns, per engine, the
greedy tokens of each batch and the engine's own spec-decode metrics (run by
checks.py --e2e).
"""

import gc
import os
from typing import Any

# The engine core in this process, not a spawned one, and no torch.compile
# (enforce_eager leaves vLLM's own compiled samplers on): each would cost
# minutes (an import, C++ builds) on a small CI machine, and neither is what
# these runs check.
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ["TORCHDYNAMO_DISABLE"] = "1"

from engine.policies import POLICIES

PROMPTS = {
    # reasoning: the prompt opened <think> and never closed it
    "reasoning-1": "def add(a, b):\n    return a + b\ndef add(a, b):\n<think>",
    "reasoning-2": "Let me think about the file layout. Let me think about<think>",
    # answer: the section is already closed (a template with thinking off does this)
    "answer-1": "for i in range(10):\n    print(i)\n<think></think>for i in range(10):\n",
    "answer-2": "The answer is to call the tool.<think>plan</think>The answer is to call",
}
BATCHES = {"reasoning": ["reasoning-1", "reasoning-2"], "answer": ["answer-1", "answer-2"], "mixed": list(PROMPTS)}
NGRAM = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
ENGINES = {"plain": None, **{name: {**NGRAM, "draft_depth": POLICIES[name]} for name in ("phase 1/2", "phase 0/2")}}


def once_per_process() -> None:
    """vLLM 0.32's CPU platform registers its Triton kernel overrides at every
    engine start, scanning every loaded module; an n-gram engine has loaded
    numba, whose llvmlite wrappers break that scan. The overrides are
    process-wide, so after the first engine they are kept and not redone (a
    server runs one engine per process and never meets this)."""
    from vllm.platforms import current_platform

    if hasattr(current_platform, "register_triton_kernel_overrides"):
        current_platform.register_triton_kernel_overrides = lambda: None


def run(model: str, speculative: dict[str, Any] | None) -> tuple[dict[str, list[int]], dict[str, Any]]:
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, dtype="bfloat16", max_model_len=512, seed=0, kv_cache_memory_bytes=256 << 20,
              enforce_eager=True, gpu_memory_utilization=0.05, disable_log_stats=False, reasoning_parser="deepseek_r1",
              speculative_config=speculative, max_num_seqs=8)
    once_per_process()
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    tokens = {}
    for batch, names in BATCHES.items():
        outputs = llm.generate([PROMPTS[n] for n in names], params, use_tqdm=False)
        tokens.update({f"{batch}:{name}": list(out.outputs[0].token_ids) for name, out in zip(names, outputs)})
    metrics: dict[str, Any] = {}
    for metric in llm.get_metrics():
        if metric.name.startswith("vllm:spec_decode"):
            label = ",".join(f"{k}={v}" for k, v in sorted(metric.labels.items()) if k in ("phase", "depth", "position"))
            metrics[f"{metric.name}{{{label}}}"] = getattr(metric, "value", None)
    del llm
    gc.collect()
    return tokens, metrics


def start_both(model: str) -> dict[str, Any]:
    """An engine asked for draft_depth and vLLM's enable_adaptive_verification together, started as
    `vllm serve` or LLM() start one: {"error": its type and message}, {"started": True} if it starts,
    or {"skipped": why} in a vLLM without adaptive verification (the fork)."""
    from vllm import LLM
    from vllm.config import SpeculativeConfig

    if not hasattr(SpeculativeConfig, "enable_adaptive_verification"):
        return {"skipped": "this vLLM has no enable_adaptive_verification"}
    both = {**NGRAM, "enable_adaptive_verification": True, "draft_depth": POLICIES["phase 1/2"]}
    try:
        LLM(model=model, dtype="bfloat16", max_model_len=512, enforce_eager=True, kv_cache_memory_bytes=256 << 20,
            speculative_config=both)
    except Exception as e:  # the error is what is checked, whatever its type
        return {"error": f"{type(e).__name__}: {e}"}
    return {"started": True}


def check(model: str) -> dict[str, Any]:
    runs = {}
    for name, speculative in ENGINES.items():
        tokens, metrics = run(model, speculative)
        runs[name] = {"tokens": tokens, "metrics": metrics}
    return runs
