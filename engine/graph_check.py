"""Build the installed (patched) vLLM's CUDA graph tables on CPU, model runner
v2's graph manager and model runner v1's dispatcher, for each draft-depth policy
of engine/policies.py and return the full decode graphs each would capture
and what dispatch picks for uniform decode batches of every depth (run by
checks.py).
Nothing is captured: CPU has no CUDA graphs. The manager's own tables are built
by its real constructor; only the process-group lookup and the CUDA graph memory
pool (environment, not the code under test) are stood in for."""

import inspect
from typing import Any

from vllm.config import ModelConfig, SchedulerConfig, SpeculativeConfig, VllmConfig, set_current_vllm_config
from vllm.config.compilation import CUDAGraphMode

from engine.policies import POLICIES

K = 2
MAX_NUM_SEQS = 4


class _Rank:
    is_first_rank = is_last_rank = True


def config(model: str, draft_depth: dict[str, Any] | None) -> VllmConfig:
    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=K, prompt_lookup_max=2, prompt_lookup_min=1,
                             draft_depth=draft_depth)
    config = VllmConfig(
        model_config=ModelConfig(model=model, dtype="bfloat16", seed=0, max_model_len=1024),
        scheduler_config=SchedulerConfig(max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=1024, max_model_len=1024,
                                         async_scheduling=False, is_encoder_decoder=False),
        speculative_config=spec,
    )
    # what the GPU runner's sizing leaves (CPU platforms turn graphs off in the config)
    config.compilation_config.cudagraph_capture_sizes = [1, 2, 4, 8]
    config.compilation_config.max_cudagraph_capture_size = 12
    return config


def manager(config: VllmConfig) -> Any:
    from vllm.v1.worker.gpu import cudagraph_utils as cu

    from vllm_ds4x.hooks.decode_graphs import decode_query_lens

    cu.get_pp_group = _Rank
    cu.current_platform.get_global_graph_pool = lambda: None
    with set_current_vllm_config(config):
        return cu.ModelCudaGraphManager(config, "cpu", CUDAGraphMode.FULL_DECODE_ONLY, decode_query_len=1 + K,
                                        decode_query_lens=decode_query_lens(config, 1 + K))


def dispatcher(config: VllmConfig) -> Any:
    """Model runner v1's dispatcher with the keys its runner initializes."""
    from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher

    from vllm_ds4x.hooks.decode_graphs import decode_query_lens

    # what resolve_cudagraph_mode_and_sizes does for v1 with spec decode (tensor
    # parallel size 1: an argument of its own before vLLM 0.32)
    adjust = config.compilation_config.adjust_cudagraph_sizes_for_spec_decode
    adjust(*(1 + K, 1)[:len(inspect.signature(adjust).parameters)])
    with set_current_vllm_config(config):
        disp = CudagraphDispatcher(config)
        disp.initialize_cudagraph_keys(CUDAGraphMode.FULL_DECODE_ONLY, 1 + K, decode_query_lens(config, 1 + K))
    return disp


def table(mgr: Any) -> dict[str, Any]:
    mgr._graphs_captured = True  # what capture() sets after recording the descriptors above
    takes_loras = "num_active_loras" in inspect.signature(mgr.dispatch).parameters
    dispatch = {}
    for query_len in range(1, K + 2):
        for reqs in range(1, MAX_NUM_SEQS + 1):
            args = (reqs, reqs * query_len, query_len) + ((0,) if takes_loras else ())
            desc = mgr.dispatch(*args)
            dispatch[f"q{query_len}r{reqs}"] = (f"{desc.cg_mode.name}:t{desc.num_tokens}:r{desc.num_reqs}"
                                                f":q{desc.uniform_token_count}")
    mixed = mgr.dispatch(*((2, 4, None) + ((0,) if takes_loras else ())))
    graphs = sorted(f"t{d.num_tokens}:r{d.num_reqs}:q{d.uniform_token_count}"
                    for descs in mgr._capture_descs.values() for d in descs)
    return {"graphs": graphs, "dispatch": dispatch, "mixed": mixed.cg_mode.name}


def v1_table(disp: Any) -> dict[str, Any]:
    """As table(), through the v1 runner's rule: a batch is uniform when its
    query length has decode graphs (1 + K without ds4x's)."""
    graphs = disp.decode_graphs

    def uniform(query_len: int) -> bool:
        return query_len == (graphs.query_len(query_len, 1 + K) if graphs else 1 + K)

    def show(mode: Any, desc: Any) -> str:
        length = desc.num_tokens // desc.num_reqs if desc.uniform else None
        return f"{mode.name}:t{desc.num_tokens}:r{desc.num_reqs}:q{length}"

    dispatch = {f"q{q}r{reqs}": show(*disp.dispatch(q * reqs, uniform_decode=uniform(q), uniform_query_len=q))
                for q in range(1, K + 2) for reqs in range(1, MAX_NUM_SEQS + 1)}
    mixed, _ = disp.dispatch(4, uniform_decode=False)
    graphs_out = sorted(show(mode, d).split(":", 1)[1] for mode, descs in disp.get_capture_descs() for d in descs)
    return {"graphs": graphs_out, "dispatch": dispatch, "mixed": mixed.name}


def data_parallel(model: str) -> VllmConfig:
    """adaptive with two data-parallel ranks, which choose depths apart."""
    dp = config(model, POLICIES["adaptive"])
    dp.parallel_config.data_parallel_size = 2
    return dp


def check(model: str) -> dict[str, Any]:
    return {"v2": {name: table(manager(config(model, policy))) for name, policy in POLICIES.items()},
            "v1": {name: v1_table(dispatcher(config(model, policy))) for name, policy in POLICIES.items()},
            "v1 adaptive, data parallel": v1_table(dispatcher(data_parallel(model)))}
