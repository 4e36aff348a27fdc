"""The serving script `plan --launch` writes, and `plan --check-launch`'s read
of any such script (generated or by hand): exported variables and `vllm serve`
options against the plan and this machine."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ds4x.checkout import HOME
from ds4x.deploy import measured_advice, pool_advice, prefill_advice, script_reader
from ds4x.deploy.planned import MAX_MODEL_LEN, MAX_PARALLEL, Plan, PlanRequest
from ds4x.deploy.script_reader import Launch
from ds4x.errors import InputError
from ds4x.inputs import read_text
from vllm_ds4x import bounded
from vllm_ds4x.depth import composition
from vllm_ds4x.depth import config as depth_config
from vllm_ds4x.depth import policy as draft_depth
from vllm_ds4x.depth.named_policies import named_policies
from vllm_ds4x.measure import analysis
from vllm_ds4x.moe import engine_inputs, overlap_plan, pool, prefill
from vllm_ds4x.moe import placement as mp

Compute = Callable[[PlanRequest], Plan]
"""plan.compute: the plan at a set of plan options"""
LK_SHARE = 0.75  # measured here: 12 of 16 cores is fastest, 16 of 16 is 14x slower
OMP_MEASURED = ("torch at 16 threads beside LK_THREADS=12 made fixed 0's two-request DeepSeek-V4 step 92.0 ms against 24.2 "
                "at 1 thread: bench/results/h200-dsv4-e2e against h200-dsv4-e2e-omp1")  # held to the runs by a test
DEFAULT_POLICY = named_policies(2)["phase 0/2"]  # without a measure profile: the best measured while reasoning
PHASE_02 = DEFAULT_POLICY.draft_depth


@dataclass(frozen=True)
class Line:
    """An exported variable or a `vllm serve` option, and where its value came from."""

    name: str
    value: str
    why: str


def lk_threads(profile: dict[str, Any] | None) -> tuple[int, str]:
    if profile:
        return int(profile["measured"]["lk_threads"]), "plan --measure: fastest of the LK_THREADS it timed"
    cores = os.cpu_count() or 1
    return max(1, int(cores * LK_SHARE)), (f"{LK_SHARE:.0%} of this machine's {cores} cores, untimed: "
                                           f"plan --measure times it (all cores is the 14x cliff)")


def lines(args: PlanRequest, result: Plan, profile: dict[str, Any] | None) -> tuple[list[Line], list[Line]]:
    """(environment, options) of the serving command."""
    plan, choice = result.budget, result.choice
    gib = 2**30
    resident = ",".join(map(str, choice.layers)) or "none"
    threads, threads_why = lk_threads(profile)
    k = args.num_speculative_tokens
    depth = profile["draft_depth"] if profile else PHASE_02
    depth_why = ("plan --measure: adaptive from this machine's step costs" if profile else
                 f"{DEFAULT_POLICY.name}: the best measured while reasoning, within noise answering "
                 f"(docs/measured-on-gpu.md)")
    spec = {"method": "dspark", "num_speculative_tokens": k, "draft_depth": depth}
    if own := measured_advice.own_depths(None, spec, k, HOME.root, args.max_num_seqs):  # what --check-launch advises
        spec["draft_depth"] = own.draft_depth
        depth_why += "; each request of a batch verifies its own depth (docs/mixed-batches.md)"
    env = [
        Line("LVLLM_MOE_NUMA_ENABLED", "1", "the fork runs the routed experts of CPU layers on lk_moe"),
        Line("LVLLM_GPU_RESIDENT_MOE_LAYERS", resident,
             f"plan: {len(choice.layers)} layer(s) fit the {plan.for_resident_layers / gib:.2f} GiB left on the GPU"),
        Line("LK_THREADS", str(threads), threads_why),
    ]
    options = [
        Line("--max-model-len", str(args.max_model_len), "plan --max-model-len"),
        Line("--max-num-seqs", str(args.max_num_seqs), "plan --max-num-seqs"),
        Line("--gpu-memory-utilization", str(args.gpu_memory_utilization), "plan --gpu-memory-utilization"),
        Line("--kv-cache-dtype", args.kv_cache_dtype, "plan --kv-cache-dtype"),
        Line("--tensor-parallel-size", str(args.tp), "plan --tp"),
        Line("--pipeline-parallel-size", str(args.pp), "plan --pp"),
        Line("--reasoning-parser", "deepseek_v4", "its end markers give the draft-depth policy its phase"),
        Line("--speculative-config", json.dumps(spec), depth_why),
        Line("--compilation-config", json.dumps({"cudagraph_mode": "FULL_DECODE_ONLY"}),
             "full decode graphs, one per verify depth the policy uses"),
    ]
    return env, options


def script(model: str, env: list[Line], options: list[Line]) -> str:
    out = ["#!/usr/bin/env bash",
           "# DeepSeek-V4-Flash on lk_moe, written by `python build.py plan --launch`; each value says where it",
           "# came from. Check it after an edit (or a script of your own): python build.py plan --check-launch FILE",
           "set -euo pipefail"]
    out += [f"export {e.name}={shlex.quote(e.value)}  # {e.why}" for e in env]
    out.append("args=(")
    out += [f"  {o.name} {shlex.quote(o.value)}  # {o.why}" for o in options]
    out.append(")")
    out.append(f'exec vllm serve {shlex.quote(model)} "${{args[@]}}" "$@"')
    return "\n".join(out) + "\n"


# ---- reading a script


def read(path: Path) -> Launch:
    """Exported or assigned variables and the `vllm serve` options (an args array
    or one long command line alike), as script_reader reads them."""
    text = read_text(path, "--check-launch ", 1 << 20)
    try:
        launch = script_reader.with_vllm_parser(script_reader.read(text))
    except script_reader.ScriptError as e:
        raise InputError(f"--check-launch {path}: {e}", "give a shell script with balanced quotes") from None
    if launch.insert_at < 0:
        raise InputError(f"--check-launch {path}: no `vllm serve` command in it",
                         "give the script that starts the server with `vllm serve MODEL ...`")
    return launch


@dataclass
class Findings:
    """What --check-launch found, and the changes --write makes for it."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    fixes: list[script_reader.Fix] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """advice with nothing to change (the script already does it, or it needs an input not given)"""

    def fix(self, fix: script_reader.Fix) -> None:
        """`fix`, in place of an earlier one of the same setting (the later check knows more)."""
        self.fixes = [f for f in self.fixes if (f.option, f.key) != (fix.option, fix.key)] + [fix]


def check(launch: Launch, args: PlanRequest, compute: Compute,
          profile: tuple[dict[str, Any], Path] | None = None, cores: int | None = None,
          pool_hit_rate: float | None = None) -> Findings:
    """A script against the plan (`compute`: plan.compute) at its own settings on a
    machine of `cores` (default: this one's), its draft depth against the
    measurements (`profile`: plan --measure's, and its file), and its resident
    layers against lk_moe's expert pool at `pool_hit_rate`."""
    found = Findings()
    errors, warnings = found.errors, found.warnings
    errors.extend(launch.problems)  # where bash would read the script otherwise than this check
    cores = cores or os.cpu_count() or 1
    threads, share = launch.env.get("LK_THREADS"), str(max(1, int(cores * LK_SHARE)))
    if threads is None:
        why = "LK_THREADS is not set: lk_moe picks its own; plan --measure says which is fastest"
        warnings.append(why)
        found.fixes.append(script_reader.Fix("LK_THREADS", "", share, f"{why}; {LK_SHARE:.0%} of {cores} cores until then"))
    elif not _whole(threads):
        errors.append(f"LK_THREADS={threads[:40]!r}: not a whole number of threads; give one, e.g. {share}")
        found.fixes.append(script_reader.Fix("LK_THREADS", "", share, errors[-1]))
    elif not 0 < int(threads) < cores:
        errors.append(f"LK_THREADS={threads} on {cores} cores: all cores (or more) is the 14x cliff; "
                      f"leave some free, e.g. {share} (plan --measure times it)")
        found.fixes.append(script_reader.Fix("LK_THREADS", "", share, errors[-1]))
    _check_torch_threads(launch, cores, found)
    request = _script_request(launch, args, found.errors)
    shape = _check_memory(launch, request, compute, found) if request else None
    _check_engine_env(launch, found, shape)
    _check_depth(launch, found, profile)
    if request:
        curve = prefill_advice.measured(profile[0], f"--profile {profile[1]}") if profile else None
        request = _check_prefill(launch, request, args, compute, found, curve)
        _check_pool(launch, request, compute, found, pool_hit_rate)
    found.errors.extend(script_reader.vllm_config_problems(launch.options))  # vLLM's own classes, where importable
    return found


def _check_torch_threads(launch: Launch, cores: int, found: Findings) -> None:
    """OMP_NUM_THREADS beside LK_THREADS past the cores: torch's CPU threads in the GPU worker then
    share lk_moe's cores (vLLM sets 1 there where it is unset)."""
    torch_threads, lk = launch.env.get("OMP_NUM_THREADS", ""), launch.env.get("LK_THREADS", "")
    if not (_whole(torch_threads) and _whole(lk)) or int(torch_threads) <= 1 or int(torch_threads) + int(lk) <= cores:
        return
    why = (f"OMP_NUM_THREADS={torch_threads} beside LK_THREADS={lk} on {cores} cores: torch's CPU threads in the GPU "
           f"worker share lk_moe's cores (measured on the H200, 16 cores: {OMP_MEASURED}); vLLM sets 1 where it is unset")
    found.warnings.append(why)
    found.fixes.append(script_reader.Fix("OMP_NUM_THREADS", "", "1", why))


def _whole_or_none(text: str) -> int | None:
    """A whole number of ASCII digits ('\u00b2' passes isdigit() and fails int()); None where it is not one."""
    try:
        return bounded.whole(text, 0, 2**31)
    except bounded.BoundError:
        return None


def _whole(text: str) -> bool:
    return _whole_or_none(text) is not None


def _utilization(text: str) -> float:
    """--gpu-memory-utilization as vLLM takes it: in (0, 1]."""
    try:
        value = bounded.rate(text, 0, 1)
    except bounded.BoundError:
        value = 0.0
    if value == 0:
        raise bounded.BoundError(f"{text[:40]!r}: expected a number in (0, 1], e.g. 0.92")
    return value


def _kv_dtype(text: str) -> str:
    """A kv-cache dtype the plan models (the error names the script's option, not the config)."""
    try:
        mp.kv_token_bytes(1, text)
    except mp.PlacementError as e:
        raise bounded.BoundError(f"{text[:40]!r}: {str(e).split(': ', 1)[-1]}") from None
    return text


def _num_seqs(text: str) -> int:
    """vLLM refuses 0; more requests than tokens in the shared KV pool cannot all hold one."""
    return bounded.whole(text, 1, MAX_MODEL_LEN)


_SETTINGS: dict[str, tuple[str, Callable[[str], object]]] = {
    "--max-model-len": ("max_model_len", lambda text: bounded.whole(text, 1, MAX_MODEL_LEN)),
    "--gpu-memory-utilization": ("gpu_memory_utilization", _utilization),
    "--kv-cache-dtype": ("kv_cache_dtype", _kv_dtype),
    "--tensor-parallel-size": ("tp", lambda text: bounded.whole(text, 1, MAX_PARALLEL)),
    "--pipeline-parallel-size": ("pp", lambda text: bounded.whole(text, 1, MAX_PARALLEL)),
    "--max-num-seqs": ("max_num_seqs", _num_seqs),
}
"""the script's memory settings the plan is recomputed at: option -> (PlanRequest field, parse)"""


def _script_request(launch: Launch, args: PlanRequest, errors: list[str]) -> PlanRequest | None:
    """The plan options at the script's own memory settings and pool; None where it sets one the plan refuses."""
    changes: dict[str, object] = {}
    for option, (name, parse) in _SETTINGS.items():
        if option in launch.options:
            try:
                changes[name] = parse(launch.options[option])
            except bounded.BoundError as e:
                errors.append(f"{option} {e}")
                return None
    if pool.SLOTS_ENV in launch.env:  # the pool's VRAM comes out of the resident layers' (refused values: _check_engine_env)
        with contextlib.suppress(mp.PlacementError):
            changes["pool_slots"] = pool.pool_settings({pool.SLOTS_ENV: launch.env[pool.SLOTS_ENV]}).slots
    with contextlib.suppress(mp.PlacementError):  # GPU prefill as the fork runs the script (refused: _check_engine_env)
        on = prefill.prefill_settings(launch.env)
        changes.update(gpu_prefill_min_batch=on.min_batch, prefill_engine=on.engine, prefetch_window=on.window)
    tokens = _whole_or_none(launch.options.get("--max-num-batched-tokens", ""))
    if tokens:  # "8k" and the like: vLLM's to read, the plan's default stands
        changes["max_num_batched_tokens"] = tokens
    return replace(args, **changes)  # type: ignore[arg-type]  # each field's own type, by the table above


def _check_memory(launch: Launch, args: PlanRequest, compute: Compute, found: Findings) -> mp.ModelShape:
    """The plan at the script's own settings (`args`), and its resident layers against it; the model's shape."""
    errors = found.errors
    result = compute(args)
    budget = result.budget
    if budget.for_resident_layers < 0:
        instead = prefill_advice.alternative(args, compute) if budget.prefill else ""
        errors.append(f"at --max-model-len {args.max_model_len}, --gpu-memory-utilization {args.gpu_memory_utilization}"
                      f" the model does not fit ({-budget.for_resident_layers / 2**30:.2f} GiB short on --gpu-mem"
                      f"{', GPU prefill included' if budget.prefill else ''}){instead}")
        return result.shape
    value = launch.env.get(mp.LAYERS_ENV)
    try:
        selection = mp.parse_layers(value)
    except mp.PlacementError as e:
        errors.append(str(e))
        return result.shape
    fit, moe_layers = len(result.choice.layers), len(result.shape.moe_layers)
    asked = moe_layers if selection.mode == "all" else len(selection.layers)
    if selection.mode != "auto" and asked > fit:
        errors.append(f"{mp.LAYERS_ENV}={value}: {asked} resident layers, only {fit} fit "
                      f"({budget.for_resident_layers / 2**30:.2f} GiB left at these settings)")
    else:
        try:  # the engine's own placement: layers that name no MoE layer, an auto:GiB budget that does not fit
            mp.place(selection, result.shape, budget, draft_resident=not args.cpu_draft_layers, tp_size=args.tp)
        except mp.PlacementError as e:
            errors.append(str(e))
        else:
            return result.shape
    found.fixes.append(script_reader.Fix(mp.LAYERS_ENV, "", ",".join(map(str, result.choice.layers)) or "none",
                                       errors[-1]))
    return result.shape


_ENGINE_ENV: dict[str, Callable[[str], object]] = {
    mp.DRAFT_ENV: lambda value: mp.parse_flag(value, mp.DRAFT_ENV, default=True),
    mp.PREFETCH_ENV: lambda value: mp.parse_positive_int(value, mp.PREFETCH_ENV, mp.DEFAULT_PREFETCH_WINDOW),
    mp.PREFILL_MIN_ENV: lambda value: mp.parse_positive_int(value, mp.PREFILL_MIN_ENV, 0),
    overlap_plan.ENV: overlap_plan.parse_level,
    overlap_plan.TOKENS_ENV: overlap_plan.parse_tokens,
    **{name: pool.setting_parser(name) for name in pool.NAMES},
    prefill.ENGINE_ENV: prefill.parse_engine,
    **{name: lambda value, name=name: prefill.check_sglang_name(name, value)  # type: ignore[misc]
       for name in prefill.SGLANG_NAMES},
}
"""the script's variables the fork parses at start-up, each with the fork's own parser"""


def _unbridged() -> dict[str, str]:
    """lk_moe's names that only its sglang integration reads, each with what to do in a fork script instead."""
    return {**{name: f"set {fork_name} instead" if fork_name else "the fork has nothing like it, so remove it"
               for name, fork_name in prefill.SGLANG_NAMES.items()},
            **pool.UNBRIDGED}


def _check_engine_env(launch: Launch, found: Findings, shape: mp.ModelShape | None) -> None:
    """Each variable of _ENGINE_ENV the script sets, as the fork parses it at start-up; then what the
    engine refuses at start-up of their values together with the options: a GPU-prefill minimum above
    --max-num-batched-tokens, a routing-statistics file it cannot read or whose counts it refuses."""
    for name, parse in _ENGINE_ENV.items():
        if name in launch.env:
            try:
                parse(launch.env[name])
            except ValueError as e:  # PlacementError, OverlapError
                found.errors.append(str(e))
    with contextlib.suppress(mp.PlacementError):  # a value refused above is reported already
        if pool.pool_settings(launch.env).on and prefill.prefill_settings(launch.env).on:
            found.errors.append(f"{pool.SLOTS_ENV}={launch.env[pool.SLOTS_ENV]} with GPU prefill ({mp.PREFILL_MIN_ENV}="
                                f"{launch.env[mp.PREFILL_MIN_ENV]}): the engine refuses both at start-up (lk_moe's "
                                f"GPU prefill borrows the pool's VRAM, which ds4x does not bracket yet); set one to 0")
    for name, instead in _unbridged().items():
        if name in launch.env:
            found.warnings.append(f"{name}={launch.env[name][:40]}: lk_moe's name for its sglang integration; lk_moe "
                                  f"takes it from its config only and the fork does not bridge it: {instead}")
    try:
        if mp.PREFILL_MIN_ENV in launch.env and "--max-num-batched-tokens" in launch.options:
            most = _whole_or_none(launch.options["--max-num-batched-tokens"])  # "8k" and the like: vLLM's to read
            if most is not None:
                mp.check_prefill_min_batch(
                    mp.parse_positive_int(launch.env[mp.PREFILL_MIN_ENV], mp.PREFILL_MIN_ENV, 0), most)
    except mp.PlacementError as e:  # a value parse_positive_int refuses is reported above already
        if str(e) not in found.errors:
            found.errors.append(str(e))
    path = launch.env.get(mp.ROUTING_ENV)
    if path and shape is not None:
        if "$" in path:
            found.errors.append(f"{mp.ROUTING_ENV}={path[:60]!r}: an expansion this check does not follow; write "
                                f"the file's path into the script")
            return
        try:  # opened and checked by the engine's own reader
            engine_inputs.routing_stats(shape, path)
        except mp.PlacementError as e:
            found.errors.append(f"{e}; the engine refuses it at start-up")


def _check_depth(launch: Launch, found: Findings, profile: tuple[dict[str, Any], Path] | None) -> None:
    errors, warnings = found.errors, found.warnings
    raw = launch.options.get("--speculative-config")
    if raw is None:
        warnings.append("no --speculative-config: no draft depth policy, no speculation")
        return
    try:
        spec = bounded.loads(raw)
        k = spec["num_speculative_tokens"]
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= depth_config.MAX_K:  # before any table of k
            raise ValueError(f"num_speculative_tokens={str(k)[:40]!r}: expected a whole number in "
                             f"1..{depth_config.MAX_K}, e.g. 2")
        config = draft_depth.parse_draft_depth(spec.get("draft_depth"), k)
        composition.refuse_with_adaptive_verification(SimpleNamespace(
            draft_depth=spec.get("draft_depth"),
            enable_adaptive_verification=_engine_bool(spec.get("enable_adaptive_verification", False))))
    except (ValueError, KeyError, TypeError, draft_depth.DraftDepthError) as e:
        errors.append(f"--speculative-config: {str(e)[:400]}")
        return
    if profile and (why := analysis.profile_problem(profile[0], k)):
        raise InputError(f"--profile {profile[1]}: not a plan --measure profile: {why}",
                         "give the file plan --measure wrote (--profile-out)")
    advice = measured_advice.advise(spec, k, profile, max_num_seqs=_max_num_seqs(launch))
    if advice:
        warnings.append(advice.message)
        found.fixes.append(script_reader.Fix("--speculative-config", "draft_depth", advice.draft_depth, advice.message))
    _check_graphs(launch, found)
    _check_graph_depths(config, k, spec.get("draft_depth"), found, fixed=bool(advice))


def _check_prefill(launch: Launch, args: PlanRequest, asked: PlanRequest, compute: Compute,
                   found: Findings, curve: prefill_advice.Measured | None = None) -> PlanRequest:
    """What GPU prefill costs the resident layers at the script's context: a note, or where the plan options ask
    for it (--gpu-prefill-min-batch) and the script runs CPU prefill, a warning whose fixes turn it on with the
    resident layers that then fit; with `curve` (--profile's prefill section) the speeds it measured. The request
    the rest is checked at (with GPU prefill on where advised)."""
    plan = compute(args)
    if plan.budget.for_resident_layers < 0 or args.pool_slots:
        return args  # _check_memory says it does not fit; _check_engine_env refuses GPU prefill beside the pool
    on = _prefill_on(launch, args, asked, compute)
    found_fit = prefill_advice.fit(on, compute)
    said = prefill_advice.sentence(found_fit, args.max_model_len, curve, plan.shape) + prefill_advice.alternative(on, compute)
    want, tokens = asked.gpu_prefill_min_batch, prefill_advice.batched_tokens(args)
    if args.gpu_prefill_min_batch or not want or found_fit.with_prefill is None or want > tokens:
        late = f"; --gpu-prefill-min-batch {want} is above the {tokens} tokens a step holds" if want > tokens else ""
        found.notes.append(said + late)
        return args
    why = f"--gpu-prefill-min-batch {want} asks for GPU prefill: {said}"
    found.warnings.append(f"{mp.PREFILL_MIN_ENV} is 0 (CPU prefill); {why}")
    found.fix(script_reader.Fix(mp.PREFILL_MIN_ENV, "", str(want), why))
    if on.prefill_engine != args.prefill_engine:
        found.fix(script_reader.Fix(prefill.ENGINE_ENV, "", on.prefill_engine, why))
    if on.prefetch_window != args.prefetch_window:
        found.fix(script_reader.Fix(mp.PREFETCH_ENV, "", str(on.prefetch_window), why))
    layers = compute(on).choice.layers
    if _resident_count(launch, plan) > len(layers):
        found.fix(script_reader.Fix(mp.LAYERS_ENV, "", ",".join(map(str, layers)) or "none", why))
    return on


def _prefill_on(launch: Launch, args: PlanRequest, asked: PlanRequest, compute: Compute) -> PlanRequest:
    """The script's request with GPU prefill on: as the script sets it, else as the plan options ask, with the
    engine and window the script leaves unset chosen for the resident layers they leave (prefill_advice.roomiest)."""
    if args.gpu_prefill_min_batch:
        return args
    on = replace(args, gpu_prefill_min_batch=asked.gpu_prefill_min_batch or 1,
                 prefill_engine=args.prefill_engine if prefill.ENGINE_ENV in launch.env else asked.prefill_engine,
                 prefetch_window=args.prefetch_window if mp.PREFETCH_ENV in launch.env else asked.prefetch_window)
    return prefill_advice.roomiest(on, compute, engine_set=prefill.ENGINE_ENV in launch.env,
                                   window_set=mp.PREFETCH_ENV in launch.env)


def _resident_count(launch: Launch, plan: Plan) -> int:
    """The resident layers the script asks for (auto: those that fit)."""
    try:
        selection = mp.parse_layers(launch.env.get(mp.LAYERS_ENV))
    except mp.PlacementError:
        return 0
    if selection.mode == "all":
        return len(plan.shape.moe_layers)
    return len(plan.choice.layers) if selection.mode == "auto" else len(selection.layers)


def _check_pool(launch: Launch, args: PlanRequest, compute: Compute, found: Findings, hit: float | None) -> None:
    """lk_moe's expert pool against whole resident layers in the VRAM the script leaves them, at the draft
    depths the script runs after the draft-depth advice; --write sets the winner where the script differs."""
    plan = compute(replace(args, pool_slots=0))
    policy = _pool_policy(launch, found)
    if plan.budget.for_resident_layers < 0 or policy is None or args.gpu_prefill_min_batch:
        return  # GPU prefill beside the pool: the engine refuses it (_check_engine_env)
    space = pool_advice.room(plan.shape, plan.budget.for_resident_layers, args.tp, plan.choice.layers)
    advice = pool_advice.advise(plan.shape, space, policy, hit, HOME.root)
    if advice is None:
        return
    mine = "pool" if args.pool_slots else "layers"
    if advice.winner in (None, mine):
        found.notes.append(advice.message)
        return
    found.warnings.append(advice.message)
    for name, value in pool_advice.settings(advice.winner, space).items():
        found.fix(script_reader.Fix(name, "", value, advice.short))


def _pool_policy(launch: Launch, found: Findings) -> pool_advice.Policy | None:
    """The depths the script verifies once --write has made the draft-depth advice; None where its
    --speculative-config is refused (_check_depth says so)."""
    raw = launch.options.get("--speculative-config")
    if raw is None:
        return pool_advice.Policy(name="no speculation", k=0, depths=(0, 0))
    advised = [f.value for f in found.fixes if (f.option, f.key) == ("--speculative-config", "draft_depth")]
    try:
        spec = bounded.loads(raw)
        k = spec["num_speculative_tokens"]
        config = draft_depth.parse_draft_depth(advised[-1] if advised else spec.get("draft_depth"), k)
    except (ValueError, KeyError, TypeError, draft_depth.DraftDepthError):
        return None
    name = measured_advice.policy_name(config, k) or config.policy
    reasoning, answer = (config.phase_depth(phase, k) for phase in (draft_depth.REASONING, draft_depth.ANSWER))
    depths = (reasoning, answer) if reasoning is not None and answer is not None else None
    return pool_advice.Policy(name=name, k=k, depths=depths)


def _engine_bool(value: object) -> bool:
    """A JSON value as vLLM's pydantic reads a bool field (lax: "true", "on", 1 are true)."""
    return value is True or value == 1 or (isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "t", "y"))


def _max_num_seqs(launch: Launch) -> int | None:
    """The script's --max-num-seqs, parsed as the plan reads it; None where unset or refused
    (_check_memory reports a value it refuses)."""
    text = launch.options.get("--max-num-seqs")
    try:
        return None if text is None else _num_seqs(text)
    except bounded.BoundError:
        return None


def _check_graphs(launch: Launch, found: Findings) -> None:
    raw = launch.options.get("--compilation-config")
    if raw is not None and not isinstance(script_reader.json_or_text(raw), dict):
        found.errors.append(f"--compilation-config {raw[:60]!r}: not a JSON object; vLLM refuses it, give e.g. "
                            f"'{{\"cudagraph_mode\": \"FULL_DECODE_ONLY\"}}'")
        return
    mode = script_reader.json_object(raw).get("cudagraph_mode")
    if mode != "FULL_DECODE_ONLY":
        why = "decode steps verify in full graphs only with FULL_DECODE_ONLY"
        found.warnings.append(f"cudagraph_mode {mode or 'unset'}: {why} (--compilation-config)")
        found.fixes.append(script_reader.Fix("--compilation-config", "cudagraph_mode", "FULL_DECODE_ONLY", why))


def _check_graph_depths(config: draft_depth.DraftDepthConfig, k: int, given: Any, found: Findings,
                        fixed: bool) -> None:
    """Graphs at every depth the policy chooses; the fix adds the missing ones to the user's object
    (`fixed`: the advice already replaces that object, with graphs at every depth)."""
    chosen = {d for phase in (draft_depth.REASONING, draft_depth.ANSWER) if (d := config.phase_depth(phase, k)) is not None}
    missing = chosen - set(config.verify_depths(k))
    if not missing:
        return
    depths = sorted(set(config.verify_depths(k)) | missing)
    found.warnings.append(f"draft_depth.graph_depths {sorted(config.verify_depths(k))} lacks the depths the policy "
                          f"chooses {sorted(missing)}: those steps verify the next graph depth up; give {depths}")
    if not fixed and isinstance(given, dict):
        found.fixes.append(script_reader.Fix("--speculative-config", "draft_depth", {**given, "graph_depths": depths},
                                           found.warnings[-1]))
