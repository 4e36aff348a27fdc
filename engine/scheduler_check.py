"""Drive the installed (patched) vLLM Scheduler and AsyncScheduler with real
Request objects on CPU, for each policy of engine/policies.py, and
return what they scheduled (run by checks.py).
Request "r" is reasoning (its prompt opens <think>), "a" is answering (its
prompt closed </think>), "o" reasons but asked for depth 0. All get the same 2
drafts each step; each decode batch verifies one depth for all its requests.
A second run has reasoning requests only ("r1", "r2").
"""

import dataclasses
from typing import Any

import torch
from vllm.config import (
    CacheConfig,
    ModelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    StructuredOutputsConfig,
    VllmConfig,
)
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

from engine.policies import POLICIES
from vllm_ds4x.depth.policy import REQUEST_KEY, DepthPolicy, DraftDepthConfig
from vllm_ds4x.hooks.spec_metrics import DepthStats
from vllm_ds4x.hooks.spec_scheduling import DraftDepthScheduling

BLOCK = 16
FIELDS = {field.name for field in dataclasses.fields(ModelRunnerOutput)}
THINK, END_THINK = 1, 2
K = 2


def scheduler(model: str, draft_depth: dict[str, Any] | None, async_scheduling: bool,
              reasoning_parser: str = "deepseek_r1", max_num_seqs: int = 8) -> Any:
    model_config = ModelConfig(model=model, dtype="bfloat16", seed=0, max_model_len=1024)
    # the GPU n-gram proposer (the only n-gram one async scheduling accepts)
    # reserves K_max lookahead slots; the scheduler never runs the proposer itself
    method = "ngram_gpu"
    spec = SpeculativeConfig(method=method, num_speculative_tokens=K, prompt_lookup_max=2, prompt_lookup_min=1,
                             draft_depth=draft_depth)
    config = VllmConfig(
        model_config=model_config,
        scheduler_config=SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max(1024, 16 * max_num_seqs),
                                         max_model_len=1024,
                                         async_scheduling=async_scheduling, is_encoder_decoder=False),
        cache_config=CacheConfig(block_size=BLOCK, gpu_memory_utilization=0.9, cache_dtype="auto"),
        speculative_config=spec,
        structured_outputs_config=StructuredOutputsConfig(reasoning_parser=reasoning_parser),
    )
    blocks = max(20000, max_num_seqs * 1024 // BLOCK)  # room for every request at max_model_len: none preempted
    kv = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=1, dtype=torch.float32))])
    config.cache_config.num_gpu_blocks = blocks
    register_all_kvcache_specs(config)
    cls = AsyncScheduler if async_scheduling else Scheduler
    return cls(vllm_config=config, kv_cache_config=kv, block_size=BLOCK, log_stats=True,
               structured_output_manager=StructuredOutputManager(config))


def request(rid: str, prompt: list[int], extra_args: dict[str, Any] | None = None, max_tokens: int = 64) -> Request:
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, extra_args=extra_args)
    params.update_from_generation_config({}, 0)
    return Request(request_id=rid, prompt_token_ids=prompt, sampling_params=params, pooling_params=None,
                   block_hasher=get_request_block_hasher(BLOCK, sha256))


def output(ids: list[str], sampled: dict[str, list[int]]) -> ModelRunnerOutput:
    # vLLM 0.34.0's ModelRunnerOutput has no req_id_to_index (its scheduler builds it from req_ids)
    index = {"req_id_to_index": {r: i for i, r in enumerate(ids)}} if "req_id_to_index" in FIELDS else {}
    return ModelRunnerOutput(req_ids=ids, **index, sampled_token_ids=[sampled[r] for r in ids], logprobs=None,
                             prompt_logprobs_dict={}, pooler_output=[])


def drafts(out: Any, ids: list[str]) -> dict[str, int]:
    return {r: len(out.scheduled_spec_decode_tokens.get(r, [])) for r in ids}


def verified(out: Any, ids: list[str], sampled: dict[str, list[int]]) -> ModelRunnerOutput:
    """sampled[r]: the drafts accepted, then the next token; only as many drafts
    as the step verified for r are kept (a policy may have verified none)."""
    depth = drafts(out, ids)
    return output(ids, {r: tokens[:-1][:depth[r]] + tokens[-1:] for r, tokens in sampled.items()})


