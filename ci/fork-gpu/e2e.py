"""One engine of the end-to-end decode benchmark (bench: ci/fork-gpu/e2e), in-process.

Usage: e2e.py {nospec,spec,av} OUTDIR MODELDIR   -> OUTDIR/e2e-{nospec,spec,av}[-E2E_TAG].json

E2E_TAG names a variant of the same engine (the overlap comparison, E2E_MODES=overlap in
ci/fork-gpu/e2e, runs one engine per LVLLM_MOE_OVERLAP level, tagged by it); E2E_POLICIES
(comma-separated names of depth_sim.policies) runs only those policies.

The stand-in of e2e_model.py, FULL_DECODE_ONLY graphs, lk_moe experts, the deepseek_r1
reasoning parser. spec: EAGLE K=2 on model runner v2, graphs captured for depths 0, 1
and 2, each draft kept with its phase's probability (acceptance ACCEPTANCE at depth K), drawn
from its position and token with the round as salt: the same draws for every policy of a round.
The draft-depth policies of vllm_ds4x.depth.sim run side by side in this one engine:
between cells (no request in flight) the scheduler's policy object is swapped for the
next policy's, each made once and kept (see Policies). nospec: no speculation.
av (upstream vLLM, #34): EAGLE K=2 under vLLM's own adaptive verification
(enable_adaptive_verification, no draft_depth; one "policy" of that name), each step's draft
budget as vLLM chose it recorded per cell (BudgetLog); the run also records what the engine does
with both options set (composition). E2E_MODEL=dense: e2e_model.py's target with a dense MLP, on
the GPU alone (ci/fork-gpu/side_by_side runs both on upstream).

A cell is one phase (reasoning or answer), 1 or 2 requests started together, one
policy; greedy, E2E_TOKENS tokens a request (default 96). Its steady decode rate is
the tokens made from the first step after prefill to the step where the first request
finishes, over that time (and each request's own tokens in that window); its step
times come from the scheduler's own calls, by verified depth, and its steps are also
counted by the depth each request verified (steps_by_request_depths: "0+2"). Each round then runs
the mixed cells (phase "mixed"): one reasoning and one answering request together,
and two of each where max-num-seqs (the most of E2E_REQUESTS) allows, for every
policy (depth_mixed.mixed_batches; E2E_MIXED=0: none; no warm-up round of their own,
the round's phase-pure cells come first), and for each policy whose requests may choose
different depths its per-request twin (named_policies.per_request_policies: each request
verifies its own depth in the batch's graph; E2E_PER_REQUEST=0: not run), which also runs in
the phase-pure cells of 2 or more requests (there its requests mostly agree: per-request
verify must cost nothing; E2E_MIXED=0 runs no twin at all). E2E_MIXED_DRAWS (default 1) runs
the mixed cells that many times a round, each time on other draws (a salt of its own; the first
the round's), paired by round and draw: a 20-step mixed window holds about 40 of the reasoning
request's drafts, whose draws move its pair's ratio (as do its steps' times), so more draws weigh
the gain for far less than more rounds. E2E_ROUNDS rounds (default 3), the policy order rotated
each round (and mixed draw), each twin's cell next to its policy's (cell_order). The JSON is
rewritten after every cell, so a run cut short keeps what it measured.

Then, unless E2E_PROFILE=0, a short cell per request count (every depth with spec)
under torch.profiler: OUTDIR/trace-MODE-xN-DEPTH.json.gz, a step's timeline on the GPU
(read by bench/step_timeline.py: where the step's time goes, and what overlaps the CPU
experts).
"""

import functools
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from itertools import count, pairwise
from pathlib import Path

from drafts import DraftFilter
from e2e_model import ANSWER_CYCLE, CYCLES, END_THINK, REASONING_CYCLE, THINK, VOCAB, install_loader, successor
from harness import ENGINE, GRAPHS, Counters, dsv4_engine, spec_metrics, write_json

