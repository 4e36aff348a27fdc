"""`plan --check-launch`'s draft-depth advice: a script that speculates with no
draft_depth (or a policy that measured worse) gets one finding with figures, from
`plan --measure`'s profile when given, else from the committed H200 measurements,
and the exact draft_depth object to add; where batches of two or more run, that
object (or the script's own) verifies each request's own depth (own_depths)."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ds4x.checkout import HOME
from ds4x.errors import InputError
from vllm_ds4x.depth import policy as draft_depth
from vllm_ds4x.depth.estimates import expected_tokens_by_depth
from vllm_ds4x.depth.named_policies import PER_REQUEST, named_policies

RESULTS = "bench/results"
RUNS = "h200-e2e*/e2e-spec.json"  # the end-to-end runs on the H200 stand-in, each policy per round and phase
DSV4_RUN = "h200-dsv4-e2e-10-layers/e2e-spec.json"  # DeepSeek-V4 + DSpark, CPU experts at a real box's share, one request
MIXED_RUNS = "h200-dsv4-e2e*/e2e-spec.json"  # DeepSeek-V4 + DSpark runs; those with per-request twins hold mixed pairs
SAMPLED_WITH = "greedy"  # ci/fork-gpu/case.py: the draft_sample_method of the measured runs


@dataclass(frozen=True)
class Advice:
    """A finding and the draft_depth object that answers it."""

    message: str
    draft_depth: dict[str, Any]


def policy_name(config: draft_depth.DraftDepthConfig, k: int) -> str | None:
    """The report name of a parsed draft_depth ("fixed 2", "phase 0/2"), None if not one of the named;
    how its batches verify ("verify") aside: the depths it chooses are what the figures compare."""
    mine = replace(config, verify="batch")
    return next((name for name, p in named_policies(k).items()
                 if draft_depth.parse_draft_depth(p.draft_depth, k) == mine), None)


def committed_ratios(policy: str, against: str, results: Path,
                     phase: str = draft_depth.REASONING) -> list[tuple[float, float]]:
    """Per committed run: the (one-request, two-request) median per-round tok/s
    ratio of `policy` to `against` in `phase`."""
    out = []
    for path in sorted(results.glob(RUNS)):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        one, two = (_median_ratio(cells, policy, against, n, phase) for n in (1, 2))
        if one is not None and two is not None:
            out.append((one, two))
    return out


def _median_ratio(cells: list[dict[str, Any]], policy: str, against: str, requests: int, phase: str) -> float | None:
    """The median over a run's rounds (and mixed draws) of `policy`'s tok/s over `against`'s."""
    mine = [c for c in cells if c["phase"] == phase and c["requests"] == requests]
    base = {(c["round"], c.get("draw", 0)): c["tok_s"] for c in mine if c["policy"] == against}
    ratios = [c["tok_s"] / base[key] for c in mine
              if c["policy"] == policy and (key := (c["round"], c.get("draw", 0))) in base]
    return statistics.median(ratios) if ratios else None


def mixed_ratios(policy: str, results: Path) -> list[float]:
    """Per committed DeepSeek-V4 + DSpark run with mixed pairs: the median ratio of `policy`'s
    per-request twin to `policy` in a batch of a reasoning and an answering request."""
    out = []
    for path in sorted(results.glob(MIXED_RUNS)):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        if (ratio := _median_ratio(cells, policy + PER_REQUEST, policy, 2, "mixed")) is not None:
            out.append(ratio)
    return out


WHY = {draft_depth.REASONING: "verifies drafts while reasoning too", draft_depth.ANSWER: "verifies fewer drafts while answering"}
"""what a policy measured worse than phase 0/K does, by the phase it lost in"""


def from_committed(current: str, k: int, sampled: str | None, root: Path, keep: dict[str, Any]) -> Advice | None:
    """phase 0/K (adaptive where drafts are not greedy) against the script's policy, as measured in each
    phase; the object advised keeps the script's `keep` fields (its "verify")."""
    if sampled not in (None, SAMPLED_WITH):
        adaptive = {**(named_policies(k)["adaptive"].draft_depth or {}), **keep}
        return Advice(f"draft_sample_method {sampled}: the phase depths were measured with {SAMPLED_WITH} drafts; "
                      f"adaptive measures each request's acceptance as it runs: add {json.dumps(adaptive)}", adaptive)
    best, lost, counted = f"phase 0/{k}", [], 0
    for phase, why in WHY.items():
        runs = [] if current == best else committed_ratios(best, current, root / RESULTS, phase)
        if runs and any(min(r[i] for r in runs) > 1.0 for i in (0, 1)):  # worse in every run, at 1 or 2 requests
            one, two = [f"{min(r[i] for r in runs):.2f}-{max(r[i] for r in runs):.2f}x" for i in (0, 1)]
            lost.append(f"{current} {why}: {best} measured {one} {current} there at one request, {two} at two")
            counted = max(counted, len(runs))
    if not lost:
        return None
    obj = {**(named_policies(k)[best].draft_depth or {}), **keep}
    return Advice(f"{'; '.join(lost)} (committed H200 measurements, Qwen2-MoE stand-in with DeepSeek-V4-Flash's "
                  f"experts, {counted} runs: {RESULTS}/{RUNS}{on_deepseek_v4(best, current, root)}; for this machine: "
                  f"plan --measure, then --check-launch --profile FILE): add \"draft_depth\": {json.dumps(obj)}", obj)