def run_sync(model: str, draft_depth: dict[str, Any] | None) -> dict[str, Any]:
    s = scheduler(model, draft_depth, False)
    # EAGLE/MTP/DSpark reserve K_max lookahead slots (n-gram needs none): do as they do
    s.num_lookahead_tokens = K
    # 13-token prompts: after one verify step the K_max lookahead crosses a block
    reqs = {"r": request("r", [5] * 12 + [THINK]), "a": request("a", [5] * 10 + [THINK, 8, END_THINK]),
            "o": request("o", [5] * 11 + [THINK, 9], {"draft_depth": 0})}
    for r in reqs.values():
        s.add_request(r)
    ids = list(reqs)
    out = s.schedule()  # prefill
    s.update_from_output(out, output(ids, {r: [20] for r in ids}))
    s.update_draft_token_ids(DraftTokenIds(ids, [[30, 31]] * len(ids)))
    computed_before = {r: reqs[r].num_computed_tokens for r in ids}
    out = s.schedule()  # verify
    blocks = {r: len(s.kv_cache_manager.get_block_ids(r)[0]) for r in ids}
    result = {
        "scheduled_drafts": drafts(out, ids),
        "scheduled_tokens": dict(out.num_scheduled_tokens),
        "kv_blocks": blocks,
        "kv_tokens_needed": {r: computed_before[r] + out.num_scheduled_tokens[r] + s.num_lookahead_tokens
                             for r in ids},
        "lookahead": s.num_lookahead_tokens,
    }
    # r and o: both drafts rejected; a: first of two accepted, second rejected
    engine_out = s.update_from_output(out, verified(out, ids, {"r": [40], "a": [30, 41], "o": [42]}))
    result["computed_after"] = {r: reqs[r].num_computed_tokens for r in ids}
    result["num_tokens_after"] = {r: reqs[r].num_tokens for r in ids}
    stats = engine_out[0].scheduler_stats.spec_decoding_stats  # None: nothing verified (adaptive at depth 0)
    result["stats"] = None if stats is None else {"drafts": stats.num_drafts, "draft_tokens": stats.num_draft_tokens,
                       "accepted": stats.num_accepted_tokens,
                       "by_phase": None if stats.ds4x is None else {
                           "drafts": stats.ds4x.drafts, "draft_tokens": stats.ds4x.draft_tokens,
                           "accepted": stats.ds4x.accepted_tokens, "depths": stats.ds4x.depths,
                           "chosen_depths": stats.ds4x.chosen_depths}}
    # "r" leaves reasoning: the next drafts are all verified
    s.update_draft_token_ids(DraftTokenIds(ids, [[30, 31]] * len(ids)))
    out = s.schedule()
    s.update_from_output(out, output(ids, {"r": [END_THINK], "a": [43], "o": [44]}))
    s.update_draft_token_ids(DraftTokenIds(ids, [[30, 31]] * len(ids)))
    out = s.schedule()
    result["after_end_think"] = drafts(out, ids)
    return result


def first_verify_step(s: Any, reqs: dict[str, Request]) -> tuple[list[str], Any]:
    """The requests added and prefilled (one token each), two drafts each proposed: their ids and
    the scheduler output of the step that verifies them."""
    for r in reqs.values():
        s.add_request(r)
    ids = list(reqs)
    out = s.schedule()
    s.update_from_output(out, output(ids, {r: [20] for r in ids}))
    s.update_draft_token_ids(DraftTokenIds(ids, [[30, 31]] * len(ids)))
    return ids, s.schedule()


def run_sync_reasoning(model: str, draft_depth: dict[str, Any] | None) -> dict[str, Any]:
    """Two reasoning requests: the batch verifies the reasoning depth (no drafts
    at depth 0); once one of them closes </think>, the answer depth."""
    s = scheduler(model, draft_depth, False)
    s.num_lookahead_tokens = K
    reqs = {r: request(r, [5] * 12 + [THINK]) for r in ("r1", "r2")}
    ids, out = first_verify_step(s, reqs)
    result = {"scheduled_drafts": drafts(out, ids), "scheduled_tokens": dict(out.num_scheduled_tokens)}
    s.update_from_output(out, output(ids, {"r1": [END_THINK], "r2": [44]}))  # drafts, if any, rejected
    result["computed_after"] = {r: reqs[r].num_computed_tokens for r in ids}
    s.update_draft_token_ids(DraftTokenIds(ids, [[30, 31]] * len(ids)))
    result["after_end_think"] = drafts(s.schedule(), ids)
    return result