from bench.e2e_mixed import MIXED as MIXED_PHASE  # the phase the report reads mixed cells by
from bench.e2e_mixed import draw_label  # a cell's heading, as the report's readers head it
from vllm_ds4x.depth.mixed import mix, mixed_batches
from vllm_ds4x.depth.named_policies import PER_REQUEST, named_policies, per_request_policies, profile_start

MODE, OUTDIR, MODELS = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
K = 2
ACCEPTANCE = {"reasoning": 0.4, "answer": 0.9}  # vLLM's accepted / drafted at depth K, as the user sees it
TOKENS = int(os.environ.get("E2E_TOKENS", "96"))
ROUNDS = int(os.environ.get("E2E_ROUNDS", "3"))
REQUESTS = [int(n) for n in os.environ.get("E2E_REQUESTS", "1 2").split()]
PHASES = ("reasoning", "answer")
TAG = os.environ.get("E2E_TAG", "")
WARMUP = int(os.environ.get("E2E_WARMUP", "1"))  # unrecorded rounds before the first
NAME = f"{MODE}-{TAG}" if TAG else MODE  # the files' name: e2e-NAME.json, trace-NAME-xN-DEPTH.json.gz
MIXED = [] if os.environ.get("E2E_MIXED", "1") == "0" else mixed_batches(max(REQUESTS))  # mixed batch sizes
MIXED_DRAWS = int(os.environ.get("E2E_MIXED_DRAWS", "1"))  # mixed cells a round, each on draws of its own
if not 1 <= MIXED_DRAWS <= 100:  # drafts.py shifts the salt 40 bits into an int64: draws * DRAW_SALT < 2^23
    raise SystemExit(f"E2E_MIXED_DRAWS={MIXED_DRAWS}: 1 to 100 (E2E_MIXED=0 runs no mixed cell)")
DRAW_SALT = 1 << 16  # a mixed draw's salt: the round's plus this per draw, beyond every round's
TWINS = bool(MIXED) and os.environ.get("E2E_PER_REQUEST", "1") != "0"  # per-request twins: mixed cells, uniform of 2+
# captures graphs for depths 0..K; per-request verify on: the model runner masks rows only when the engine's asks
ENGINE_POLICY = {**(named_policies(K)["adaptive"].draft_depth or {}), **({"verify": "request"} if TWINS else {})}
DSV4 = os.environ.get("E2E_MODEL") == "dsv4"  # DeepSeek-V4 + DSpark (dsv4_model.py) instead of e2e_model.py's
AV = MODE == "av"  # vLLM's adaptive verification in place of draft_depth
DECISIONS = os.environ.get("E2E_DECISIONS", "1") != "0"  # every depth adaptive sets, into the json (trace_depths)
AV_POLICY = "adaptive verification"


def prompts(tokenizer) -> dict[str, list[list[int]]]:
    """Per phase, two prompts whose requests start half a cycle apart (fresh routing for each)."""
    def ids(text: str) -> list[int]:
        return tokenizer(text)["input_ids"]

    reasoning = [*ids("Let me think about the file layout"), THINK]
    answer = [*ids("def add(a, b):"), THINK, *ids(" plan"), END_THINK]
    return {"reasoning": [reasoning, [*reasoning, REASONING_CYCLE[90]]],
            "answer": [answer, [*answer, ANSWER_CYCLE[90]]]}


WALK = os.environ.get("E2E_WALK") == "1"
WALKED = dict.fromkeys(CYCLES, TOKENS)  # where each phase's cycle stopped: past what the warm-up made


def walked(phase: str, n: int, prompt_ids: list[list[int]]) -> list[list[int]]:
    """E2E_WALK=1 (E2E_MODES=pool): a one-request cell continues its phase's cycle where the phase's
    last cell stopped (its prompt ends on that token), so that the cells read as one long generation,
    never the same stretch of tokens (and of experts, which a pool would then hold from the cell
    before) twice running, nor the warm-up's, which generates each cycle's first TOKENS; every engine
    of the run walks the same positions in the same order. A cycle repeats after its length (180)."""
    if not WALK or n != 1 or phase not in CYCLES:
        return prompt_ids
    cycle, at = CYCLES[phase], WALKED[phase]
    WALKED[phase] = (at + TOKENS) % len(cycle)
    return [[*prompt_ids[0], cycle[at]]]


