"""`plan --check-launch`'s draft-depth advice: a script that speculates with no
draft_depth (or a policy that measured worse) gets one finding with figures, from
`plan --measure`'s profile when given, else from the committed runs that the reviewed
table bench/results/advice.toml lists, and the exact draft_depth object to add; where
batches of two or more run, that object (or the script's own) verifies each request's
own depth (own_depths). A new results folder changes the advice only when the table is edited."""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast

from ds4x.checkout import HOME
from ds4x.errors import Ds4xError, InputError
from vllm_ds4x.depth import policy as draft_depth
from vllm_ds4x.depth.estimates import expected_tokens_by_depth
from vllm_ds4x.depth.named_policies import PER_REQUEST, named_policies, per_request_policies
from vllm_ds4x.measure.request import MAX_K

RESULTS = "bench/results"
TABLE = f"{RESULTS}/advice.toml"
"""the reviewed table of the runs the advice cites, under the checkout root"""
SAMPLED_WITH = "greedy"  # ci/fork-gpu/case.py: the draft_sample_method of the measured runs
Use = Literal["policy", "deepseek-v4", "verify"]
FIGURES: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {
    "policy": ((draft_depth.REASONING, draft_depth.ANSWER), (1, 2)),
    "deepseek-v4": ((draft_depth.REASONING, draft_depth.ANSWER), (1,)),
    "verify": (("mixed",), (2,)),
}
"""each use of a row: the phases it gives figures for, and at which running requests (every one of them)"""
_TEXT = ("policy", "against", "run", "commit", "device", "why")
_COMMIT = re.compile(r"[0-9a-f]{7,40}")


@dataclass(frozen=True, kw_only=True)
class Row:
    """One run and comparison of the table: `policy`'s tok/s over `against`'s, by phase and running requests."""

    number: int
    """its place in the file, from 1 (messages name it)"""
    use: Use
    policy: str
    against: str
    k: int
    """the runs' num_speculative_tokens: a row counts for scripts of the same K only"""
    figures: dict[str, dict[int, float]]
    run: str
    """the folder under bench/results/"""
    commit: str
    device: str
    why: str
    superseded_by: str | None = None
    """what replaced the code it measured; a superseded row no longer counts"""


@dataclass(frozen=True)
class Advice:
    """A finding and the draft_depth object that answers it."""

    message: str
    draft_depth: dict[str, Any]


def figure(cells: list[dict[str, Any]], policy: str, against: str, requests: int, phase: str) -> float | None:
    """The median over a run's rounds (and mixed draws) of `policy`'s tok/s over `against`'s: what a
    row's figure is, from the run's e2e-spec.json cells; None where the run has no such pair."""
    mine = [c for c in cells if c["phase"] == phase and c["requests"] == requests]
    base = {(c["round"], c.get("draw", 0)): c["tok_s"] for c in mine if c["policy"] == against}
    ratios = [c["tok_s"] / base[key] for c in mine
              if c["policy"] == policy and (key := (c["round"], c.get("draw", 0))) in base]
    return statistics.median(ratios) if ratios else None