def run_async_reasoning(model: str, draft_depth: dict[str, Any] | None) -> dict[str, Any]:
    s = scheduler(model, draft_depth, True)
    reqs = {r: request(r, [5, 6, 7, THINK]) for r in ("r1", "r2")}
    for r in reqs.values():
        s.add_request(r)
    ids = list(reqs)
    out = s.schedule()
    out2 = s.schedule()
    result = {"scheduled_drafts": drafts(out2, ids), "scheduled_tokens": dict(out2.num_scheduled_tokens)}
    s.update_from_output(out, output(ids, {r: [20] for r in ids}))
    s.update_from_output(out2, output(ids, {r: [21] for r in ids}))  # drafts, if any, rejected
    result["computed_after"] = {r: reqs[r].num_computed_tokens for r in ids}
    result["output_placeholders_after"] = {r: reqs[r].num_output_placeholders for r in ids}
    return result


def run_async(model: str, draft_depth: dict[str, Any] | None) -> dict[str, Any]:
    s = scheduler(model, draft_depth, True)
    reqs = {"r": request("r", [5, 6, 7, THINK]), "a": request("a", [5, THINK, 8, END_THINK])}
    for r in reqs.values():
        s.add_request(r)
    ids = list(reqs)
    out = s.schedule()  # prefill; placeholders for the next step are set here
    placeholders = {r: list(reqs[r].spec_token_ids) for r in ids}
    out2 = s.schedule()  # async: the next step is scheduled before the first output returns
    result = {
        "placeholders": placeholders,
        "scheduled_drafts": drafts(out2, ids),
        "scheduled_tokens": dict(out2.num_scheduled_tokens),
        "output_placeholders": {r: reqs[r].num_output_placeholders for r in ids},
    }
    s.update_from_output(out, output(ids, {r: [20] for r in ids}))
    s.update_from_output(out2, verified(out2, ids, {"r": [21], "a": [30, 22]}))
    result["computed_after"] = {r: reqs[r].num_computed_tokens for r in ids}
    result["output_placeholders_after"] = {r: reqs[r].num_output_placeholders for r in ids}
    return result


def run_live_timing(model: str, draft_depth: dict[str, Any] | None, verify: str = "batch") -> dict[str, Any]:
    """adaptive times its steps live: 30 decode steps of two requests, then one
    where only r1 has drafts (uneven, unless the batch verifies nothing). With
    verify "request" (the fork's hook, as use_policy sets it), r2 asked for depth 0
    and r1 for K: every decode step masks r2's drafts and is timed by its shape."""
    s = scheduler(model, draft_depth, False)
    own = verify == "request"
    if own:
        use_policy(s, {**(draft_depth or {}), "verify": "request"})
    reqs = {r: request(r, [5] * 12 + [THINK], {REQUEST_KEY: depth} if own else None, max_tokens=200)
            for r, depth in (("r1", K), ("r2", 0))}
    for r in reqs.values():
        s.add_request(r)
    ids = list(reqs)
    out = s.schedule()
    s.update_from_output(out, output(ids, {r: [20] for r in ids}))
    costs = s.ds4x_depth.policy.costs

    def step(proposed: list[list[int]]) -> dict[str, int]:
        s.update_draft_token_ids(DraftTokenIds(ids, proposed))
        out = s.schedule()
        fork_hook(s, out)
        masked = out.ds4x_verify_depths or {}  # r2's: it verifies none of its drafts, and keeps its next token
        s.update_from_output(out, verified(out, ids, {"r1": [30, 40], "r2": [41] if "r2" in masked else [30, 41]}))
        return dict(out.num_scheduled_tokens)

    for _ in range(30):
        step([[30, 31]] * len(ids))
    timed, shapes = costs.clock, sorted({shape for _, shape in costs.samples})  # clock: every timing
    uneven = step([[30, 31], []])
    return {"timed": timed, "lengths": sorted({longest for longest, _ in shapes}), "shapes": shapes,
            "uneven_step": uneven, "uneven_timed": costs.clock - timed}