def cell_plan(texts: dict[str, list[list[int]]]) -> list[tuple[str, int, list[list[int]], int]]:
    """A round's cells before the policies: (phase, requests, prompts, draw) per phase and request
    count (draw 0), then each mixed batch (phase "mixed") MIXED_DRAWS times (draws 0, 1, ...), its
    requests in depth_mixed.mix's order, each phase's prompts as its phase-pure cells take them."""
    plan = [(phase, n, texts[phase][:n], 0) for phase in PHASES for n in REQUESTS]
    for n in MIXED:
        phases = mix(n)
        batch = [texts[p][phases[:i].count(p)] for i, p in enumerate(phases)]
        plan += [(MIXED_PHASE, n, batch, draw) for draw in range(MIXED_DRAWS)]
    return plan


def cell_order(ran: list[tuple[str, dict]], turn: int) -> list[tuple[str, dict]]:
    """The policies of a round's cell (and mixed draw: `turn` is round + draw) in the order they run:
    each per-request twin beside its policy, so that a pair's two cells run back to back (a step's time
    drifted up to 20% within a round on DeepSeek-V4, and a pair three cells apart drifted with it), the
    twin second on even turns and first on odd ones; the pairs rotated by the turn."""
    twin_of = {name.removesuffix(PER_REQUEST): (name, c) for name, c in ran if name.endswith(PER_REQUEST)}
    units = [[(name, c), *([twin_of[name]] if name in twin_of else [])]
             for name, c in ran if not name.endswith(PER_REQUEST)]
    units = [unit[::-1] if turn % 2 else unit for unit in units]
    shift = turn % len(units)
    return [policy for unit in units[shift:] + units[:shift] for policy in unit]


def salt(round_: int, draw: int) -> int:
    """The draws' salt of a round's cells (drafts.py): the round's own, the same for every policy,
    and for each further mixed draw another (warm-up: 0)."""
    return round_ + 1 + draw * DRAW_SALT


def engine_args() -> dict:
    kw = {**ENGINE, **GRAPHS, "model": str(MODELS / "target"), "load_format": "dummy", "max_model_len": 1024,
          "max_num_seqs": max(REQUESTS), "max_num_batched_tokens": 1024, "gpu_memory_utilization": 0.2,
          "reasoning_parser": "deepseek_r1"}
    if DSV4:  # the user's model class, drafter and settings (harness.dsv4_engine)
        kw = {**{k: v for k, v in kw.items() if k != "attention_config"}, **dsv4_engine(),
              "max_num_seqs": max(REQUESTS), "reasoning_parser": "deepseek_v4"}
    if MODE in ("spec", "av"):
        kw["speculative_config"] = {"method": "dspark" if DSV4 else "eagle",
                                    "model": str(MODELS / ("draft" if DSV4 else "eagle")), "num_speculative_tokens": K,
                                    **({"enable_adaptive_verification": True} if AV else {"draft_depth": ENGINE_POLICY})}
    return kw


def composition() -> str:
    """What the engine's config says to draft_depth beside adaptive verification (#34: one defined
    thing; ours refuses the pair at start-up, naming both)."""
    from vllm import LLM

    kw = engine_args()
    kw["speculative_config"] = {**kw["speculative_config"], "draft_depth": ENGINE_POLICY}
    try:
        LLM(**kw)  # refused while its config is made, before any weight or memory
    except Exception as e:  # the refusal is the answer
        return f"refused: {type(e).__name__}: {e}"
    return "accepted"


class BudgetLog:
    """vLLM's adaptive verification: each step's draft budget (drafts verified over the batch)
    against the drafts scheduled, as its host side chose them (get_num_tokens), with the time."""

    def __init__(self) -> None:
        from vllm.v1.worker.gpu.spec_decode import adaptive_verification as AVM

        self.steps: list[tuple[float, int, int]] = []
        choose = AVM.AdaptiveVerificationManager.get_num_tokens

        def logged(manager, num_tokens_per_req, draft_tokens):
            tokens = choose(manager, num_tokens_per_req, draft_tokens)
            scheduled, _, budget = manager._batch_budget
            self.steps.append((time.perf_counter(), budget, sum(scheduled.values())))
            return tokens

        AVM.AdaptiveVerificationManager.get_num_tokens = logged

    def window(self, start: float, end: float) -> dict[str, int]:
        inside = [(b, s) for t, b, s in self.steps if start <= t <= end]
        return {"steps": len(inside), "verified": sum(b for b, _ in inside), "scheduled": sum(s for _, s in inside)}


