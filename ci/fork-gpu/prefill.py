"""One engine of the prefill benchmark (ci/fork-gpu/prefill), in-process: DeepSeek-V4 (dsv4_model.py) with
every routed-expert layer on lk_moe, the user's --max-num-batched-tokens 8192 with chunked prefill, FULL
decode graphs, two requests at a time, no speculation.

Usage: prefill.py ARM OUTDIR MODELDIR   -> OUTDIR/prefill-ARM.json
  ARM names the run; the caller sets its environment (ci/fork-gpu/prefill): cpu
  (LVLLM_GPU_PREFILL_MIN_BATCH_SIZE=0, the user's), gpu (the fork's GPU prefill, lk_moe's cutlass
  engine), triton (LK_GPU_PREFILL_ENGINE=triton).

Each prompt of PREFILL_TOKENS tokens (default "4096 16384 65536"; seeded random tokens of the stand-in's
cycles, the same in every arm) runs alone after an unrecorded warm-up prompt: its time to first token
(from add_request to the step that returned it), prefill tok/s (prompt tokens over that time), the
seconds of each engine step until then, and PREFILL_CONTINUATION (32) greedy tokens after it, with their
decode tok/s and each token's logprob (PREFILL_LOGPROBS=0: not asked). Then (PREFILL_CONCURRENT, default 16384 prompt tokens; 0: skipped), after
an unrecorded round of the same with PREFILL_WARMUP prompt tokens (the first mixed steps compile kernels), one request decodes
alone for PREFILL_ALONE_STEPS steps, another with that many prompt tokens arrives, and the first one's
tokens until the second's first token give its decode tok/s while the other prefills. The JSON is
rewritten after every prompt, so a run cut short keeps what it measured. PREFILL_SPEC=2: DSpark with 2
draft tokens, as the user runs it (its draft layer on lk_moe, a GPU-prefill layer too; not yet run).
"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from e2e_model import ANSWER_CYCLE, REASONING_CYCLE
from harness import ENGINE, GRAPHS, Counters, dsv4_engine, gpu_fraction, write_json

ARM, OUTDIR, MODELS = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
LENGTHS = [int(n) for n in os.environ.get("PREFILL_TOKENS", "4096 16384 65536").split()]
CONTINUATION = int(os.environ.get("PREFILL_CONTINUATION", "32"))
CONCURRENT = int(os.environ.get("PREFILL_CONCURRENT", "16384"))
ALONE_STEPS = int(os.environ.get("PREFILL_ALONE_STEPS", "24"))
WARMUP = int(os.environ.get("PREFILL_WARMUP", "9000"))  # a full chunk and a partial one
BATCHED = 8192  # the user's --max-num-batched-tokens
GPU_GIB = float(os.environ.get("PREFILL_GPU_GIB", "40"))  # lk_moe's prefill arena is outside torch's pool
LOGPROBS = os.environ.get("PREFILL_LOGPROBS", "1") != "0"  # each greedy token's logprob: the arms' difference
SPEC = int(os.environ.get("PREFILL_SPEC", "0"))  # >0: DSpark with that many draft tokens, as the user runs it (K=2)
TOKENS = [*REASONING_CYCLE, *ANSWER_CYCLE]


def prompt(length: int, seed: int) -> list[int]:
    """`length` tokens of the stand-in's cycles, seeded: the same prompt in every arm."""
    rng = np.random.default_rng(seed)
    return [TOKENS[i] for i in rng.integers(0, len(TOKENS), length)]