def run_stats(model: str, draft_depth: dict[str, Any] | None) -> dict[str, Any]:
    """Four steps of four reasoning and two answer requests, counted by phase two
    ways: by the scheduler, and here from what each request was scheduled and
    sampled. The steps cover a uniform batch (the largest group by subtraction),
    an uneven one (r0 drafted fewer), a request that stops mid-step (a1: vLLM
    trims its tokens), one aborted while its step ran (r3: vLLM skips it), and
    two steps of reasoning requests only (a0 aborted between steps: depth 0
    under phase 0/2)."""
    s = scheduler(model, draft_depth, False)
    s.num_lookahead_tokens = K
    reqs = {f"r{i}": request(f"r{i}", [5] * 12 + [THINK]) for i in range(4)}
    reqs |= {"a0": request("a0", [5] * 10 + [THINK, 8, END_THINK], max_tokens=8),
             "a1": request("a1", [5] * 10 + [THINK, 8, END_THINK], max_tokens=3)}
    for r in reqs.values():
        s.add_request(r)
    ids = list(reqs)
    out = s.schedule()
    s.update_from_output(out, output(ids, {r: [20] for r in ids}))
    counted = DepthStats()
    expected: dict[str, dict[str, int]] = {"drafts": {}, "draft_tokens": {}, "accepted_tokens": {}, "depths": {}}
    for step in range(4):
        live = [r for r in ids if r in s.requests]
        s.update_draft_token_ids(DraftTokenIds(live, [[30] if (r, step) == ("r0", 1) else [30, 31] for r in live]))
        out = s.schedule()
        if step == 2:
            s.finish_requests("r3", RequestStatus.FINISHED_ABORTED)
        scheduled = list(out.num_scheduled_tokens)
        sampled = {}
        for i, r in enumerate(scheduled):
            drafted = len(out.scheduled_spec_decode_tokens.get(r, ()))
            accepted = (step + i) % (drafted + 1)
            sampled[r] = [*[30, 31][:accepted], 40 + step]
            if (r, step) == ("r3", 2):  # aborted while its step ran: vLLM skips its output
                continue
            phase = "reasoning" if r.startswith("r") else "answer"
            counts = ((("drafts", phase, 1), ("draft_tokens", phase, drafted), ("accepted_tokens", phase, accepted))
                      if drafted else ())
            for what, key, n in (*counts, ("depths", str(drafted), 1)):  # depth 0: a step that verified nothing
                expected[what][key] = expected[what].get(key, 0) + n
        engine_out = s.update_from_output(out, output(scheduled, sampled))
        stats = engine_out[0].scheduler_stats.spec_decoding_stats if engine_out else None
        if stats is not None:
            counted.merge(stats.ds4x)
        if step == 1:  # only reasoning requests from here: under phase 0/2 they verify nothing
            s.finish_requests("a0", RequestStatus.FINISHED_ABORTED)
    return {"counted": {what: getattr(counted, what) for what in expected}, "expected": expected,
            "a1_stopped_mid_step": "a1" not in s.requests}


def use_policy(s: Any, config: dict[str, Any], drafter_rests: bool = False) -> None:
    """The scheduler's draft-depth hook, for `config` (on the scheduler's own phase markers and
    lag), as the fork's start-up makes it: verify "request" and DSpark's rests exist only there."""
    policy = s.ds4x_depth.policy
    s.ds4x_depth = DraftDepthScheduling(DepthPolicy(DraftDepthConfig.from_dict(config, K), K, policy.tracker,
                                                    policy.lag), drafter_rests)


def fork_hook(s: Any, out: Any) -> str:
    """What wrote the fork's fields into a scheduled step's output: "fork", its scheduler; else
    "emulated": upstream's SchedulerOutput has none, and the fork's hook (annotate) is called here."""
    if hasattr(out, "ds4x_verify_depths"):
        return "fork"
    s.ds4x_depth.annotate(out)
    return "emulated"