def install_model() -> None:
    """Weights made in the process, and for DeepSeek-V4 its portable path (case.py's)."""
    if not DSV4:
        install_loader()
        return
    import dsv4_model
    import portable

    portable.install(Path(os.environ["DS4X_DSV4_OPS"]))
    dsv4_model.install_loader()


class StepLog:
    """The scheduler's schedule() calls: (time, longest query, requests, new requests?, the depth
    each request verifies, ascending: "0+2" where the fork masked a request's rows). With async
    scheduling vLLM schedules a step before the one before it has run, so the gap between two
    calls is the run of the step `lag` - 1 calls earlier."""

    def __init__(self, scheduler, lag: int) -> None:
        self.lag = lag
        self.steps: list[tuple[float, int, int, bool, str]] = []
        schedule = scheduler.schedule

        def logged(*a, **k):
            start = time.perf_counter()
            out = schedule(*a, **k)
            scheduled = out.num_scheduled_tokens
            longest = max(scheduled.values(), default=0)
            own = getattr(out, "ds4x_verify_depths", None) or {}
            verified = sorted(min(own.get(r, n - 1), n - 1) for r, n in scheduled.items())
            self.steps.append((start, longest, len(scheduled), bool(out.scheduled_new_reqs),
                               "+".join(map(str, verified))))
            return out

        scheduler.schedule = logged

    def decode_steps(self, start: float, end: float) -> Iterator[tuple[float, int, str]]:
        """Each decode step that ran within [start, end]: its seconds to the next, its verified
        depth, and each request's."""
        inside = [s for s in self.steps if start <= s[0] <= end]
        for i, ((t, *_), (t_next, *_)) in enumerate(pairwise(inside)):
            if i < self.lag - 1:
                continue  # the step that ran is from before the window
            _, q, _, new, verified = inside[i - (self.lag - 1)]
            if not new and 1 <= q <= K + 1:
                yield t_next - t, q - 1, verified

    def by_depth(self, start: float, end: float) -> dict[str, list[float]]:
        """Seconds from each decode step to the next within [start, end], by its verified depth."""
        out: dict[str, list[float]] = {}
        for seconds, depth, _ in self.decode_steps(start, end):
            out.setdefault(str(depth), []).append(seconds)
        return out

    def by_request_depths(self, start: float, end: float) -> dict[str, int]:
        """The decode steps within [start, end] by the depth each request verified ("0+2")."""
        return dict(Counter(verified for _, _, verified in self.decode_steps(start, end)))


class Policies:
    """One scheduler-side policy object per policy, made once and put back in
    the scheduler for each of its cells: like an engine that has run that policy
    since its start (adaptive keeps what earlier requests taught it: engine-wide
    acceptance seeds and live step costs)."""

    def __init__(self, scheduler) -> None:
        self.scheduler, self.made = scheduler, {}
        self.decisions: dict[str, list] = {}  # DECISIONS: every depth adaptive set, by policy
        self.tracker, self.lag = scheduler.ds4x_depth.policy.tracker, scheduler.ds4x_depth.policy.lag
        self.drafter_rests = scheduler.ds4x_depth.drafter_rests  # as the engine's start-up decided (DSpark)

    def use(self, name: str, config: dict | None) -> None:
        from vllm_ds4x.depth.policy import DepthPolicy, DraftDepthConfig
        from vllm_ds4x.hooks.spec_scheduling import DraftDepthScheduling

        if name not in self.made:
            policy = DepthPolicy(DraftDepthConfig.from_dict(config, K), K, self.tracker, self.lag)
            if DECISIONS and name.startswith("adaptive"):
                self.decisions[name] = trace_depths(policy)
            self.made[name] = DraftDepthScheduling(policy, self.drafter_rests)
        self.scheduler.ds4x_depth = self.made[name]