def load(root: Path = HOME.root) -> list[Row]:
    """The table under `root`, every row checked: the first problem is one Ds4xError naming the file and row."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # a dependency on 3.10 (pins.load's)
        import tomli as tomllib
    path = root / TABLE
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise Ds4xError(f"{path}: {e.strerror}", "the advice reads the committed table: restore it from git") from None
    except tomllib.TOMLDecodeError as e:
        raise Ds4xError(f"{path}: {e}", "fix the TOML syntax") from None
    rows = raw.get("row")
    if set(raw) != {"row"} or not isinstance(rows, list):
        raise Ds4xError(f"{path}: expected [[row]] tables and nothing else", "see the file's header")
    loaded = [_row(path, number, entry) for number, entry in enumerate(rows, 1)]
    seen: dict[tuple[str, str, str, int, str], int] = {}
    for row in loaded:
        key = (row.use, row.policy, row.against, row.k, row.run)
        if key in seen:
            raise _problem(path, row.number, vars(row), f"the same run and comparison as row {seen[key]}")
        seen[key] = row.number
    return loaded


def _problem(path: Path, number: int, entry: dict[str, Any], why: str) -> Ds4xError:
    named = ", ".join(str(entry[key])[:60] for key in ("run", "policy") if isinstance(entry.get(key), str))
    return Ds4xError(f"{path}: row {number}{f' ({named})' if named else ''}: {why}",
                     "fix that row (the file's header says what each field holds)")


def _row(path: Path, number: int, entry: object) -> Row:
    if not isinstance(entry, dict):
        raise _problem(path, number, {}, "not a [[row]] table")
    use = entry.get("use")
    if use not in FIGURES:
        raise _problem(path, number, entry, f"use {use!r}: expected one of {', '.join(map(repr, FIGURES))}")
    phases, requests = FIGURES[use]
    known = {*_TEXT, "use", "num_speculative_tokens", "superseded_by", *phases}
    if unknown := sorted(set(entry) - known):
        raise _problem(path, number, entry, f"unknown field(s) {', '.join(unknown)} (a {use!r} row gives "
                                            f"{', '.join(phases)})")
    for key in (*_TEXT, "num_speculative_tokens", *phases):
        if key not in entry:
            raise _problem(path, number, entry, f"no {key}")
    for key in (*_TEXT, "superseded_by"):
        if key in entry and (not isinstance(entry[key], str) or not entry[key].strip()):
            raise _problem(path, number, entry, f"{key}: expected a non-empty string")
    k = entry["num_speculative_tokens"]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise _problem(path, number, entry, f"num_speculative_tokens {k!r}: expected a whole number in 1..{MAX_K}")
    for key in ("policy", "against"):
        if not _named(entry[key], k):
            raise _problem(path, number, entry, f"{key} {entry[key]!r}: not a named policy at K={k} "
                                                f"(vllm_ds4x/depth/named_policies.py)")
    if use == "verify" and entry["policy"] != entry["against"] + PER_REQUEST:
        raise _problem(path, number, entry, f"a 'verify' row compares a policy's per-request twin to it: policy "
                                            f"{entry['against'] + PER_REQUEST!r} for against {entry['against']!r}")
    if not _COMMIT.fullmatch(entry["commit"]):
        raise _problem(path, number, entry, f"commit {entry['commit']!r}: expected 7 to 40 lower-case hex digits")
    if "/" in entry["run"] or entry["run"] in (".", "..") or not (path.parent / entry["run"]).is_dir():
        raise _problem(path, number, entry, f"run {entry['run']!r}: no such folder beside the table")
    figures = {phase: _figures(path, number, entry, phase, requests) for phase in phases}
    return Row(number=number, use=cast(Use, use), k=k, figures=figures, superseded_by=entry.get("superseded_by"),
               **{key: entry[key] for key in _TEXT})


def _named(name: str, k: int) -> bool:
    return name in named_policies(k) or name in per_request_policies(k)


def _figures(path: Path, number: int, entry: dict[str, Any], phase: str, requests: tuple[int, ...]) -> dict[int, float]:
    """A phase's { requests = ratio }: every count of the use given, each ratio a finite number above 0."""
    given = entry[phase]
    expected = "{ " + ", ".join(f"{n} = RATIO" for n in requests) + " }"
    if not isinstance(given, dict) or sorted(given) != sorted(map(str, requests)):
        raise _problem(path, number, entry, f"{phase}: expected {expected}")
    out = {}
    for n in requests:
        value = given[str(n)]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise _problem(path, number, entry, f"{phase}.{n} {value!r}: expected a ratio, a number above 0")
        out[n] = float(value)
    return out


def counted(rows: list[Row], use: Use, policy: str, against: str, k: int) -> list[Row]:
    """The rows that count for a comparison at K drafts: not superseded."""
    return [r for r in rows if (r.use, r.policy, r.against, r.k) == (use, policy, against, k) and r.superseded_by is None]


def _cited(rows: list[Row]) -> str:
    """'4 committed runs on DEVICE: a, b, c, d in bench/results/advice.toml'"""
    devices = "; ".join(dict.fromkeys(r.device for r in rows))
    return f"{len(rows)} committed run(s) on {devices}: {', '.join(r.run for r in rows)} in {TABLE}"


