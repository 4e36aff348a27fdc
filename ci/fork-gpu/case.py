"""One GPU case of the patched fork, in-process so that CUDA graph replays can be
counted. Writes OUTDIR/CASE.json.

Usage: case.py CASE OUTDIR MODELROOT
  CASE = {dense,moe,dflash,dsv4}-{eager,fixed,phase12,phase02,adaptive,adaptivelow,phase02own,adaptiveown,av}[-v1]
  eager: no speculation, enforce_eager (the reference tokens). The others: FULL_DECODE_ONLY
  graphs, K=2, reasoning parser deepseek_r1, and the draft_depth policy named; model
  runner v2 with EAGLE (the user's runner: DSpark forces it), or with -v1 model runner v1
  with n-gram drafts. adaptivelow (v2): adaptive with each draft kept with probability
  LOW_KEEP (drafts.py), so acceptance is low and adaptive must verify fewer than K.
  A mode ending "own" (phase02own, adaptiveown; v2 only) is that policy with each request
  verifying its own depth in the batch's graph (named_policies.per_request_policies).
  av (TARGET=vllm, v2): no draft_depth; vLLM's own adaptive verification (enable_adaptive_verification,
  its online acceptance estimator: EAGLE and DFlash have no confidence head) sizes each step.
  dflash: a Qwen3 target with a random DFlash draft (DSpark's family; v2 only).
  dsv4: DeepSeek-V4 with a DSpark draft (dsv4_model.py), MXFP4 experts on lk_moe except the layers
  of LVLLM_GPU_RESIDENT_MOE_LAYERS (dsv4_setup.sh: DSV4_RESIDENT, default 0,1, on the GPU through
  the fork's Marlin MoE), the user's settings (harness.dsv4_engine: fp8_ds_mla KV, max-num-seqs 2) and
  reasoning parser deepseek_v4. The result names each MoE layer's placement (moe_layers).
  moe: the fork only (lk_moe); with DS4X_GPU_TARGET=vllm (upstream) the case fails by name.
Two requests reason (their prompt opens <think>) for 64 tokens, two answer (</think>
closed) for 24, in turn, so decode batches are mixed first (at max-num-seqs 2 too) and
reasoning-only after."""

import json
import os
import sys
import time
from pathlib import Path

from drafts import DraftFilter
from harness import EAGER, ENGINE, GRAPHS, LK_MOE, TARGET, Counters, dsv4_engine, spec_metrics

from vllm_ds4x.depth.named_policies import AV_CASE, by_case

CASE, OUTDIR, ROOT = sys.argv[1], sys.argv[2], sys.argv[3]
KIND, MODE, *RUNNER = CASE.split("-")
V1 = RUNNER == ["v1"]
K = 2
THINK, END_THINK = 1, 2
LOW_KEEP = 0.25
# Upstream gives DFlash's non-causal draft attention a backend of its own choosing unless one is named:
# FlashAttention, which the GPU image lacks; upstream's Triton attention, the target's here, runs it too.
DFLASH_ATTENTION = {"attention_backend": "TRITON_ATTN"} if TARGET == "vllm" else {}
# reasoning and answering in turn, so that batches of 2 (dsv4's max-num-seqs) mix phases too
TEXTS = [("Let me think about the file layout", 64, False), ("def add(a, b):", 24, True),
         ("for i in range(10):", 64, False), ("The answer is to call the tool", 24, True)]


def prompts(path: str) -> list:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path + "/target" if KIND == "dsv4" else path)
    out = []
    for text, _, answering in TEXTS:
        ids = tok(text)["input_ids"] + [THINK] + (tok(" plan")["input_ids"] + [END_THINK] if answering else [])
        out.append({"prompt_token_ids": ids})
    return out


def engine_args(path: str) -> dict:
    kw = {**ENGINE, "model": path, "max_model_len": 512, "max_num_seqs": 4, "max_num_batched_tokens": 512,
          "gpu_memory_utilization": 0.05}
    if KIND == "dsv4":  # the user's settings (dsv4_engine); DeepSeek-V4 picks its own attention
        kw = {**{k: v for k, v in kw.items() if k != "attention_config"}, **dsv4_engine(), "model": path + "/target"}
    if MODE == "eager":
        return {**kw, **EAGER}
    spec = ({"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 3, "prompt_lookup_min": 1} if V1
            else {"method": "dflash", "model": path + "_draft", "num_speculative_tokens": K, **DFLASH_ATTENTION}
            if KIND == "dflash"
            else {"method": "dspark", "model": path + "/draft", "num_speculative_tokens": K,
                  "draft_sample_method": "greedy"} if KIND == "dsv4"
            else {"method": "eagle", "model": path + "_eagle", "num_speculative_tokens": K})
    if MODE == AV_CASE:
        spec["enable_adaptive_verification"] = True
    elif (policy := by_case(MODE.removesuffix("low"), K).draft_depth) is not None:  # adaptivelow: adaptive at low acceptance
        spec["draft_depth"] = policy
    parser = "deepseek_v4" if KIND == "dsv4" else "deepseek_r1"
    return {**kw, **GRAPHS, "reasoning_parser": parser, "speculative_config": spec}


def run() -> dict:
    if KIND in ("moe", "dsv4") and not LK_MOE:
        raise RuntimeError(f"{CASE}: MoE cases put every expert on lk_moe, the fork's; not in target {TARGET}")
    if KIND == "dsv4":
        import portable
        from dsv4_model import install_loader

        portable.install(Path(os.environ["DS4X_DSV4_OPS"]))
        install_loader()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0" if V1 else "1"
    counters = Counters(K, V1)
    managers = counters.install()
    config = Path(ROOT) / KIND / ("target/config.json" if KIND == "dsv4" else "config.json")
    drafts = DraftFilter(vocab=json.loads(config.read_text())["vocab_size"])
    if MODE == "adaptivelow":
        drafts.set(default=LOW_KEEP)
        drafts.install()
    from vllm import LLM, SamplingParams

    path = os.path.join(ROOT, KIND)
    t0 = time.time()
    llm = LLM(**engine_args(path))
    init_s = time.time() - t0
    counters.reset()
    drafts.active = True
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for _, n, _ in TEXTS]
    t0 = time.time()
    outs = llm.generate(prompts(path), params, use_tqdm=False)
    generate_s = time.time() - t0
    return {"tokens": [list(o.outputs[0].token_ids) for o in outs], "init_s": round(init_s, 1),
            "generate_s": round(generate_s, 2), **counters.report(managers), "spec_metrics": spec_metrics(llm),
            **(kernel_sources(json.loads(config.read_text())["num_hidden_layers"]) if KIND == "dsv4" else {})}


def kernel_sources(layers: int) -> dict:
    """The kernels by source, and where each MoE layer ran (report.py counts the lk_moe ones)."""
    import portable

    placement = portable.resident_summary(layers)
    return {"kernels": dict(portable.SOURCES), "moe_layers": placement}


if __name__ == "__main__":
    t0 = time.time()
    try:
        result = {"ok": True, **run()}
    except BaseException as e:  # reported; the harness goes on with the next case
        import traceback

        traceback.print_exc()
        result = {"ok": False, "error": repr(e)[:2000]}
    result["wall_s"] = round(time.time() - t0, 1)
    with open(os.path.join(OUTDIR, CASE + ".json"), "w") as f:
        json.dump(result, f)
    print("RESULT", CASE, json.dumps({k: v for k, v in result.items() if k != "tokens"})[:2000], flush=True)
    os._exit(0)