def trace_depths(policy) -> list:
    """Every depth adaptive sets, as it sets it: time, request, phase, depth, probing, exploring, its
    acceptance estimate, and the step costs' medians by batch size (ms by shape "longest,total"):
    what the run's steps by depth do not say, why it chose them. A cell's window_clock and
    request_ids place its entries."""
    made, set_depth = [], policy.strategy.set_depth

    def traced(state, depth: int) -> None:
        set_depth(state, depth)
        estimate = state.acceptance[state.phase].estimate() if state.acceptance else []
        made.append([round(time.perf_counter(), 4), state.request_id, state.phase, depth, state.probing,
                     state.exploring, [round(p, 3) for p in estimate],
                     {str(n): {f"{a},{b}": round(1000 * m, 2) for (a, b), m in sorted(timed.items())}
                      for n, timed in sorted(policy.costs.medians.items())}])
    policy.strategy.set_depth = traced
    return made


def accepted(metrics: dict) -> tuple[float, float]:
    return (metrics.get("vllm:spec_decode_num_draft_tokens", 0) or 0,
            metrics.get("vllm:spec_decode_num_accepted_tokens", 0) or 0)


def run_cell(llm, log: StepLog, prompt_ids: list[list[int]], ids: count, tokens: int = TOKENS,
             budgets: "BudgetLog | None" = None) -> dict:
    from vllm import SamplingParams

    engine = llm.llm_engine
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    slot = {}  # the request's place in the cell, by the id it was given and the one vLLM gave it
    given = []  # the ids vLLM gave, in the cell's order
    for i, prompt in enumerate(prompt_ids):
        name = f"r{next(ids)}"
        given.append(engine.add_request(name, {"prompt_token_ids": prompt}, params))
        slot[name] = slot[given[-1]] = i
    latest: dict = {}
    marks = []  # after each engine step: time, each request's tokens so far, every request has one, one finished
    while engine.has_unfinished_requests():
        for out in engine.step():
            latest[slot[out.request_id]] = out
        made = [len(latest[i].outputs[0].token_ids) if i in latest else 0 for i in range(len(prompt_ids))]
        marks.append((time.perf_counter(), made, min(made) > 0, any(o.finished for o in latest.values())))
    first = next(i for i, m in enumerate(marks) if m[2])
    last = next(i for i, m in enumerate(marks) if m[3])
    (t0, made0, *_), (t1, made1, *_) = marks[first], marks[last]
    steps, own = log.by_depth(t0, t1), log.by_request_depths(t0, t1)
    window = [b - a for a, b in zip(made0, made1)]
    return {**({"drafts": budgets.window(t0, t1)} if budgets else {}),  # av: the drafts vLLM verified
            "tok_s": sum(window) / (t1 - t0) if t1 > t0 else None, "window_tokens": sum(window),
            "window_tokens_by_request": window, "window_s": round(t1 - t0, 4),
            "tokens": [list(latest[i].outputs[0].token_ids) for i in range(len(prompt_ids))],
            "steps": {d: {"n": len(v), "median_ms": 1000 * statistics.median(v)} for d, v in sorted(steps.items())},
            "steps_by_request_depths": own,
            # to join E2E_DECISIONS' log (perf_counter times, the engine's request ids) to the cell
            "window_clock": [round(t0, 4), round(t1, 4)],
            "request_ids": given}


