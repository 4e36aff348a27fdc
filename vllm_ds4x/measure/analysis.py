# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""measure's analysis half, pure: a timed lk_moe curve into warnings, its noise, tables, step costs, predictions and the profile.

The fork's ``vllm_ds4x.measure.request`` times lk_moe (its command line and worker
processes) and hands the runs here; ``plan --measure`` and the tests read
the same arithmetic by name.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from typing import Any

from vllm_ds4x.depth import mixed as depth_mixed
from vllm_ds4x.depth import sim as depth_sim

SLOWDOWN = 1.5  # a thread count this much slower than the best is worth a warning
PREDICT_TOKENS = {"reasoning": 3000, "answer": 800}  # a request's tokens per phase in the predictions
PREDICT_SEEDS = 10  # simulated runs a prediction averages
SPREAD_BOUND = 0.2  # a token count whose repeats' medians differ by more than this share of their median is noise
DROP_SHARE = 0.25  # more tokens costing less than fewer by more than this share of the bound: noise
DROP_SLACK = SPREAD_BOUND * DROP_SHARE  # 5% at the default bound (more experts never cost less)
Run = dict[str, Any]
"""one LK_THREADS setting's timings, as measure's worker writes them"""


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def answer_problem(answer: Any, tokens: Sequence[int], bandwidth: bool) -> str | None:
    """Why a timing worker's answer cannot be used (None: it can): the shape the worker writes, one
    case per token count of its job in order, each time finite and above 0, the bandwidth where asked."""
    if not isinstance(answer, dict):
        return f"a JSON {type(answer).__name__}, not an object"
    cases = answer.get("cases")
    if not isinstance(answer.get("path"), str) or isinstance(answer.get("threads"), bool) or \
            not isinstance(answer.get("threads"), int):
        return "no \"path\" or \"threads\""
    if not isinstance(cases, list) or not cases:
        return "no cases"
    if len(cases) != len(tokens) or not all(isinstance(c, dict) for c in cases) or \
            [c.get("tokens") for c in cases] != list(tokens):
        return f"cases for other token counts than the {len(tokens)} asked ({list(tokens)[:8]}...)"
    for case in cases:
        repeats = case.get("repeats", [case.get("ms")])
        if not _positive(case.get("ms")) or not isinstance(repeats, list) or not repeats or \
                not all(map(_positive, repeats)) or not _positive(case.get("distinct")):
            shown = {k: case.get(k) for k in ("ms", "distinct")}
            return f"at {case['tokens']} tokens {str(shown)[:80]}: times and distinct experts must be finite and above 0"
    if bandwidth and not _positive(answer.get("ram_gbs")):
        return f"RAM bandwidth {str(answer.get('ram_gbs'))[:20]}: not a finite number of GB/s above 0"
    return None


def profile_problem(profile: Any, k: int) -> str | None:
    """Why a plan --measure profile cannot be advised from (None: it can): the shape measure writes,
    its draft_depth one the policy serves at K, each phase's acceptance in (0, 1)."""
    from vllm_ds4x.depth.config import DraftDepthError, parse_draft_depth

    if not isinstance(profile, dict) or not isinstance(profile.get("draft_depth"), dict) or \
            not isinstance(profile.get("measured"), dict):
        return "no \"draft_depth\" and \"measured\" objects"
    try:
        parse_draft_depth(profile["draft_depth"], k)
    except DraftDepthError as e:
        return str(e)[:200]
    if profile["draft_depth"].get("step_cost") is None:
        return "its draft_depth has no step_cost"
    acceptance = profile["measured"].get("acceptance")
    if not isinstance(acceptance, dict) or not all(_positive(acceptance.get(p)) and acceptance[p] < 1
                                                   for p in ("reasoning", "answer")):
        return f"measured.acceptance {str(acceptance)[:60]}: expected rates in (0, 1) for reasoning and answer"
    return None


def thread_warnings(runs: list[Run]) -> tuple[Run, list[str]]:
    """The fastest run at one token, and a warning for every much slower one."""
    def one_token(run: Run) -> float:
        return float(run["cases"][0]["ms"])

    best = min(runs, key=one_token)
    warnings = [f"LK_THREADS={run['threads']}: {one_token(run):.2f} ms a layer call, {one_token(run) / one_token(best):.1f}x "
                f"the {one_token(best):.2f} ms of LK_THREADS={best['threads']}"
                for run in runs if one_token(run) > SLOWDOWN * one_token(best)]
    return best, warnings


def spread(case: dict[str, Any]) -> float:
    """How far one token count's repeats (the worker's rounds) lie apart, as a share of their median."""
    repeats = [float(ms) for ms in case.get("repeats") or [case["ms"]]]
    return (max(repeats) - min(repeats)) / statistics.median(repeats)


