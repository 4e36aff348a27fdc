"""Before spending GPU time: on a machine without a GPU, import what the harness imports from a
prepared tree (setup.sh's layout) with the CUDA platform forced, and take each case's LLM(...)
arguments through vLLM's own LLM.__init__ up to the engine. NVML and the device queries made at
import answer as an H200 would; nothing runs on a device.

Usage, from the checkout root (a Python with torch, e.g. the CPU engine venv; the checkout last on
PYTHONPATH for the engine package, as setup.sh puts it):
  PYTHONPATH=FORK:FSITE:SITE:$PWD DS4X_GPU_TARGET=vllm python ci/fork-gpu/cpu_check.py MODELROOT [CASES...]
MODELROOT: tiny_models.py's output. Exit 1 if any import or case fails.
With LVLLM_MOE_OVERLAP=ubatch, each v2 case with graphs also shows how its decode graphs split into
two micro-batches and the micro-batch builders' token budget (vllm_ds4x.hooks.ubatch_split)."""

import importlib
import importlib.util
import inspect
import os
import sys
import traceback
import types
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
MODULES = [
    "vllm.v1.worker.gpu.model_runner", "vllm.v1.worker.gpu.cudagraph_utils",
    "vllm.v1.worker.gpu.spec_decode.eagle.utils", "vllm.v1.worker.gpu.spec_decode.eagle.speculator",
    "vllm.v1.worker.gpu.spec_decode.dflash.utils", "vllm.v1.worker.gpu.spec_decode.dflash.speculator",
    "vllm.v1.worker.gpu_worker",
    "vllm.model_executor.warmup.kernel_warmup", "vllm.v1.attention.backends.triton_attn",
    "vllm.model_executor.models.qwen2", "vllm.model_executor.models.llama_eagle",
    "vllm.model_executor.models.qwen3_dflash", "vllm.reasoning.deepseek_r1_reasoning_parser",
    "vllm.entrypoints.llm", "vllm_ds4x.hooks.decode_graphs", "vllm.model_executor.layers.fused_moe.runner.moe_runner",
    "vllm.v1.worker.gpu.attn_utils", "vllm.v1.worker.gpu.model_states.default",
    "vllm.model_executor.layers.fused_moe.modular_kernel", "vllm.model_executor.layers.fused_moe.routed_experts"]
FORK = os.environ.get("DS4X_GPU_TARGET", "lvllmds4-x") != "vllm"
# the fork's own hooks (vllm_ds4x.hooks), or upstream's EAGLE drafter base, which our graph patch hooks
MODULES += (["vllm_ds4x.hooks.moe_overlap", "vllm_ds4x.hooks.ubatch_overlap", "vllm_ds4x.hooks.ubatch_split"] if FORK
            else ["vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator"])
# model runner v1 and n-gram drafts: the fork and upstream 0.32.0 (0.34.0 removed them)
V1_MODULES = ["vllm.v1.worker.gpu_model_runner", "vllm.v1.cudagraph_dispatcher", "vllm.v1.spec_decode.ngram_proposer"]
CASES = ["dense-eager", "dense-fixed", "dense-phase12", "dense-phase02", "dense-adaptive", "dense-eager-v1",
         "dense-fixed-v1", "dense-phase12-v1", "dense-phase02-v1", "dense-adaptive-v1", "dflash-fixed",
         "dflash-adaptivelow"]


def force_cuda_platform() -> None:
    props = types.SimpleNamespace(major=9, minor=0, name="NVIDIA H200", total_memory=143771 << 20,
                                  multi_processor_count=132, L2_cache_size=60 << 20, warp_size=32)
    torch.cuda.get_device_capability = lambda device=None: (9, 0)
    torch.cuda.get_device_properties = lambda device=None: props
    torch.cuda.get_device_name = lambda device=None: props.name
    torch.cuda.device_count = lambda: 1
    torch.cuda.is_available = lambda: True
    import vllm.platforms as P
    from vllm.platforms.cuda import CudaPlatform  # imports the _C_stable_libtorch stand-in
    from vllm.platforms.interface import DeviceCapability

    CudaPlatform.get_device_capability = classmethod(lambda cls, device_id=0: DeviceCapability(9, 0))
    CudaPlatform.get_device_name = classmethod(lambda cls, device_id=0: props.name)
    P.current_platform = CudaPlatform()


