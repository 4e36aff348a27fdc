"""What case.py and e2e.py share: the engine settings of the kernel-free harness,
vLLM's spec-decode metrics, and counters of what a run of the patched fork did on
the GPU, in-process: CUDA graph replays per graph manager and query length, decode
steps replayed or eager, lk_moe calls (captured, or eager in prefill or in decode),
the drafter's graph replays by the query length of the target step they follow, and at
LVLLM_MOE_OVERLAP=ubatch the graphs captured as two micro-batches and the decode steps
that replayed one.
Counters.install() goes before the engine is made. DS4X_GPU_TARGET (setup.sh) names the
tree: lvllmds4-x (default) or vllm, upstream (0.32.0 or 0.34.0), which has no lk_moe to count."""

import json
import os
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

TARGET = os.environ.get("DS4X_GPU_TARGET", "lvllmds4-x")
LK_MOE = TARGET != "vllm"  # RoutedExperts._cpu_decode/_cpu_prefill: the fork's lk_moe paths

# Triton attention and native norms: the fork's compiled kernels are not here
ENGINE = {"dtype": "bfloat16", "seed": 0, "disable_log_stats": False, "enable_prefix_caching": False,
          "attention_config": {"backend": "TRITON_ATTN"},
          "kernel_config": {"ir_op_priority": {"rms_norm": ["native"], "fused_add_rms_norm": ["native"]}}}
DSV4_GPU_GIB = 14.0
"""GPU memory DeepSeek-V4's engine may use, on any card: what 0.1 of the H200 gave the committed runs
(two resident layers fit), where 0.1 of an H100 does not"""


