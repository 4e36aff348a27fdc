"""One GPU case of the patched fork, in-process so that CUDA graph replays can be
counted. Writes OUTDIR/CASE.json.

Usage: case.py CASE OUTDIR MODELROOT
  CASE = {dense,moe}-{eager,fixed,phase12,phase02,adaptive}[-v1]
  eager: no speculation, enforce_eager (the reference tokens). The others: FULL_DECODE_ONLY
  graphs, K=2, reasoning parser deepseek_r1, and the draft_depth policy named; model
  runner v2 with EAGLE (the user's runner: DSpark forces it), or with -v1 model runner v1
  with n-gram drafts.
Two requests reason (their prompt opens <think>) for 64 tokens, two answer (</think>
closed) for 24, so decode batches are mixed first and reasoning-only after."""

import json
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.engine.policies import POLICIES

CASE, OUTDIR, ROOT = sys.argv[1], sys.argv[2], sys.argv[3]
KIND, MODE, *RUNNER = CASE.split("-")
V1 = RUNNER == ["v1"]
K = 2
THINK, END_THINK = 1, 2
TEXTS = [("Let me think about the file layout", 64, False), ("for i in range(10):", 64, False),
         ("def add(a, b):", 24, True), ("The answer is to call the tool", 24, True)]


class Counters:
    """Replays per graph manager and query length; decode steps by query length, in a graph or eager."""

    def __init__(self) -> None:
        self.replays: dict[str, Counter] = defaultdict(Counter)
        self.decode_steps = {"graph": Counter(), "eager": Counter()}
        self.moe = Counter()
        self._replayed = False

    def install(self) -> list:
        import torch
        from vllm.model_executor.layers.fused_moe import routed_experts as RE

        if V1:
            managers, MR = self.count_v1()
        else:
            managers, MR = self.count_v2()
        execute = MR.GPUModelRunner.execute_model

        def execute_model(runner, scheduler_output, *a, **k):
            lengths = set(scheduler_output.num_scheduled_tokens.values())
            decode = (not k.get("dummy_run") and lengths and not scheduler_output.scheduled_new_reqs
                      and max(lengths) <= 1 + K)
            self._replayed = False
            out = execute(runner, scheduler_output, *a, **k)
            if decode:
                key = str(lengths.pop()) if len(lengths) == 1 else "mixed"
                self.decode_steps["graph" if self._replayed else "eager"][key] += 1
            return out

        MR.GPUModelRunner.execute_model = execute_model
        for name in ("_cpu_decode", "_cpu_prefill"):
            original = getattr(RE.RoutedExperts, name)

            def counted(experts, *a, _name=name, _original=original, **k):
                capturing = torch.cuda.is_current_stream_capturing()
                self.moe[_name + (" (capturing)" if capturing else "")] += 1
                return _original(experts, *a, **k)

            setattr(RE.RoutedExperts, name, counted)
        return managers


    def count_v2(self) -> tuple[list, object]:
        """Replays through v2's graph managers (target, drafter prefill, drafter)."""
        from vllm.v1.worker.gpu import cudagraph_utils as CU
        from vllm.v1.worker.gpu import model_runner as MR

        managers: list = []
        init, run_full = CU.CudaGraphManager.__init__, CU.CudaGraphManager.run_fullgraph

        def manager_init(mgr, *a, **k):
            init(mgr, *a, **k)
            managers.append(mgr)

        def run_fullgraph(mgr, desc):
            self.replays[type(mgr).__name__][str(desc.uniform_token_count)] += 1
            self._replayed |= isinstance(mgr, CU.ModelCudaGraphManager)
            return run_full(mgr, desc)

        CU.CudaGraphManager.__init__, CU.CudaGraphManager.run_fullgraph = manager_init, run_fullgraph
        return managers, MR

    def count_v1(self) -> tuple[list, object]:
        """v1 (n-gram drafts on the CPU): every CUDA graph replay is the target's,
        counted by the query length of the batch descriptor it was dispatched for."""
        import torch
        from vllm import forward_context as FC
        from vllm.v1 import cudagraph_dispatcher as CD
        from vllm.v1.worker import gpu_model_runner as MR

        dispatchers: list = []
        init, replay = CD.CudagraphDispatcher.__init__, torch.cuda.CUDAGraph.replay

        def dispatcher_init(disp, *a, **k):
            init(disp, *a, **k)
            dispatchers.append(disp)

        def counted_replay(graph, *a, **k):
            desc = FC.get_forward_context().batch_descriptor if FC.is_forward_context_available() else None
            length = desc.num_tokens // desc.num_reqs if desc and desc.uniform and desc.num_reqs else "mixed"
            self.replays["CudagraphDispatcher"][str(length)] += 1
            self._replayed = True
            return replay(graph, *a, **k)

        CD.CudagraphDispatcher.__init__, torch.cuda.CUDAGraph.replay = dispatcher_init, counted_replay
        return dispatchers, MR