def check_imports() -> int:
    bad = 0
    import vllm
    from packaging.version import Version

    has_v1 = FORK or Version(vllm.__version__).release < (0, 34)
    for name in MODULES + (V1_MODULES if has_v1 else []):
        try:
            importlib.import_module(name)
        except Exception as e:
            bad += 1
            traceback.print_exc(limit=-3)
            print("FAIL import", name, repr(e)[:300])
    if not bad:
        from vllm.model_executor.warmup import kernel_warmup
        from vllm.v1.worker.gpu.spec_decode.eagle import utils
        for fn in (utils.load_eagle_model, kernel_warmup.kernel_warmup):  # prepare_fork.py's guards
            if "ds4x GPU harness" not in inspect.getsource(fn):
                bad += 1
                print("FAIL not guarded:", fn.__qualname__)
    print(f"imports: {len(MODULES) + len(V1_MODULES) * has_v1} modules, {bad} failed")
    return bad


def check_ubatch(c, query_lens: list[int]) -> int:
    """At LVLLM_MOE_OVERLAP=ubatch: the case's decode graphs as ubatch_split splits them (every
    request count its FULL graphs may have), and the extra builders' config; 1 if a v2 case with
    FULL graphs and two or more requests would not split."""
    from vllm.config.compilation import CUDAGraphMode

    from vllm_ds4x.hooks import moe_overlap, ubatch_split

    if moe_overlap.level() != "ubatch":
        return 0
    wanted = ubatch_split.wanted(c)
    budget = ubatch_split.micro_batch_config(c).scheduler_config.max_num_batched_tokens
    full = c.compilation_config.cudagraph_mode.decode_mode() == CUDAGraphMode.FULL
    splits = []
    for q in query_lens:
        for r in range(1, c.scheduler_config.max_num_seqs + 1):
            desc = types.SimpleNamespace(cg_mode=CUDAGraphMode.FULL, num_tokens=q * r, num_reqs=r,
                                         uniform_token_count=q)
            parts = ubatch_split.parts_for(c, desc)
            splits.append(f"q{q}x{r}:" + ("whole" if parts is None else
                          "+".join(str(p.micro.num_reqs) for p in parts)))
    print("     ubatch", "wanted" if wanted else "not wanted", "builder budget", budget, " ".join(splits))
    expect = bool(c.use_v2_model_runner) and full and c.scheduler_config.max_num_seqs >= 2
    return 1 if expect and not wanted else 0


class _Stream:  # a CUDA stream's (and event's) stand-in: ubatch_split's threads only queue on it
    def wait_event(self, event) -> None: ...
    def wait_stream(self, stream) -> None: ...
    def record(self, stream=None) -> None: ...


def _fake_cuda(stream: _Stream) -> dict:
    """torch.cuda's stream calls made harmless for run_split's threads; returns what to restore."""
    import contextlib

    from vllm.v1.worker import ubatching

    saved = {n: getattr(torch.cuda, n) for n in ("current_stream", "set_stream", "stream", "set_device",
                                                 "current_device", "current_blas_handle", "Event")}
    saved["torch.Event"], saved["ubatching"] = torch.Event, ubatching.current_stream
    torch.cuda.current_stream = lambda *a, **k: stream
    torch.cuda.set_stream = torch.cuda.set_device = torch.cuda.current_blas_handle = lambda *a, **k: None
    torch.cuda.stream = lambda s: contextlib.nullcontext()
    torch.cuda.current_device = lambda: 0
    torch.Event = torch.cuda.Event = lambda *a, **k: _Stream()
    ubatching.current_stream = lambda: stream
    return saved