def noise(run: Run, bound: float = SPREAD_BOUND) -> list[str]:
    """Why a curve is too noisy to advise from: more tokens that cost less (by more than
    DROP_SHARE of `bound`), or repeats spread past `bound`, each with its figures; none
    for a clean curve."""
    cases = sorted(run["cases"], key=lambda case: case["tokens"])
    found = [f"{b['tokens']} tokens cost {b['ms']:.2f} ms, less than {a['tokens']} at {a['ms']:.2f}"
             for a, b in itertools.pairwise(cases) if b["ms"] < (1 - bound * DROP_SHARE) * a["ms"]]
    wide = max(cases, key=spread)
    if spread(wide) > bound:
        found.append(f"repeats at {wide['tokens']} tokens spread {spread(wide):.0%} of their median "
                     f"(bound {bound:.0%}, --noise-bound)")
    return found


def curve_table(run: Run, expert_bytes: float, moe_layers: int) -> list[str]:
    """The curve by tokens: distinct experts, ms a layer and a step, effective GB/s, the repeats' spread."""
    lines = [f"{'tokens':>6} {'distinct experts':>17} {'ms/layer':>9} {'ms/step':>8} {'GB/s':>6} {'spread':>6}"]
    for case in run["cases"]:
        gbs = case["distinct"] * expert_bytes / (case["ms"] / 1000) / 1e9
        lines.append(f"{case['tokens']:>6} {case['distinct']:17.1f} {case['ms']:9.2f} {case['ms'] * moe_layers:8.1f} "
                     f"{gbs:6.1f} {spread(case):6.0%}")
    return lines


def step_seconds(run: Run, k: int, moe_layers: int, rest_ms: Sequence[float], requests: int = 1) -> list[float]:
    """A step of `requests` requests verifying 1..K+1 tokens each: the measured
    CPU MoE part for every MoE layer (one call for all the step's tokens), plus
    the rest of the step (GPU side, drafter, scheduler), one figure for every
    depth or one per depth: depth_sim's step without overlap."""
    return depth_sim.step_seconds(depth_sim.run_curve(run), moe_layers, list(rest_ms), requests, k, depth_sim.Overlap())


def step_cost(seconds: list[float]) -> list[float]:
    """A step's cost by tokens verified, relative to one token: what adaptive starts from."""
    return [round(s / seconds[0], 4) for s in seconds]


def ubatch_advice(run: Run, gpu_ms: float, moe_layers: int) -> str:
    """Whether two micro-batches (LVLLM_MOE_OVERLAP=ubatch) pay on this curve, and up to how many tokens:
    the GPU part a split can hide is the rest of a step (--gpu-ms) but what runs outside the layers
    (depth_sim.OUTSIDE_MS; plan --measure --overlap takes another)."""
    hidden = depth_sim.hidden_ms(gpu_ms, moe_layers)
    tokens = depth_sim.ubatch_tokens(depth_sim.run_curve(run), hidden)
    if tokens == 0:
        return depth_sim.no_split(hidden)
    return (f"two micro-batches pay up to {tokens} token(s) each (two calls of n tokens cost less than one of 2n "
            f"plus a layer's {hidden:.2f} ms GPU part): LVLLM_MOE_OVERLAP=ubatch LVLLM_MOE_UBATCH_TOKENS={tokens}")


def batch_sizes(max_num_seqs: int) -> list[int]:
    """The running requests measure predicts and prices: one, and --max-num-seqs."""
    return sorted({1, max_num_seqs})


def step_costs(best: Run, k: int, moe_layers: int, gpu_ms: Sequence[float], max_num_seqs: int) -> dict[str, list[float]]:
    """adaptive's start: the relative step costs by running requests (1 and --max-num-seqs), as
    draft_depth.step_cost takes them; the curve's shape changes with the batch."""
    return {str(n): step_cost(step_seconds(best, k, moe_layers, gpu_ms, n)) for n in batch_sizes(max_num_seqs)}


def adaptive_start(best: Run, k: int, moe_layers: int, gpu_ms: Sequence[float], max_num_seqs: int,
                   acceptance: Sequence[float]) -> dict[str, Any]:
    """What adaptive starts from: the measured step costs, and per phase the acceptance per
    position that the phase's given rate at depth K means (`acceptance`: reasoning, answer; kept
    inside (0, 1), which prior_acceptance takes, for rates at its ends)."""
    return {"step_cost": step_costs(best, k, moe_layers, gpu_ms, max_num_seqs),
            "prior_acceptance": {phase: min(max(round(depth_sim.conditional(rate, k), 3), 0.001), 0.999)
                                 for phase, rate in zip(("reasoning", "answer"), acceptance)}}


