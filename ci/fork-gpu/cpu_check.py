"""Before spending GPU time: on a machine without a GPU, import what the harness imports from a
prepared tree (setup.sh's layout) with the CUDA platform forced, and take each case's LLM(...)
arguments through vLLM's own LLM.__init__ up to the engine. NVML and the device queries made at
import answer as an H200 would; nothing runs on a device.

Usage, from the checkout root (a Python with torch, e.g. the CPU engine venv; the checkout last on
PYTHONPATH for the engine package, as setup.sh puts it):
  PYTHONPATH=FORK:FSITE:SITE:$PWD DS4X_GPU_TARGET=vllm python ci/fork-gpu/cpu_check.py MODELROOT [CASES...]
MODELROOT: tiny_models.py's output. Exit 1 if any import or case fails."""

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
    "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.cudagraph_dispatcher", "vllm.v1.worker.gpu_worker", "vllm.v1.spec_decode.ngram_proposer",
    "vllm.model_executor.warmup.kernel_warmup", "vllm.v1.attention.backends.triton_attn",
    "vllm.model_executor.models.qwen2", "vllm.model_executor.models.llama_eagle",
    "vllm.model_executor.models.qwen3_dflash", "vllm.reasoning.deepseek_r1_reasoning_parser",
    "vllm.entrypoints.llm", "vllm.ds4x.decode_graphs", "vllm.ds4x.moe_overlap", "vllm.ds4x.ubatch_overlap",
    "vllm.model_executor.layers.fused_moe.runner.moe_runner"]
if os.environ.get("DS4X_GPU_TARGET") == "vllm":  # upstream's EAGLE drafter base, which our graph patch hooks
    MODULES.append("vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator")
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
    for name in MODULES:
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
    print(f"imports: {len(MODULES)} modules, {bad} failed")
    return bad


class Made(Exception):
    pass


def check_case(case: str, root: str) -> int:
    """The case's VllmConfig, as LLM(...) builds it, or the error that stops it."""
    from vllm.ds4x.decode_graphs import decode_query_lens
    from vllm.v1.engine import llm_engine

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
        print("ok  ", case, "v2" if c.use_v2_model_runner else "v1", c.compilation_config.cudagraph_mode.name,
              c.attention_config.backend.name, "query lengths", decode_query_lens(c, 1 + k))
        return 0
    except Exception as e:
        traceback.print_exc(limit=-4)
        print("FAIL", case, repr(e)[:300])
    return 1


def main(root: str, cases: list[str]) -> int:
    force_cuda_platform()
    import vllm

    print("vllm", vllm.__version__, "from", vllm.__file__, "torch", torch.__version__)
    bad = check_imports() + sum(check_case(case, root) for case in cases or CASES)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