def _split_once(fail_at: int | None) -> tuple[list, object]:
    """run_split over a model of 3 layers, each calling moe_overlap.cpu_decode as the hooked
    MoERunner does (which yields to the other micro-batch); lk_moe's call is logged."""
    from vllm import forward_context as fc
    from vllm.v1.worker.ubatching import dbo_current_ubatch_id

    from vllm_ds4x.hooks import moe_overlap, ubatch_split
    from vllm_ds4x.moe import overlap_plan

    log: list = []

    def lk_cpu_decode(hidden, weights, ids, row_offset=0, convert=True):
        log.append(("lk", dbo_current_ubatch_id(), row_offset, convert))
        return hidden.float()

    runner = types.SimpleNamespace(shared_experts=None,
                                   routed_experts=types.SimpleNamespace(_cpu_decode=lk_cpu_decode))

    def model(input_ids, positions):
        for layer in range(3):
            ctx = fc.get_forward_context()
            log.append((dbo_current_ubatch_id(), layer, ubatch_split.token_offset(), ctx.attn_metadata["x"]))
            if fail_at == layer and dbo_current_ubatch_id() == 1:
                raise ValueError("boom")
            moe_overlap.cpu_decode(runner, input_ids.to(torch.bfloat16), positions, positions, None)
        return input_ids.float() * 10 + positions

    a, b = overlap_plan.split_uniform(3, 2)
    parts = (ubatch_split.Part(0, a, 2), ubatch_split.Part(1, b, 2))
    step = ubatch_split.SplitStep(parts=parts, attn_metadata=[{"x": "A"}, {"x": "B"}], slot_mappings=[{}, {}])
    inputs = {"input_ids": torch.arange(6), "positions": torch.arange(100, 106)}
    with fc.override_forward_context(fc.ForwardContext(no_compile_layers={}, attn_metadata={}, slot_mapping={})):
        try:
            return log, ubatch_split.run_split(model, inputs, step)
        except RuntimeError as e:
            return log, e


def check_split_threads() -> int:
    """ubatch_split.run_split with vLLM's own UBatchContext on the CPU: micro-batches take turns at
    every yield, each sees its own metadata and token offset, outputs join in token order, and a
    failing micro-batch raises in the caller instead of hanging."""
    from vllm.v1.worker import ubatching

    from vllm_ds4x.hooks import moe_overlap

    stream = _Stream()
    saved = _fake_cuda(stream)
    moe_overlap._side, level = stream, moe_overlap._level
    moe_overlap._level = "ubatch"
    try:
        log, out = _split_once(None)
        _, err = _split_once(1)
    finally:
        torch.Event, ubatching.current_stream = saved.pop("torch.Event"), saved.pop("ubatching")
        for name, value in saved.items():
            setattr(torch.cuda, name, value)
        moe_overlap._side, moe_overlap._level = None, level
    want = [x for layer in range(3) for u in (0, 1)
            for x in ((u, layer, (0, 4)[u], "AB"[u]), ("lk", u, (0, 4)[u], False))]
    ok = (log == want and isinstance(out, torch.Tensor) and out.tolist() == [100.0 + 11 * i for i in range(6)]
          and isinstance(err, RuntimeError) and isinstance(err.__cause__, ValueError))
    print("ok  " if ok else "FAIL", "split threads: turns", log == want, "output", out if not ok else "joined",
          "failure", repr(err)[:80])
    return 0 if ok else 1