def gpu_fraction(gib: float) -> float:
    """gpu_memory_utilization that leaves the engine `gib` of GPU 0 (nvidia-smi: no CUDA context made
    in this process before the engine's)."""
    out = subprocess.run(["nvidia-smi", "--id=0", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                         check=True, capture_output=True, text=True).stdout
    return round(gib * 1024 / float(out), 4)  # MiB


def dsv4_engine() -> dict:
    """DeepSeek-V4 + DSpark (dsv4_model.py) with the user's settings: fp8_ds_mla KV (its cache
    blocks are 256 tokens), two requests at a time, DSV4_GPU_GIB; weights made in the process."""
    return {"kv_cache_dtype": "fp8_ds_mla", "block_size": 256, "max_num_seqs": 2, "load_format": "dummy",
            "max_model_len": 1024, "max_num_batched_tokens": 1024, "gpu_memory_utilization": gpu_fraction(DSV4_GPU_GIB)}
EAGER = {"enforce_eager": True, "compilation_config": {"mode": 0, "custom_ops": ["none"]}}
GRAPHS = {"enforce_eager": False, "compilation_config": {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY",
                                                         "custom_ops": ["none"]}}


def spec_metrics(llm) -> dict:
    """vLLM's own vllm:spec_decode* metrics, labelled by depth and phase where they are."""
    out = {}
    for metric in llm.get_metrics():
        if metric.name.startswith("vllm:spec_decode"):
            label = ",".join(f"{k}={v}" for k, v in sorted(metric.labels.items()) if k in ("depth", "phase"))
            out[metric.name + (f"{{{label}}}" if label else "")] = getattr(metric, "value", None)
    return out


class Counters:
    def __init__(self, k: int, v1: bool = False) -> None:
        self.k, self.v1 = k, v1
        self.replays: dict[str, Counter] = defaultdict(Counter)
        self.decode_steps = {"graph": Counter(), "eager": Counter()}
        self.moe: Counter = Counter()
        self.drafter_after: Counter = Counter()  # drafter replays by the query length of the target step
        self.own_depth_steps: Counter = Counter()  # decode steps with a request below the batch's depth
        self.drafter_rested: Counter = Counter()  # decode steps whose drafter rested for every request
        self.drafter_rested_rows: Counter = Counter()  # ... for some requests (their rows masked)
        self.split_graphs: set[str] = set()  # t<tokens>:r<requests> captured as two micro-batches
        self.split_steps: Counter = Counter()  # decode steps that replayed a split graph, by query length
        self._replayed = False
        self._step: str | None = None  # query length of the running decode step; None: prefill or dummy

    def reset(self) -> None:
        """Start-up (dummy runs, capture) aside: count what requests do from here."""
        self.decode_steps = {"graph": Counter(), "eager": Counter()}
        self.drafter_after.clear()
        self.own_depth_steps.clear()
        self.drafter_rested.clear()
        self.drafter_rested_rows.clear()
        self.split_steps.clear()
        self.moe = Counter({k: v for k, v in self.moe.items() if "capturing" in k})

    def install(self) -> list:
        managers, MR = self.count_v1() if self.v1 else self.count_v2()
        execute = MR.GPUModelRunner.execute_model

        def execute_model(runner, scheduler_output, *a, **k):
            lengths = set(scheduler_output.num_scheduled_tokens.values())
            decode = (not k.get("dummy_run") and lengths and not scheduler_output.scheduled_new_reqs
                      and max(lengths) <= 1 + self.k)
            self._step = (str(next(iter(lengths))) if len(lengths) == 1 else "mixed") if decode else None
            self._replayed = False
            out = execute(runner, scheduler_output, *a, **k)
            if decode:
                self.decode_steps["graph" if self._replayed else "eager"][self._step] += 1
                if getattr(scheduler_output, "ds4x_verify_depths", None):  # verify "request": rows masked
                    self.own_depth_steps[self._step] += 1
                if resting := getattr(scheduler_output, "ds4x_resting_drafters", None):  # DSpark rests
                    whole = resting >= scheduler_output.num_scheduled_tokens.keys()
                    (self.drafter_rested if whole else self.drafter_rested_rows)[self._step] += 1
            return out

        MR.GPUModelRunner.execute_model = execute_model
        if LK_MOE:
            self.count_lk_moe()
            if not self.v1:
                self.count_splits()
        return managers

    def count_splits(self) -> None:
        """The fork's ubatch_split, as the model runner calls it (by module attribute):
        a capture it split, and a step whose graph it refreshed as split before replay."""
        from vllm_ds4x.hooks import ubatch_split as US

        capture, refresh = US.capture_split, US.refresh

        def capture_split(vllm_config, desc, *a, **k):
            split = capture(vllm_config, desc, *a, **k)
            if split is not None:
                self.split_graphs.add(f"t{desc.num_tokens}:r{desc.num_reqs}")
            return split

        def refreshed(vllm_config, desc, *a):
            if self._step is not None and US.parts_for(vllm_config, desc) is not None:
                self.split_steps[self._step] += 1
            return refresh(vllm_config, desc, *a)

        US.capture_split, US.refresh = capture_split, refreshed

    def count_lk_moe(self) -> None:
        import torch
        from vllm.model_executor.layers.fused_moe import routed_experts as RE

        for name in ("_cpu_decode", "_cpu_prefill", "_gpu_prefill"):
            original = getattr(RE.RoutedExperts, name)

            def counted(experts, *a, _name=name, _original=original, **k):
                where = ("capturing" if torch.cuda.is_current_stream_capturing()
                         else "decode" if self._step is not None else "prefill")
                self.moe[f"{_name} ({where})"] += 1
                return _original(experts, *a, **k)

            setattr(RE.RoutedExperts, name, counted)

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
            target = isinstance(mgr, CU.ModelCudaGraphManager)
            self._replayed |= target
            if not target and self._step is not None:
                self.drafter_after[self._step] += 1
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

    def report(self, managers: list) -> dict:
        return {"graphs": graph_keys(managers), "replays": self.replays, "decode_steps": self.decode_steps,
                "lk_moe": self.moe, "drafter_after": self.drafter_after, "own_depth_steps": self.own_depth_steps,
                "drafter_rested": self.drafter_rested, "drafter_rested_rows": self.drafter_rested_rows,
                "ubatch": {"level": os.environ.get("LVLLM_MOE_OVERLAP") or "off",
                           "tokens": os.environ.get("LVLLM_MOE_UBATCH_TOKENS") or "1",
                           "split_graphs": sorted(self.split_graphs), "split_steps": self.split_steps}}


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


def write_json(path: Path, result: dict) -> None:
    """`result` to `path` whole or not at all (a run cut short keeps its last complete file)."""
    path.with_suffix(".tmp").write_text(json.dumps(result))
    path.with_suffix(".tmp").replace(path)