def graph_keys(graph_tables: list) -> dict:
    """The full decode graphs of each v2 manager or v1 dispatcher, as t<tokens>:r<requests>:q<query length>."""
    from vllm.config import CUDAGraphMode

    out = {}
    for table in graph_tables:
        descs = table.graphs if hasattr(table, "graphs") else table.cudagraph_keys[CUDAGraphMode.FULL]
        out[type(table).__name__] = sorted(
            f"t{d.num_tokens}:r{d.num_reqs}:q{getattr(d, 'uniform_token_count', None) or d.num_tokens // d.num_reqs}"
            for d in descs)
    return out


def prompts(path: str) -> list:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    out = []
    for text, _, answering in TEXTS:
        ids = tok(text)["input_ids"] + [THINK] + (tok(" plan")["input_ids"] + [END_THINK] if answering else [])
        out.append({"prompt_token_ids": ids})
    return out


def engine_args(path: str) -> dict:
    kw = {"model": path, "dtype": "bfloat16", "max_model_len": 512, "max_num_seqs": 4, "max_num_batched_tokens": 512,
          "gpu_memory_utilization": 0.05, "seed": 0, "disable_log_stats": False, "enable_prefix_caching": False,
          "attention_config": {"backend": "TRITON_ATTN"},
          "kernel_config": {"ir_op_priority": {"rms_norm": ["native"], "fused_add_rms_norm": ["native"]}}}
    if MODE == "eager":
        return {**kw, "enforce_eager": True, "compilation_config": {"mode": 0, "custom_ops": ["none"]}}
    spec = ({"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 3, "prompt_lookup_min": 1} if V1
            else {"method": "eagle", "model": path + "_eagle", "num_speculative_tokens": K})
    policy = POLICIES[{"phase12": "phase 1/2", "phase02": "phase 0/2"}.get(MODE, MODE)]
    if policy is not None:
        spec["draft_depth"] = policy
    return {**kw, "enforce_eager": False, "reasoning_parser": "deepseek_r1", "speculative_config": spec,
            "compilation_config": {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY", "custom_ops": ["none"]}}


def run() -> dict:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0" if V1 else "1"
    counters = Counters()
    managers = counters.install()
    from vllm import LLM, SamplingParams

    path = os.path.join(ROOT, KIND)
    t0 = time.time()
    llm = LLM(**engine_args(path))
    init_s = time.time() - t0
    counters.decode_steps = {"graph": Counter(), "eager": Counter()}  # start-up dummy runs aside
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for _, n, _ in TEXTS]
    t0 = time.time()
    outs = llm.generate(prompts(path), params, use_tqdm=False)
    metrics = {}
    for metric in llm.get_metrics():
        if metric.name.startswith("vllm:spec_decode"):
            label = ",".join(f"{k}={v}" for k, v in sorted(metric.labels.items()) if k in ("depth", "phase"))
            metrics[metric.name + (f"{{{label}}}" if label else "")] = getattr(metric, "value", None)
    return {
        "tokens": [list(o.outputs[0].token_ids) for o in outs],
        "init_s": round(init_s, 1), "generate_s": round(time.time() - t0, 2),
        "graphs": graph_keys(managers),
        "replays": counters.replays, "decode_steps": counters.decode_steps, "lk_moe": counters.moe,
        "spec_metrics": metrics,
    }


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