def predict(best: Run, k: int, moe_layers: int, gpu_ms: Sequence[float], max_num_seqs: int,
            acceptance: Sequence[float]) -> tuple[dict[int, Any], list[str]]:
    """depth_sim's tok/s per policy on the measured curve, for one request and --max-num-seqs
    (`acceptance`: reasoning, answer at depth K), and the lines that print them."""
    rates = {"reasoning": acceptance[0], "answer": acceptance[1]}
    start = adaptive_start(best, k, moe_layers, gpu_ms, max_num_seqs, acceptance)
    predicted, lines = {}, []
    for requests in batch_sizes(max_num_seqs):
        costs = step_seconds(best, k, moe_layers, gpu_ms, requests)
        predicted[requests] = depth_sim.compare(costs, rates, PREDICT_TOKENS, seeds=PREDICT_SEEDS,
                                                requests=requests, start=start)  # as the profile starts it
        lines += ["", f"predicted, {requests} running request(s), the rest of a step {' / '.join(map(str, gpu_ms))} "
                      f"ms, acceptance {rates['reasoning']:.0%} reasoning / {rates['answer']:.0%} answer:",
                  *depth_sim.table(predicted[requests])]
    return predicted, lines


def mixed(best: Run, k: int, moe_layers: int, gpu_ms: Sequence[float], max_num_seqs: int,
          acceptance: Sequence[float]) -> list[str]:
    """depth_mixed's prediction for a mixed batch of --max-num-seqs (half reasoning, half answering) on the
    measured curve: every policy today (the deepest depth for all) against each request's own; none below 2."""
    if max_num_seqs < 2:
        return []
    rates = {"reasoning": acceptance[0], "answer": acceptance[1]}
    lines = depth_mixed.report(depth_sim.run_curve(best), moe_layers, gpu_ms, max_num_seqs, k, rates,
                               depth_sim.policies(k))
    return ["", f"predicted, {lines[0]}", *lines[1:]]


def profile(best: Run, runs: list[Run], fmt: str, k: int, moe_layers: int, gpu_ms: Sequence[float],
            max_num_seqs: int, acceptance: Sequence[float], predicted: dict[int, Any],
            prefill: dict[str, Any] | None = None) -> dict[str, Any]:
    """ds4x-step-cost.json: the draft_depth object adaptive starts from, what was measured, and (where
    timed) the "prefill" section plan's prefill advice reads."""
    return {**({"prefill": prefill} if prefill else {}),
            "draft_depth": {"policy": "adaptive", **adaptive_start(best, k, moe_layers, gpu_ms, max_num_seqs, acceptance)},
            "measured": {"lk_threads": best["threads"], "path": best["path"], "format": fmt,
                         "step_seconds": step_seconds(best, k, moe_layers, gpu_ms), "gpu_ms": gpu_ms,
                         "acceptance": {"reasoning": acceptance[0], "answer": acceptance[1]},
                         "runs": runs, "predicted_tok_s": predicted[1],
                         "predicted_tok_s_by_requests": {str(n): r for n, r in predicted.items()}}}


PREFILL_PATHS = ("cpu", "gpu")
"""the two ways the fork prefills an lk_moe layer: its _cpu_prefill, its GPU prefill (the hook's driver)"""


def prefill_answer_problem(answer: Any, path: str, chunks: Sequence[int]) -> str | None:
    """Why a prefill worker's answer cannot be used (None: it can): its path, the smallest chunk timed,
    every timed chunk one of those asked, in order, each ms finite and above 0, the rest listed skipped."""
    found = answer.get("prefill") if isinstance(answer, dict) else None
    if not isinstance(found, dict) or found.get("path") != path:
        return f"no \"prefill\" object for the {path} path"
    rows, skipped = found.get("rows"), found.get("skipped", [])
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows) or \
            not isinstance(skipped, list):
        return "no timed prefill chunk"
    timed = [r.get("rows") for r in rows]
    if timed[0] != min(chunks) or sorted([*timed, *skipped]) != sorted(chunks) or timed != sorted(timed):
        return f"prefill chunks {str(timed)[:60]} (skipped {str(skipped)[:40]}), not the {list(chunks)} asked"
    for row in rows:
        if not _positive(row.get("ms")):
            return f"at {row['rows']} rows ms {str(row.get('ms'))[:20]}: a prefill time must be finite and above 0"
    if path == "gpu" and not isinstance(found.get("engine"), str):
        return "no GPU prefill engine named"
    return None


def crossover(rows: Sequence[dict[str, Any]]) -> int | None:
    """The smallest chunk from which the GPU is faster at every larger chunk timed both ways; None where
    it is not faster at the largest (or nothing was timed both ways)."""
    both = [r for r in sorted(rows, key=lambda r: r["rows"]) if r.get("cpu_ms") and r.get("gpu_ms")]
    found = None
    for row in reversed(both):
        if row["gpu_ms"] >= row["cpu_ms"]:
            break
        found = row["rows"]
    return found