def policy_name(config: draft_depth.DraftDepthConfig, k: int) -> str | None:
    """The report name of a parsed draft_depth ("fixed 2", "phase 0/2"), None if not one of the named;
    how its batches verify ("verify") aside: the depths it chooses are what the figures compare."""
    mine = replace(config, verify="batch")
    return next((name for name, p in named_policies(k).items()
                 if draft_depth.parse_draft_depth(p.draft_depth, k) == mine), None)


WHY = {draft_depth.REASONING: "verifies drafts while reasoning too", draft_depth.ANSWER: "verifies fewer drafts while answering"}
"""what a policy measured worse than phase 0/K does, by the phase it lost in"""


def from_committed(current: str, k: int, sampled: str | None, root: Path, keep: dict[str, Any]) -> Advice | None:
    """phase 0/K (adaptive where drafts are not greedy) against the script's policy, as measured in each
    phase; the object advised keeps the script's `keep` fields (its "verify")."""
    if sampled not in (None, SAMPLED_WITH):
        adaptive = {**(named_policies(k)["adaptive"].draft_depth or {}), **keep}
        return Advice(f"draft_sample_method {sampled}: the phase depths were measured with {SAMPLED_WITH} drafts; "
                      f"adaptive measures each request's acceptance as it runs: add {json.dumps(adaptive)}", adaptive)
    best = f"phase 0/{k}"
    rows = load(root)
    runs = [] if current == best else counted(rows, "policy", best, current, k)
    lost = []
    for phase, why in WHY.items():
        by_requests = [[r.figures[phase][n] for r in runs] for n in (1, 2)]
        if runs and any(min(ratios) > 1.0 for ratios in by_requests):  # worse in every run, at 1 or 2 requests
            one, two = [f"{min(ratios):.2f}-{max(ratios):.2f}x" for ratios in by_requests]
            lost.append(f"{current} {why}: {best} measured {one} {current} there at one request, {two} at two")
    if not lost:
        return None
    obj = {**(named_policies(k)[best].draft_depth or {}), **keep}
    return Advice(f"{'; '.join(lost)} ({_cited(runs)}{on_deepseek_v4(best, current, k, rows)}; for this machine: "
                  f"plan --measure, then --check-launch --profile FILE): add \"draft_depth\": {json.dumps(obj)}", obj)


def on_deepseek_v4(policy: str, against: str, k: int, rows: list[Row]) -> str:
    """The same comparison in the table's DeepSeek-V4 + DSpark runs, each phase at one request, as a clause."""
    return "".join(f"; on {r.device}: {', '.join(f'{r.figures[phase][1]:.2f}x {phase}' for phase in WHY)} at one "
                   f"request ({r.run})" for r in counted(rows, "deepseek-v4", policy, against, k))


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
    answering request: under "batch" both verify the answer's depth) in every run the table counts."""
    given = advice.draft_depth if advice else spec.get("draft_depth")
    config = draft_depth.parse_draft_depth(given, k)
    name = policy_name(config, k)
    if (max_num_seqs is not None and max_num_seqs < 2) or config.verify == "request" or name is None:
        return advice
    runs = counted(load(root), "verify", name + PER_REQUEST, name, k)
    ratios = [r.figures["mixed"][2] for r in runs]
    if not ratios or min(ratios) <= 1.0:  # no twin (fixed depths), or one that lost in a run
        return advice
    obj = {**(given or {}), "verify": "request"}
    why = (f"at --max-num-seqs {max_num_seqs or 'unset'} a reasoning and an answering request share steps, "
           f"which verify the answer's depth for both; with \"verify\": \"request\" each verifies its own "
           f"(lossless): {name} per request measured {min(ratios):.2f}-{max(ratios):.2f}x {name} on such pairs "
           f"({_cited(runs)})")
    if advice:
        return Advice(f"{advice.message.replace(json.dumps(advice.draft_depth), json.dumps(obj))}; {why}", obj)
    return Advice(f"{why}: add \"draft_depth\": {json.dumps(obj)}", obj)