def max_len() -> int:
    longest = max([*LENGTHS, CONCURRENT, WARMUP]) + CONTINUATION + 4096  # the concurrent decoder's tokens too
    return -(-longest // 256) * 256  # fp8_ds_mla's cache blocks are 256 tokens


def long_context(config: Path, length: int) -> None:
    """The stand-in's yarn rope covers original_max_position_embeddings x factor positions (4096 x 4): the
    fork's DeepSeek-V4 rope sizes its cache from them, so they are raised to cover `length` (the same
    config in every arm; yarn's factor and the other fields as dsv4_model.py wrote them)."""
    data = json.loads(config.read_text())
    factor = data["rope_scaling"]["factor"]
    original = max(data["rope_scaling"]["original_max_position_embeddings"], -(-length // factor // 4096) * 4096)
    data["rope_scaling"]["original_max_position_embeddings"] = original
    data["max_position_embeddings"] = original * factor
    config.write_text(json.dumps(data, indent=1))


def engine_args() -> dict:
    kw = {**{k: v for k, v in ENGINE.items() if k != "attention_config"}, **GRAPHS, **dsv4_engine(),
          "model": str(MODELS / "target"), "max_model_len": max_len(), "max_num_batched_tokens": BATCHED,
          "enable_chunked_prefill": True, "max_num_seqs": 2, "gpu_memory_utilization": gpu_fraction(GPU_GIB)}
    if SPEC:  # DSpark's draft layer on lk_moe too (dsv4_setup.sh: LVLLM_GPU_RESIDENT_DRAFT_LAYERS=0)
        kw["speculative_config"] = {"method": "dspark", "model": str(MODELS / "draft"), "num_speculative_tokens": SPEC,
                                    "draft_sample_method": "greedy"}
    return kw


def run(engine, ids: list[int], max_tokens: int, name: str) -> dict:
    """One request alone: time to first token, the engine steps until then, its tokens."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, logprobs=0 if LOGPROBS else None)
    start = time.perf_counter()
    engine.add_request(name, {"prompt_token_ids": ids}, params)
    steps, first, out = [], None, None
    while engine.has_unfinished_requests():
        t0 = time.perf_counter()
        for o in engine.step():
            out = o
        if first is None:
            steps.append(round(time.perf_counter() - t0, 4))
            if out is not None and out.outputs[0].token_ids:
                first = time.perf_counter()
    end = time.perf_counter()
    tokens = list(out.outputs[0].token_ids)
    ttft = first - start
    return {"prompt_tokens": len(ids), "ttft_s": round(ttft, 4), "prefill_tok_s": round(len(ids) / ttft, 1),
            "prefill_steps_s": steps, "tokens": tokens, "logprobs": token_logprobs(out.outputs[0]),
            "decode_tok_s": round((len(tokens) - 1) / (end - first), 2) if len(tokens) > 1 and end > first else None}


def token_logprobs(completion) -> list[float] | None:
    """Each greedy token's logprob, as vLLM reports it (None: not asked, or not given)."""
    chosen = getattr(completion, "logprobs", None)
    if not LOGPROBS or not chosen:
        return None
    try:
        return [round(float(step[t].logprob), 5) for t, step in zip(completion.token_ids, chosen)]
    except (KeyError, TypeError, AttributeError):
        return None


def concurrent(engine, length: int, tag: str = "") -> dict:
    """Request a decodes alone for ALONE_STEPS steps, then b (`length` prompt tokens, one token to make)
    arrives: a's decode tok/s alone, and while b prefills (from b's arrival to b's first token). a makes
    enough tokens to outlast b's prefill at 1024 prompt tokens a step, and both end by themselves."""
    from vllm import SamplingParams

    made: dict[str, int] = {}
    names: dict[str, str] = {}

    def add(name: str, ids: list[int], tokens: int) -> None:
        params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
        names[engine.add_request(name, {"prompt_token_ids": ids}, params) or name] = name
        names[name] = name

    def step() -> None:
        for o in engine.step():
            made[names.get(o.request_id, o.request_id)] = len(o.outputs[0].token_ids)

    a, b = f"{tag}a", f"{tag}b"
    add(a, prompt(512, 7), ALONE_STEPS + length // 1024 + 32)
    while not made.get(a):
        step()
    t0, a0 = time.perf_counter(), made[a]
    for _ in range(ALONE_STEPS):
        step()
    t1, a1 = time.perf_counter(), made[a]
    add(b, prompt(length, 8), 1)
    while not made.get(b):
        step()
    t2, a2 = time.perf_counter(), made[a]
    while engine.has_unfinished_requests():
        engine.step()
    return {"prompt_tokens": length, "alone_tok_s": round((a1 - a0) / (t1 - t0), 2),
            "while_prefill_tok_s": round((a2 - a1) / (t2 - t1), 2), "while_prefill_tokens": a2 - a1,
            "other_ttft_s": round(t2 - t1, 4)}


def main(result: dict) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    import dsv4_model
    import portable

    portable.install(Path(os.environ["DS4X_DSV4_OPS"]))
    dsv4_model.install_loader()
    counters = Counters(SPEC)
    managers = counters.install()
    import torch
    from vllm import LLM

    from vllm_ds4x.hooks import moe_prefill

    for model in ("target", "draft"):
        long_context(MODELS / model / "config.json", max_len())
    t0 = time.time()
    llm = LLM(**engine_args())
    engine = llm.llm_engine
    layers = engine.vllm_config.model_config.hf_config.num_hidden_layers
    result.update(init_s=round(time.time() - t0, 1), max_model_len=max_len(), max_num_batched_tokens=BATCHED,
                  moe_layers=portable.resident_summary(layers), kernels=dict(portable.SOURCES))
    lk = sys.modules.get("lk_moe")
    result["lk_moe_info"] = {"version": getattr(lk, "__version__", None),
                        "device_bytes": lk.get_device_mem_usage() if hasattr(lk, "get_device_mem_usage") else None}
    counters.reset()
    if WARMUP:
        run(engine, prompt(WARMUP, 1), 2, "warm-up")
    for length in LENGTHS:
        result["prompts"][str(length)] = run(engine, prompt(length, length), CONTINUATION, f"p{length}")
        print(f"prompt {length}: {result['prompts'][str(length)]['prefill_tok_s']} tok/s, ttft "
              f"{result['prompts'][str(length)]['ttft_s']} s", flush=True)
        write(result)
    if CONCURRENT:
        if WARMUP:  # unrecorded: the first steps that mix a decode with a prefill chunk compile kernels
            concurrent(engine, WARMUP, "warm-up-")
        result["concurrent"] = concurrent(engine, CONCURRENT)
        print("concurrent", result["concurrent"], flush=True)
    counted = counters.report(managers)
    result.update(calls=dict(moe_prefill.CALLS), lk_moe_calls=dict(counted["lk_moe"]),
                  decode_steps=counted["decode_steps"], replays=counted["replays"],
                  gpu_peak_bytes=torch.cuda.max_memory_allocated())


def write(result: dict) -> None:
    write_json(OUTDIR / f"prefill-{ARM}.json", result)


if __name__ == "__main__":
    start = time.time()
    result = {"arm": ARM, "ok": False, "lengths": LENGTHS, "continuation": CONTINUATION, "prompts": {},
              "concurrent_asked": CONCURRENT, "spec": SPEC,
              "env": {k: os.environ.get(k) for k in ("LVLLM_GPU_PREFILL_MIN_BATCH_SIZE", "LVLLM_GPU_PREFETCH_WINDOW",
                                                     "LK_GPU_PREFILL_ENGINE", "LK_THREADS")}}
    try:
        main(result)
        result["ok"] = True
    except BaseException as e:  # reported: the report fails an arm that did not finish
        import traceback

        traceback.print_exc()
        result["error"] = repr(e)[:2000]
    result["wall_s"] = round(time.time() - start, 1)
    write(result)
    print("RESULT", ARM, "ok" if result["ok"] else result["error"][:500], flush=True)
    os._exit(0)