def run_per_request(model: str) -> dict[str, Any]:
    """Each request verifying its own depth (draft_depth verify "request", phase 0/2), as the fork's
    model runner v2 runs it: "r" reasons (depth 0) beside "a" answering (2), so the batch runs
    depth 2 and r's two drafts are masked; the worker keeps at most 1 + own depth tokens of each
    request (here: r samples 1, a accepts one draft). The scheduler's own start-up refuses verify
    "request" where no model runner masks rows: here, its message."""
    config = {"policy": "phase", "reasoning_depth": 0, "answer_depth": K}
    try:
        scheduler(model, {**config, "verify": "request"}, False)
        refused = None
    except ValueError as e:  # DraftDepthError, or pydantic's wrapping of it
        refused = str(e)
    s = scheduler(model, config, False)
    use_policy(s, {**config, "verify": "request"})
    s.num_lookahead_tokens = K
    reqs = {"r": request("r", [5] * 12 + [THINK]), "a": request("a", [5] * 10 + [THINK, 8, END_THINK])}
    ids, out = first_verify_step(s, reqs)
    result = {"refused": refused, "hook": fork_hook(s, out), "scheduled_drafts": drafts(out, ids),
              "verify_depths": out.ds4x_verify_depths}
    engine_out = s.update_from_output(out, output(ids, {"r": [40], "a": [30, 41]}))
    stats = engine_out[0].scheduler_stats.spec_decoding_stats
    result |= {"computed_after": {r: reqs[r].num_computed_tokens for r in ids},
               "stats": {"drafts": stats.num_drafts, "draft_tokens": stats.num_draft_tokens,
                         "accepted": stats.num_accepted_tokens, "per_position": stats.num_draft_tokens_per_pos,
                         "depths": stats.ds4x.depths, "chosen_depths": stats.ds4x.chosen_depths}}
    return result


def run_drafter_rest(model: str) -> dict[str, Any]:
    """DSpark's drafter resting (phase 0/2), as the fork's scheduler runs it for DSpark on model
    runner v2: verifying one depth a batch with "r" reasoning alone, and each request its own with
    "r" beside "a" answering. r closes </think> in its first decode step, where its drafter rested:
    the next step verifies none of its (stale) drafts and drafts again; the one after verifies 2.
    Per step: the drafts scheduled, the own verify depths, the resting drafters, and whose hook set
    them (upstream's scheduler has none: the check calls what the fork's does)."""
    config = {"policy": "phase", "reasoning_depth": 0, "answer_depth": K}
    prompts = {"r": [5] * 12 + [THINK], "a": [5] * 10 + [THINK, 8, END_THINK]}
    made = [{"r": [END_THINK], "a": [30, 41]}, {"r": [44], "a": [30, 42]}, {"r": [30, 31, 45], "a": [30, 31, 46]}]
    result: dict[str, Any] = {}
    for verify, ids in (("batch", ["r"]), ("request", ["r", "a"])):
        s = scheduler(model, config, False)
        use_policy(s, {**config, "verify": verify}, drafter_rests=True)
        s.num_lookahead_tokens = K
        for r in ids:
            s.add_request(request(r, prompts[r]))
        hooks, steps = set(), []
        for sampled in [{r: [20] for r in ids}, *made]:  # the prefill, then three decode steps
            out = s.schedule()
            hooks.add(fork_hook(s, out))
            steps.append({"drafts": drafts(out, ids), "verify_depths": out.ds4x_verify_depths,
                          "resting": sorted(out.ds4x_resting_drafters or ())})
            s.update_from_output(out, output(ids, {r: sampled[r] for r in ids}))
            s.update_draft_token_ids(DraftTokenIds(ids, [[30, 31]] * len(ids)))
        result[verify] = {"steps": steps, "hook": " ".join(sorted(hooks))}
    return result


def check(model: str) -> dict[str, Any]:
    init_none_hash(sha256)
    out: dict[str, Any] = {name: {"sync": run_sync(model, policy), "async": run_async(model, policy),
                                  "sync_reasoning": run_sync_reasoning(model, policy),
                                  "async_reasoning": run_async_reasoning(model, policy)}
                           for name, policy in POLICIES.items()}
    out["adaptive"]["live_timing"] = run_live_timing(model, POLICIES["adaptive"])
    out["adaptive"]["live_timing_per_request"] = run_live_timing(model, POLICIES["adaptive"], "request")
    for name, policy in POLICIES.items():
        out[name]["stats_paths"] = run_stats(model, policy)
    out["per_request"] = run_per_request(model)
    out["drafter_rest"] = run_drafter_rest(model)
    return out