def check_micro_batch_metadata(c) -> int:
    """The case's Triton attention builders on the CPU through the hooked build_attn_metadata: three
    builders, the extra two at the decode budget; each micro-batch built by its own builder from
    views of the batch's buffers (the second with its rebased query_start_loc)."""
    from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
    from vllm.v1.worker.utils import AttentionGroup

    from vllm_ds4x.hooks import ubatch_split

    m, cpu = c.model_config, torch.device("cpu")
    spec = FullAttentionSpec(block_size=16, num_kv_heads=m.get_num_kv_heads(c.parallel_config),
                             head_size=m.get_head_size(), dtype=torch.bfloat16)
    group = AttentionGroup(TritonAttentionBackend, ["l0"], spec, 0)
    group.create_metadata_builders(vllm_config=c, device=cpu, num_metadata_builders=1)
    ubatch_split.add_builders(group, c, cpu, None)
    r, q = 3, 2
    desc = types.SimpleNamespace(cg_mode=c.compilation_config.cudagraph_mode.decode_mode(), num_tokens=r * q,
                                 num_reqs=r, uniform_token_count=q)
    parts = ubatch_split.parts_for(c, desc) or ()
    qsl = torch.arange(0, (r + 1) * q, q, dtype=torch.int32)
    seq_lens, slots = torch.tensor([50, 60, 70], dtype=torch.int32), torch.arange(r * q).view(1, -1)
    kw = {"attn_groups": [[group]], "num_reqs": r, "num_tokens": r * q, "query_start_loc_gpu": qsl,
          "query_start_loc_cpu": qsl.clone(), "max_query_len": q, "seq_lens": seq_lens, "max_seq_len": 70,
          "block_tables": (torch.zeros(r, 4, dtype=torch.int32),), "slot_mappings": slots,
          "kv_cache_config": types.SimpleNamespace(kv_cache_groups=[None]), "positions": torch.arange(r * q)}
    built = [build_attn_metadata(**kw, micro_batch=p)["l0"] for p in parts]
    builders = group.metadata_builders
    ok = (len(parts) == 2 and len(builders) == 3 and len(built) == 2
          and [b.softmax_segm_output is x.softmax_segm_output for b, x in zip(builders[1:], built, strict=True)] == [True] * 2
          and built[0].query_start_loc.data_ptr() == qsl.data_ptr() and built[1].query_start_loc.tolist() == [0, q]
          and built[1].seq_lens.tolist() == [70] and built[1].seq_lens.data_ptr() == seq_lens[2:].data_ptr()
          and built[1].slot_mapping.tolist() == [4, 5] and built[1].num_actual_tokens == q)
    budgets = [b.vllm_config.scheduler_config.max_num_batched_tokens for b in builders]
    print("ok  " if ok else "FAIL", "micro-batch metadata: builders", len(builders), "budgets", budgets,
          "second micro-batch qsl", built[1].query_start_loc.tolist() if len(built) == 2 else None)
    return 0 if ok else 1


class Made(Exception):
    pass


def markers(c) -> bool:
    """The phase tracker's markers, as the scheduler makes them from the case's reasoning parser."""
    from vllm_ds4x.hooks.spec_scheduling import phase_tracker

    tracker = phase_tracker(c)
    print("     phase markers: start", tracker.start if tracker else None, "end", tracker.end if tracker else None)
    return bool(tracker and tracker.start and tracker.end)


def check_case(case: str, root: str) -> int:
    """The case's VllmConfig, as LLM(...) builds it, or the error that stops it."""
    from vllm.v1.engine import llm_engine

    from vllm_ds4x.hooks.decode_graphs import decode_query_lens

    def stop(self, vllm_config, *a, **k):
        raise Made(vllm_config)

    llm_engine.LLMEngine.__init__ = stop
    sys.argv = ["case.py", case, "/tmp", root]
    spec = importlib.util.spec_from_file_location("case_" + case.replace("-", "_"), HERE / "case.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0" if mod.V1 else "1"
    from vllm import LLM

    try:
        LLM(**mod.engine_args(os.path.join(root, mod.KIND)))
    except Made as made:
        c = made.args[0]
        k = c.speculative_config.num_speculative_tokens if c.speculative_config else 0
        lens = decode_query_lens(c, 1 + k)
        runner = "v2" if getattr(c, "use_v2_model_runner", True) else "v1"  # 0.34.0 has v2 only
        draft = c.speculative_config
        print("ok  ", case, runner, c.compilation_config.cudagraph_mode.name,
              getattr(c.attention_config.backend, "name", "auto"), "query lengths", lens,
              *(("drafter", getattr(draft.attention_backend, "name", "auto"), "adaptive verification")
                if draft and getattr(draft, "enable_adaptive_verification", False) else ()))
        if c.speculative_config and c.structured_outputs_config.reasoning_parser and not markers(c):
            return 1
        if not FORK:
            return 0  # the micro-batch split is the fork's (vllm_ds4x.hooks.ubatch_split)
        bad = check_ubatch(c, list(lens or [1 + k]))
        from vllm_ds4x.hooks import ubatch_split

        if ubatch_split.wanted(c):
            bad += check_micro_batch_metadata(c)
        return bad
    except Exception as e:
        traceback.print_exc(limit=-4)
        print("FAIL", case, repr(e)[:300])
    return 1


def main(root: str, cases: list[str]) -> int:
    force_cuda_platform()
    import vllm

    print("vllm", vllm.__version__, "from", vllm.__file__, "torch", torch.__version__)
    bad = check_imports() + (check_split_threads() if FORK else 0) + sum(check_case(case, root) for case in cases or CASES)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