LAYER_KEYS = ("experts", "top_k", "hidden", "inter")
"""the layer's shape a prefill section records (measure's layer spec), which plan checks against --config"""


def prefill_section(cpu: Run, gpu: Run | None, batched: int, layer: dict[str, Any] | None = None) -> dict[str, Any]:
    """The profile's "prefill" section from the workers' answers (prefill_answer_problem-checked): ms a
    layer call by chunk size each way (None: not timed), the crossover, the engine, the LK_THREADS, and
    the layer timed (`layer`: measure's spec; its LAYER_KEYS and format)."""
    cpu_ms = {r["rows"]: r["ms"] for r in cpu["prefill"]["rows"]}
    gpu_ms = {r["rows"]: r["ms"] for r in gpu["prefill"]["rows"]} if gpu else {}
    rows = [{"rows": n, "cpu_ms": cpu_ms.get(n), "gpu_ms": gpu_ms.get(n)} for n in sorted({*cpu_ms, *gpu_ms})]
    skipped = {way: sorted(run["prefill"]["skipped"]) for way, run in (("cpu", cpu), ("gpu", gpu)) if run}
    return {"lk_threads": cpu["threads"], "max_num_batched_tokens": batched,
            "engine": gpu["prefill"]["engine"] if gpu else None, "cpu_path": cpu["prefill"]["how"],
            "gpu_path": gpu["prefill"]["how"] if gpu else None, "rows": rows, "crossover": crossover(rows),
            "not_timed_in_budget": skipped,
            **({"layer": {key: layer[key] for key in (*LAYER_KEYS, "format")}} if layer else {})}


def prefill_tok_s(rows: int, layers: int, ms: float) -> float:
    """Prefill tok/s of a chunk of `rows` tokens through `layers` lk_moe layers at `ms` a layer call: the
    routed experts only (attention, resident layers and the rest of the model come on top)."""
    return rows / (max(layers, 1) * ms / 1000)


def prefill_problem(section: Any) -> str | None:
    """Why a profile's "prefill" section cannot be read (None: it can): the shape prefill_section writes."""
    if not isinstance(section, dict) or not isinstance(section.get("rows"), list) or not section["rows"]:
        return "no \"rows\" list"
    for row in section["rows"]:
        if not isinstance(row, dict) or isinstance(row.get("rows"), bool) or not isinstance(row.get("rows"), int) \
                or row["rows"] < 1:
            return f"row {str(row)[:60]}: no whole number of \"rows\" above 0"
        for way in ("cpu_ms", "gpu_ms"):
            if row.get(way) is not None and not _positive(row[way]):
                return f"at {row['rows']} rows {way} {str(row[way])[:20]}: finite and above 0, or null"
    if not any(row.get("cpu_ms") for row in section["rows"]):
        return "no chunk timed on the CPU"
    engine = section.get("engine")
    if engine is not None and not isinstance(engine, str):
        return f"engine {str(engine)[:20]}: a name or null"
    layer = section.get("layer")
    if layer is not None and (not isinstance(layer, dict) or not all(
            isinstance(layer.get(key), int) and not isinstance(layer.get(key), bool) for key in LAYER_KEYS)):
        return f"layer {str(layer)[:80]}: whole numbers for {', '.join(LAYER_KEYS)}"
    return None


def prefill_table(section: dict[str, Any], moe_layers: int) -> list[str]:
    """The prefill curve by chunk size: ms a layer call and tok/s over `moe_layers` lk_moe layers each way."""
    gpu = section["engine"] is not None
    lines = [f"{'chunk':>6} {'CPU ms/layer':>13} {'CPU tok/s':>10}" + (f" {'GPU ms/layer':>13} {'GPU tok/s':>10}"
                                                                       if gpu else "")]
    for row in section["rows"]:
        line = f"{row['rows']:>6}"
        for way in ("cpu_ms", "gpu_ms") if gpu else ("cpu_ms",):
            ms = row[way]
            line += f" {ms:13.2f} {prefill_tok_s(row['rows'], moe_layers, ms):10.0f}" if ms else f" {'-':>13} {'-':>10}"
        lines.append(line)
    left_out = {way: rows for way, rows in section["not_timed_in_budget"].items() if rows}
    if left_out:
        lines.append("not timed within --prefill-budget: " + "; ".join(
            f"{way.upper()} {', '.join(map(str, rows))} rows" for way, rows in left_out.items()))
    if not gpu:
        lines.append("GPU prefill not timed: no GPU here (torch sees none in --python)")
    elif section["crossover"]:
        lines.append(f"the GPU ({section['engine']}) is faster from {section['crossover']} tokens a chunk")
    else:
        lines.append(f"the GPU ({section['engine']}) is not faster at the largest chunk timed")
    return lines