def on_deepseek_v4(policy: str, against: str, root: Path) -> str:
    """The same comparison in the committed DeepSeek-V4 + DSpark run, each phase at one request, as a clause."""
    path = root / RESULTS / DSV4_RUN
    if not path.is_file():
        return ""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    ratios = {phase: _median_ratio(cells, policy, against, 1, phase) for phase in WHY}
    shown = ", ".join(f"{ratio:.2f}x {phase}" for phase, ratio in ratios.items() if ratio is not None)
    return f"; on DeepSeek-V4 + DSpark, CPU experts at a real box's share: {shown} at one request ({RESULTS}/{DSV4_RUN})" \
        if shown else ""


def from_profile(config: draft_depth.DraftDepthConfig, k: int, profile: dict[str, Any], where: Path) -> Advice | None:
    """The profile's own draft_depth against the script's reasoning depth, at the profile's acceptance,
    for each batch size its step costs are given by (measure writes them by running requests)."""
    costs = profile["draft_depth"]["step_cost"]
    by_requests = {int(n): c for n, c in costs.items()} if isinstance(costs, dict) else {1: costs}
    acceptance = profile["measured"]["acceptance"][draft_depth.REASONING]
    mine = config.phase_depth(draft_depth.REASONING, k)
    depth = k if isinstance(config, draft_depth.FixedDepth) else mine
    found = []
    for requests, cost in sorted(by_requests.items()):
        rates = [t / c for t, c in zip(expected_tokens_by_depth([acceptance] * k, len(cost) - 1), cost)]
        best = max(range(len(rates)), key=rates.__getitem__)
        if depth is not None and depth < len(rates) and rates[best] > rates[depth]:
            found.append(f"at {requests} running request(s), step costs {cost}: depth {best} yields "
                         f"{rates[best] / rates[depth]:.2f}x the tokens per step cost of depth {depth}")
    if not found:
        return None
    obj = dict(profile["draft_depth"])
    return Advice(f"verifying {depth} draft(s) while reasoning: at this machine's reasoning acceptance {acceptance} "
                  f"(plan --measure profile {where}), {'; '.join(found)}: add \"draft_depth\": {json.dumps(obj)}", obj)


def advise(spec: dict[str, Any], k: int, profile: tuple[dict[str, Any], Path] | None,
           root: Path = HOME.root, max_num_seqs: int | None = None) -> Advice | None:
    """The finding for a parsed --speculative-config, None when its policy is the advised one
    (max_num_seqs: the script's --max-num-seqs, None where it leaves vLLM's default)."""
    return own_depths(_policy_advice(spec, k, profile, root), spec, k, root, max_num_seqs)


def _policy_advice(spec: dict[str, Any], k: int, profile: tuple[dict[str, Any], Path] | None,
                   root: Path) -> Advice | None:
    config = draft_depth.parse_draft_depth(spec.get("draft_depth"), k)
    if profile:
        try:
            draft_depth.parse_draft_depth(profile[0]["draft_depth"], k)  # the object it would advise (a ValueError)
            return from_profile(config, k, *profile)
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
            raise InputError(f"--profile {profile[1]}: not a plan --measure profile ({type(e).__name__}: "
                             f"{str(e)[:100]})", "give the file plan --measure wrote (--profile-out)") from None
    current = policy_name(config, k)
    if current is None or isinstance(config, draft_depth.AdaptiveDepth):
        return None  # a policy of its own, or adaptive: measured within noise of the best fixed depth
    keep = {} if config.verify == "batch" else {"verify": config.verify}
    return from_committed(current, k, spec.get("draft_sample_method"), root, keep)


def own_depths(advice: Advice | None, spec: dict[str, Any], k: int, root: Path,
               max_num_seqs: int | None) -> Advice | None:
    """`advice`, its object (else the script's) also verifying each request's own depth where batches
    of two or more can run and its policy's per-request twin gained on mixed pairs (a reasoning and an
    answering request: under "batch" both verify the answer's depth) in every committed run."""
    given = advice.draft_depth if advice else spec.get("draft_depth")
    config = draft_depth.parse_draft_depth(given, k)
    name = policy_name(config, k)
    if (max_num_seqs is not None and max_num_seqs < 2) or config.verify == "request" or name is None:
        return advice
    ratios = mixed_ratios(name, root / RESULTS)
    if not ratios or min(ratios) <= 1.0:  # no twin (fixed depths), or one that lost in a run
        return advice
    obj = {**(given or {}), "verify": "request"}
    why = (f"at --max-num-seqs {max_num_seqs or 'unset'} a reasoning and an answering request share steps, "
           f"which verify the answer's depth for both; with \"verify\": \"request\" each verifies its own "
           f"(lossless): {name} per request measured {min(ratios):.2f}-{max(ratios):.2f}x {name} on such pairs "
           f"({len(ratios)} committed H200 DeepSeek-V4 + DSpark runs: {RESULTS}/{MIXED_RUNS})")
    if advice:
        return Advice(f"{advice.message.replace(json.dumps(advice.draft_depth), json.dumps(obj))}; {why}", obj)
    return Advice(f"{why}: add \"draft_depth\": {json.dumps(obj)}", obj)