def main() -> dict:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    from vllm_ds4x.depth import sim as depth_sim

    install_model()
    counters = Counters(K)
    managers = counters.install()
    drafts = DraftFilter(VOCAB, chain=successor() if DSV4 else None)  # DSpark's 2nd draft: drafts.py
    keep = {phase: depth_sim.conditional(ACCEPTANCE[phase], K) for phase in PHASES}
    drafts.set(groups={CYCLES[phase]: keep[phase] for phase in PHASES})
    drafts.install()
    from transformers import AutoTokenizer
    from vllm import LLM

    composed = {"composition": composition()} if AV else {}
    budgets = BudgetLog() if AV else None
    t0 = time.time()
    llm = LLM(**engine_args())
    result = {**record(llm, round(time.time() - t0, 1), keep), **composed}
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    log = StepLog(scheduler, lag=2 if result["async_scheduling"] else 1)
    drafts.active = True
    texts = prompts(AutoTokenizer.from_pretrained(MODELS / "target"))
    policies = chosen_policies() if MODE == "spec" else [(AV_POLICY if AV else "no speculation", None)]
    mixed_policies = policies + (twins(policies) if MODE == "spec" and TWINS else [])
    scheduling = Policies(scheduler) if MODE == "spec" else None
    if scheduling and DECISIONS:
        result["decisions"] = scheduling.decisions  # filled as the cells run, written with each
    ids = count()
    warm_up(llm, log, texts, scheduling, ids)
    counters.reset()
    pooled = pool_counters()  # the run's pool counts: from here, the warm-up's left out
    if DSV4:  # the route check, likewise: the cells' prefills only, not start-up's dummy runs or the warm-up's
        import dsv4_model

        dsv4_model.RouteCheck.rows.clear()
    for round_ in range(ROUNDS):
        for phase, n, prompt_ids, draw in cell_plan(texts):
            drafts.salt = salt(round_, draw)
            ran = mixed_policies if phase == MIXED_PHASE or n > 1 else policies
            for name, config in cell_order(ran, round_ + draw):
                if scheduling:
                    scheduling.use(name, config)
                before = accepted(spec_metrics(llm))
                counted = pool_counters()
                cell = run_cell(llm, log, walked(phase, n, prompt_ids), ids, budgets=budgets)
                after = accepted(spec_metrics(llm))
                cell.update(pool_delta(counted, pool_counters()))
                cell.update(round=round_, phase=phase, requests=n, policy=name,
                            draft_tokens=after[0] - before[0], accepted_tokens=after[1] - before[1])
                if phase == MIXED_PHASE:
                    cell.update(mix=list(mix(n)), **({"draw": draw} if MIXED_DRAWS > 1 else {}))
                result["cells"].append(cell)
                print_cell(cell)
                write({**result, **counters.report(managers)})
    if os.environ.get("E2E_PROFILE", "1") != "0":
        result["traces"] = profile(llm, log, texts, scheduling, ids)
    chain = {"draft_chain": drafts.chain_agreement()} if DSV4 else {}
    result.update(pool_delta(pooled, pool_counters()), routing=routing_record(result["cells"]))
    return {**result, **counters.report(managers), "spec_metrics": spec_metrics(llm), **chain}


POOL_COUNTS = ("hits", "misses", "pumps", "cover_miss", "cover_dup")  # lk_moe's cumulative pool_stats


def pool_counters() -> dict[str, float]:
    """lk_moe's pool counters now (vllm_ds4x.hooks.moe_pool.stats; empty without a pool)."""
    from vllm_ds4x.hooks import moe_pool

    return moe_pool.stats()


def pool_delta(before: dict[str, float], after: dict[str, float]) -> dict:
    """{"pool": what the pool counted between two reads, its hit rate from those counts}; {} without one."""
    if not after:
        return {"pool": {}}
    counts = {k: after[k] - before.get(k, 0.0) for k in POOL_COUNTS}
    looked = counts["hits"] + counts["misses"]
    return {"pool": {**counts, "hit_rate": counts["hits"] / looked if looked else 0.0,
                     "device_bytes": after.get("device_bytes", 0.0)}}


def routing_record(cells: list[dict]) -> dict:
    """DSV4_ROUTING's knobs and what its table made of the cells' tokens (each routed layer's reuse
    and distinct experts over 1, 2 and 3 consecutive tokens, as a step verifying 0, 1, 2 drafts
    reads them, averaged over the layers), and the eager rows that routed as the table says."""
    import dsv4_model

    knobs = dsv4_model.routing_knobs(os.environ.get("DSV4_ROUTING")) if DSV4 else None
    if knobs is None:
        return {"router": "random"}
    import numpy as np

    from engine.locality import measured

    per_layer = []
    for layer in dsv4_model.routed_layers():
        table = np.array(dsv4_model.routing(layer, knobs), dtype=np.int32)
        runs = [table[t] for cell in cells if cell["requests"] == 1 for t in cell["tokens"][0]]
        figures = {"reuse": measured([np.array([r]) for r in runs])["reuse"]}
        for n in (1, 2, 3):
            figures[f"distinct_{n}"] = measured([np.stack(runs[i:i + n]) for i in range(0, len(runs) - n + 1, n)])[f"distinct_{n}"]
        per_layer.append(figures)
    mean = {k: float(np.mean([f[k] for f in per_layer])) for k in per_layer[0]} if per_layer else {}
    return {"router": "locality", **knobs, "measured": mean, "gate_agrees": dsv4_model.RouteCheck.agreement()}


def print_cell(cell: dict) -> None:
    print(f"cell {cell['round']}{draw_label(cell)} {cell['phase']} x{cell['requests']} {cell['policy']}: {cell['tok_s'] or 0:.2f} tok/s, "
          f"steps { {d: round(s['median_ms'], 1) for d, s in cell['steps'].items()} }", flush=True)


def warm_up(llm, log: StepLog, texts: dict, scheduling: "Policies | None", ids: count) -> None:
    """WARMUP rounds of every phase and request count at every fixed depth, not recorded: in an H200
    run a fresh engine's first round ran 11-36% slower than its second (fixed 2, same
    cells; not in every run), which no policy should be timed on, nor adaptive learn its
    costs from."""
    from vllm_ds4x.depth import sim as depth_sim

    fixed = depth_sim.policies(K)
    for _ in range(WARMUP):
        for phase in PHASES:
            for n in REQUESTS:
                for depth in range(K + 1) if scheduling else (None,):
                    if scheduling:
                        scheduling.use(f"fixed {depth}", fixed[f"fixed {depth}"])
                    run_cell(llm, log, texts[phase][:n], ids)


def record(llm, init_s: float, keep: dict[str, float]) -> dict:
    """The run's result record, before its cells: what the engine ran with."""
    run_twins = [name for name, _ in twins(chosen_policies())] if MODE == "spec" and TWINS else []
    return {"mode": MODE, "init_s": init_s, "tokens_per_request": TOKENS,
            "async_scheduling": bool(llm.llm_engine.vllm_config.scheduler_config.async_scheduling),
            "keep": keep, "acceptance_set": ACCEPTANCE, "lk_threads": os.environ.get("LK_THREADS"),
            "tag": TAG, "overlap": os.environ.get("LVLLM_MOE_OVERLAP") or "off",
            "ubatch_tokens": os.environ.get("LVLLM_MOE_UBATCH_TOKENS") or "1",
            "warm_up_rounds": WARMUP, "mixed": MIXED, "mixed_draws": MIXED_DRAWS,
            "mixed_per_request": run_twins,
            "uniform_per_request": {"requests": [n for n in REQUESTS if n > 1], "policies": run_twins},
            "adaptive_step_cost": (adaptive_start() or {}).get("step_cost"),
            "adaptive_prior_acceptance": (adaptive_start() or {}).get("prior_acceptance"),
            **(placed := moe_layers(llm.llm_engine.vllm_config.model_config.hf_config.num_hidden_layers)),
            "arrangement": arrangement(placed), "cells": []}


def arrangement(placed: dict) -> dict:
    """What the run spends VRAM on for routed experts (E2E_MODES=pool compares these at equal VRAM):
    its resident target layers' experts and its pool's slots on the target's lk_moe layers."""
    from vllm_ds4x.hooks import moe_pool

    resident = placed.get("moe_layers", {}).get("resident", [])
    lk_layers = len(placed.get("moe_layers", {}).get("lk_moe", []))
    slots = moe_pool.settings().slots
    expert_bytes = 0
    if DSV4:
        from dsv4_model import CONFIG

        from vllm_ds4x.moe.placement import model_shape

        shape = model_shape(CONFIG)
        expert_bytes = shape.expert_bytes
        resident_bytes = len(resident) * shape.n_routed_experts * expert_bytes
    else:
        resident_bytes = 0
    return {"tag": TAG, "resident": resident, "pool_slots": slots, "lk_layers": lk_layers,
            "expert_bytes": expert_bytes, "gpu_expert_bytes": resident_bytes + slots * lk_layers * expert_bytes}


def moe_layers(layers: int) -> dict:
    """`layers`: the target's MoE layers on lk_moe, whose cpu_decode the report's model counts;
    DeepSeek-V4 keeps those of LVLLM_GPU_RESIDENT_MOE_LAYERS on the GPU (dsv4_setup.sh: DSV4_RESIDENT)
    and names every layer's placement and the kernels by source, as case.py does."""
    if not DSV4:
        return {"layers": layers}
    import portable

    placed = portable.resident_summary(layers)
    return {"layers": len(placed["lk_moe"]), "moe_layers": placed, "kernels": dict(portable.SOURCES)}


@functools.cache  # read once: the policies and the result record give the same start
def adaptive_start() -> dict | None:
    """What adaptive starts from: this run's `measure` profile's step costs and acceptance priors, as
    `plan --measure --launch` gives them to the user's engine (None: measure was skipped)."""
    path = OUTDIR / "measure.json"
    return profile_start(json.loads(path.read_text())["draft_depth"]) if path.is_file() else None


def chosen_policies() -> list[tuple[str, dict]]:
    """depth_sim's policies, or those E2E_POLICIES names (an unknown name fails the run)."""
    from vllm_ds4x.depth import sim as depth_sim

    every = depth_sim.policies(K, adaptive_start())
    names = [n.strip() for n in os.environ.get("E2E_POLICIES", "").split(",") if n.strip()]
    if unknown := [n for n in names if n not in every]:
        raise ValueError(f"E2E_POLICIES: unknown {unknown}; known: {list(every)}")
    return [(n, every[n]) for n in names] if names else list(every.items())


def twins(policies: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """The per-request twins of those of `policies` that have one (phase, adaptive), as the mixed cells and
    the uniform ones of 2 or more requests run them."""
    names = {name for name, _ in policies}
    return [(name, twin.draft_depth) for name, twin in per_request_policies(K, adaptive_start()).items()
            if name.removesuffix(PER_REQUEST) in names]


def profile(llm, log: StepLog, texts: dict, scheduling: "Policies | None", ids: count) -> list[str]:
    """Reasoning cells of E2E_PROFILE_TOKENS under torch.profiler, one trace each (graph
    kernels included: CUPTI records a replayed graph's kernels under its launch's correlation)."""
    import torch
    from torch.profiler import ProfilerActivity

    from vllm_ds4x.depth import sim as depth_sim

    tokens, made = int(os.environ.get("E2E_PROFILE_TOKENS", "24")), []
    policies = depth_sim.policies(K)
    for n in REQUESTS:
        for depth in [str(d) for d in range(K + 1)] if scheduling else ["none"]:
            if scheduling:
                scheduling.use(f"fixed {depth}", policies[f"fixed {depth}"])
            with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                run_cell(llm, log, texts["reasoning"][:n], ids, tokens)
            name = f"trace-{NAME}-x{n}-{depth}.json.gz"
            prof.export_chrome_trace(str(OUTDIR / name))
            made.append(name)
            print("profiled", name, flush=True)
    return made


def write(result: dict) -> None:
    write_json(OUTDIR / f"e2e-{NAME}.json", result)


if __name__ == "__main__":
    start = time.time()
    try:
        final = {"ok": True, **main()}
    except BaseException as e:  # reported: the report fails a run that did not finish
        import traceback

        traceback.print_exc()
        previous = OUTDIR / f"e2e-{NAME}.json"
        final = {**(json.loads(previous.read_text()) if previous.exists() else {}), "ok": False,
                 "error": repr(e)[:2000]}
    final["wall_s"] = round(time.time() - start, 1)
    write(final)
    print("RESULT", NAME, "ok" if final["ok"] else final["error"][:500], flush=True)
    os._exit(0)
