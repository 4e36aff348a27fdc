"""The end-to-end report's mixed batches (#38): checked, tabled, and held to depth_mixed.

ci/fork-gpu/e2e.py runs them in each round after the phase-pure cells (phase "mixed",
the engine's record listing the batch sizes it planned under "mixed"; E2E_MIXED=0: none).
bench/e2e_decode.py calls this module:
- `problems`: fails closed on a planned mixed cell that is missing or did not measure
  (every policy the engine ran and each per-request twin it planned, every round and draw),
  greedy tokens that differ between the
  policies of a batch, and a policy that verified another depth than the deepest its
  requests chose (today's batch-uniform depth);
- `report`: steady decode tok/s over the batch and per request phase, and the step by
  verified depth, per policy; then depth_mixed's prediction of today's batch-uniform
  depth, fed the mixed cells' own measured step at each depth (fixed 0..K) and the
  acceptance measured in the phase-pure cells, against the measurement within the
  report's slack; and each request verifying its own depth (the layer's curve for the
  step's tokens, plus the measured rest at the deepest depth): predicted, and where the
  engine ran a policy's per-request twin, measured against that and against its
  batch-uniform twin in the same round; and #38's target, MET or MISSED: phase 0/K's and
  adaptive's twins at least MIXED_TARGET over today's depth, beside the mixed cells' own
  noise floor and, for phase 0/K, the gain the run's curve alone predicts (the rest of a step free).
Runs without mixed cells (older ones, E2E_MIXED=0) print nothing here.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_ds4x.depth import mixed as depth_mixed
from vllm_ds4x.depth.named_policies import PER_REQUEST, any_policy, named_policies, per_request_policies
from vllm_ds4x.depth.phase_tracker import PHASES

MIXED = "mixed"
NO_SPEC = "no speculation"
Cell = Mapping[str, Any]
Cells = dict[tuple[int, str], list[dict[str, Any]]]
"""(requests, policy) -> the batch's mixed cells, one a round and draw"""
MIXED_TARGET = 1.15
"""#38: a mixed batch's steady tok/s, each request verifying its own depth, over today's batch depth"""


def mixed_cells(runs: Sequence[Mapping[str, Any]]) -> Cells:
    """Every engine's mixed cells by batch size and policy."""
    out: Cells = defaultdict(list)
    for run in runs:
        for cell in run.get("cells", []):
            if cell.get("phase") == MIXED:
                out[cell["requests"], cell["policy"]].append(cell)
    return out


def occasion(cell: Cell) -> tuple[int, int]:
    """The round and the mixed draw a cell ran in (e2e.py's E2E_MIXED_DRAWS; draw 0 in runs without):
    the cells of one occasion met the same draws, so they are paired by it."""
    return cell["round"], cell.get("draw", 0)


def occasions(rounds: Sequence[int], draws: int) -> set[tuple[int, int]]:
    """Every (round, draw) a run of these rounds must hold a kind of mixed cell in (draws: its mixed_draws)."""
    return {(r, d) for r in rounds for d in range(draws)}


def shortfall(got: int, rounds: int, draws: int) -> str:
    """'1 of 2 rounds measured', or with draws (E2E_MIXED_DRAWS) '5 of 6 rounds x 3 draws measured'."""
    return f"{got} of {rounds * draws} rounds{f' x {draws} draws' if draws > 1 else ''} measured"


def draw_label(cell: Cell) -> str:
    """" draw N" for a cell of a run with E2E_MIXED_DRAWS, else nothing (as cells are headed)."""
    return f" draw {cell['draw']}" if "draw" in cell else ""


def expected_depth(policy: str, k: int) -> str | None:
    """The one depth a policy's mixed batch verifies today: the deepest its requests choose
    (named_policies' verified_depths over the batch's phases); None: adaptive chooses."""
    if policy == NO_SPEC:
        return "0"
    depths = any_policy(policy, k).verified_depths(k)
    return None if depths is None else str(max(depths))


def problems(runs: Sequence[Mapping[str, Any]], k: int) -> list[str]:
    """What fails a run with mixed batches (see the module)."""
    found: list[str] = []
    cells = mixed_cells(runs)
    for run in runs:
        ran = [c for c in run.get("cells", []) if c.get("phase") != MIXED]
        rounds = sorted({c["round"] for c in ran})
        # the policies it ran, and the twins it planned (also found in uniform cells: named once)
        policies = list(dict.fromkeys([*(c["policy"] for c in ran), *run.get("mixed_per_request", [])]))
        draws = run.get("mixed_draws", 1)
        planned = occasions(rounds, draws)
        for n in run.get("mixed", []):
            for policy in policies:
                got = {occasion(c) for c in cells.get((n, policy), []) if measured(c)}
                if got != planned:
                    found.append(f"mixed x{n} {policy}: {shortfall(len(got), len(rounds), draws)}")
    for n in sorted({n for n, _ in cells}):
        variants = {json.dumps(c["tokens"]) for (m, _), cs in cells.items() if m == n for c in cs}
        if len(variants) > 1:
            found.append(f"mixed x{n}: greedy tokens differ between cells ({len(variants)} variants)")
    for (n, policy), cs in sorted(cells.items()):
        want = expected_depth(policy, k)
        for cell in cs:
            if want is not None and set(cell["steps"]) != {want}:
                found.append(f"mixed x{n} {policy} round {cell['round']}{draw_label(cell)}: steps at depths "
                             f"{sorted(cell['steps'])}, expected only {want} (the deepest its requests chose)")
    return found


def measured(cell: Mapping[str, Any]) -> bool:
    """A mixed cell that measured: a rate, and each request's tokens in the window."""
    window = cell.get("window_tokens_by_request")
    return cell.get("tok_s") is not None and isinstance(window, list) and len(window) == len(cell.get("mix", []))


def phase_tokens(cell: Mapping[str, Any], phase: str) -> int:
    """The tokens a mixed cell's requests in `phase` made in its window, together."""
    return sum(t for p, t in zip(cell["mix"], cell["window_tokens_by_request"]) if p == phase)


def phase_rate(cell: Mapping[str, Any], phase: str) -> float:
    """A mixed cell's steady tok/s of its requests in `phase`, together."""
    return float(phase_tokens(cell, phase) / cell["window_s"])


def spread(values: Sequence[float]) -> str:
    """Median [min-max], as the report's tables print a rate."""
    return f"{statistics.median(values):7.2f} [{min(values):.2f}-{max(values):.2f}]"


def rate_table(cells: Cells, n: int, policies: Sequence[str], baseline: str) -> tuple[list[str], dict[str, float]]:
    """Lines (tok/s over the batch, against `baseline` in the same round, per phase, the step
    by verified depth), and the median tok/s of each policy."""
    base = {occasion(c): c["tok_s"] for c in cells[n, baseline]}
    width = max(15, *map(len, policies))
    lines = [f"{'policy':<{width}} {'tok/s median [range]':>24} {'vs ' + baseline:>10} {'reasoning':>10} {'answer':>8}"
             "   step ms by verified depth"]
    medians = {}
    for policy in policies:
        runs = cells[n, policy]
        medians[policy] = statistics.median(c["tok_s"] for c in runs)
        ratios = [c["tok_s"] / base[occasion(c)] for c in runs if occasion(c) in base]
        by_phase = [statistics.median(phase_rate(c, p) for c in runs) for p in PHASES]
        depths = sorted({d for c in runs for d in c["steps"]})
        steps = ", ".join(f"{d}: {step_ms(cells, n, policy, d):.1f}" for d in depths)
        lines.append(f"{policy:<{width}} {spread([c['tok_s'] for c in runs]):>24} "
                     f"{statistics.median(ratios) if ratios else float('nan'):>10.3f} {by_phase[0]:10.2f} "
                     f"{by_phase[1]:8.2f}   {steps}")
    return lines, medians


def request_depths(cells: Cells, n: int, policies: Sequence[str]) -> list[str]:
    """For each policy whose cells counted them (runs since steps_by_request_depths), its mixed
    cells' steps over the rounds by the depth each request verified, the most first."""
    lines = []
    for policy in policies:
        counts: Counter[str] = Counter()
        for cell in cells[n, policy]:
            counts.update(cell.get("steps_by_request_depths", {}))
        if total := sum(counts.values()):
            lines.append(f"{policy}: " + ", ".join(f"{d} {c / total:.0%}" for d, c in counts.most_common()))
    return ["", f"steps by the depth each request verified, mixed x{n} (all rounds)", *lines] if lines else []


def step_ms(cells: Cells, n: int, policy: str, depth: str) -> float:
    """Median over the rounds of a policy's mixed cells' median step at this verified depth."""
    return float(statistics.median(c["steps"][depth]["median_ms"] for c in cells[n, policy] if depth in c["steps"]))


def predictions(n: int, k: int, acceptance: Mapping[str, float], measured_tok_s: Mapping[str, float],
                seconds: Sequence[float], per_request: depth_mixed.Cost | None,
                slack: float) -> tuple[list[str], list[str]]:
    """depth_mixed's batch-uniform prediction on uniform steps `seconds` by depth against the
    measurement, and each request's own depth (predicted); lines and misses beyond `slack`."""
    own = per_request or depth_mixed.uniform_cost(seconds)
    lines = [f"{'policy':<12} {'measured':>9} {'predicted':>10} {'error':>7}   {'per request':>11} {'depths':>7} "
             f"{'gain':>6}"]
    misses = []
    for name, config in named_policies(k).items():
        got = measured_tok_s[name]
        c = depth_mixed.compare(config.draft_depth, depth_mixed.mix(n), acceptance, k, seconds, own)
        want = c.uniform.tok_s
        after = (f"{c.per_request.tok_s:11.2f} {depth_mixed.depths_text(c.per_request.depths):>7} {c.gain:6.3f}"
                 if per_request else f"{'-':>11} {'-':>7} {'-':>6}")
        lines.append(f"{name:<12} {got:9.2f} {want:10.2f} {want / got - 1:+7.1%}   {after}")
        if abs(want / got - 1) > slack:
            misses.append(f"mixed x{n} {name}: predicted {want:.2f}, measured {got:.2f} ({want / got - 1:+.1%})")
        twin = measured_tok_s.get(name + PER_REQUEST)
        if twin is not None and per_request:
            mine = c.per_request.tok_s
            lines.append(f"{name + PER_REQUEST:<12} {twin:9.2f} {mine:10.2f} {mine / twin - 1:+7.1%}   "
                         "(the per-request prediction, run)")
            if abs(mine / twin - 1) > slack:
                misses.append(f"mixed x{n} {name}{PER_REQUEST}: predicted {mine:.2f}, measured {twin:.2f} "
                              f"({mine / twin - 1:+.1%})")
    return lines, misses


def rates(cell: Mapping[str, Any]) -> dict[str, float]:
    """A mixed cell's steady tok/s over the batch and of each phase's requests."""
    return {"batch": float(cell["tok_s"]), **{p: phase_rate(cell, p) for p in PHASES}}


def twin_gains(cells: Cells, n: int, k: int) -> list[str]:
    """Each per-request twin the engine ran against its batch-uniform twin, paired by round:
    the ratio of their steady tok/s over the batch, and of each phase's."""
    lines = []
    for twin in per_request_policies(k):
        if (n, twin) not in cells:
            continue
        base = twin.removesuffix(PER_REQUEST)
        ratios = {what: paired(cells, n, twin, base, what) for what in ("batch", *PHASES)}
        lines.append(f"{twin:<22} vs {base}: " + ", ".join(
            f"{what} {statistics.median(r):.3f} [{min(r):.3f}-{max(r):.3f}]" for what, r in ratios.items() if r))
    return lines


def paired(cells: Cells, n: int, policy: str, base: str, what: str = "batch") -> list[float]:
    """A policy's tok/s (over the batch, or of one phase's requests) over `base`'s, one ratio a round."""
    return [rates(c)[what] / rates(b)[what] for c, b in same_round(cells[n, policy], cells[n, base])]


def noise_floor(cells: Cells, n: int, k: int) -> float | None:
    """The largest difference, in any one round, between two policies whose mixed batch verifies the
    same one depth today (fixed K and the phase policies): what these cells cannot tell apart, round by
    round, as the target's ratios are paired; None: no such pair ran."""
    by_depth: dict[str, list[str]] = defaultdict(list)
    for m, policy in cells:
        if m == n and policy != NO_SPEC and not policy.endswith(PER_REQUEST) and (d := expected_depth(policy, k)):
            by_depth[d].append(policy)
    ratios = [r for same in by_depth.values() for a, b in itertools.combinations(sorted(same), 2)
              for r in paired(cells, n, a, b)]
    return max((abs(r - 1) for r in ratios), default=None)


def target_policies(k: int) -> tuple[str, str]:
    """#38's policies held to MIXED_TARGET: phase 0/K and adaptive."""
    return f"phase 0/{k}", "adaptive"


def curve_bound(n: int, k: int, acceptance: Mapping[str, float], curve: Mapping[int, float], layers: int,
                policy: str) -> float | None:
    """The gain per request gives a phase `policy` on the run's curve alone (its CPU experts, the rest
    of a step free), at `acceptance`: the most it can give in expectation on this run's layer, since
    its depths are fixed by phase and the rest, paid at the deepest depth either way, only dilutes the
    saving (a run's own mixed cells, with their own acceptance draws, can land above it). None where
    the curve cannot price the steps, and for adaptive, whose depths today and per request move with
    the step costs."""
    if expected_depth(policy, k) is None or uncovered(curve, n, k):
        return None
    cost = depth_mixed.curve_cost(curve, layers, [0.0], k)
    uniform = [cost([d] * n) for d in range(k + 1)]  # today's steps priced as per request's: only the rows differ
    return depth_mixed.compare(named_policies(k)[policy].draft_depth, depth_mixed.mix(n), acceptance, k, uniform,
                               cost).gain


def uncovered(curve: Mapping[int, float], n: int, k: int) -> str | None:
    """Why the curve cannot price every step of a mixed batch of n (n..n(K+1) tokens, timed or
    between timings); None where it can."""
    try:
        for tokens in range(n, n * (k + 1) + 1):
            depth_mixed.curve_ms(curve, tokens)
    except ValueError as e:
        return str(e)
    return None


def targets(cells: Cells, n: int, k: int, floor: float | None, bounds: Mapping[str, float | None]) -> list[str]:
    """#38's target for each of target_policies whose twin ran, MET or MISSED (median of the rounds'
    paired ratios), either by less than the floor said so, with the curve's figure where there is one."""
    lines = []
    for policy in target_policies(k):
        twin = policy + PER_REQUEST
        if (n, twin) not in cells or not (ratios := paired(cells, n, twin, policy)):
            continue
        ratio = statistics.median(ratios)
        close = floor is not None and abs(ratio / MIXED_TARGET - 1) < floor  # met or missed, a tie here
        near = f" (by less than these cells' noise floor, {floor:.1%})" if close else ""
        bound = bounds.get(policy)
        lines.append(f"{'MET   ' if ratio >= MIXED_TARGET else 'MISSED'} mixed x{n}: {twin} >= {MIXED_TARGET}x "
                     f"{policy}: {ratio:.3f}{near}"
                     + (f"; on the curve alone, the rest of a step free: {bound:.3f}" if bound else ""))
    return lines


def same_round(cells: Sequence[Cell], base: Sequence[Cell]) -> list[tuple[Cell, Cell]]:
    """A per-request twin's cells, each with its batch-uniform twin's cell of the same round (and draw)."""
    by_occasion = {occasion(b): b for b in base}
    return [(c, by_occasion[occasion(c)]) for c in cells if occasion(c) in by_occasion]


def curve_cost(curve: Mapping[int, float], layers: int, seconds: Sequence[float], n: int,
               k: int) -> tuple[depth_mixed.Cost | None, str]:
    """Per-request steps priced on the layer's curve plus the measured rest (a uniform step at
    each depth less its CPU experts); None and why where the curve cannot price them."""
    if why := uncovered(curve, n, k):
        return None, f"per request not predicted: {why}"
    rest = [1000 * s - layers * depth_mixed.curve_ms(curve, n * (d + 1)) for d, s in enumerate(seconds)]
    guessed = depth_mixed.interpolated(curve, range(n, n * (k + 1) + 1))
    return depth_mixed.curve_cost(curve, layers, rest, k), (
        "per request: the layer's curve for the step's tokens plus the measured rest at the deepest depth"
        + (f" ({', '.join(map(str, guessed))} tokens interpolated)" if guessed else ""))


def report(runs: Sequence[Mapping[str, Any]], k: int, acceptance: Mapping[str, float], curve: Mapping[int, float],
           layers: int, slack: float) -> tuple[list[str], list[str]]:
    """The mixed sections of the report (see the module), and the predictions' misses."""
    cells = mixed_cells(runs)
    lines: list[str] = []
    misses: list[str] = []
    for n in sorted({n for n, _ in cells}):
        policies = [p for p in [NO_SPEC, *named_policies(k), *per_request_policies(k)] if (n, p) in cells]
        table, medians = rate_table(cells, n, policies, f"fixed {k}")
        phases = depth_mixed.mix(n)
        lines += ["", f"mixed, {n} running requests ({' + '.join(phases)}): steady decode tok/s over the batch, "
                      "and per phase", *table, *request_depths(cells, n, policies)]
        seconds = [step_ms(cells, n, f"fixed {d}", str(d)) / 1000 for d in range(k + 1)]
        cost, how = curve_cost(curve, layers, seconds, n, k)
        found, missed = predictions(n, k, acceptance, medians, seconds, cost, slack)
        lines += ["", f"depth_mixed against the engine, mixed x{n}: today's depth for the whole batch, fed the mixed "
                      f"cells' own step at each depth (fixed 0..{k}); acceptance as measured in the phase-pure cells; "
                      + how, *found]
        if gains := twin_gains(cells, n, k):
            floor = noise_floor(cells, n, k)
            bounds = {p: curve_bound(n, k, acceptance, curve, layers, p) for p in target_policies(k)}
            lines += ["", f"each request verifying its own depth against the batch's, mixed x{n}: tok/s ratio, "
                          "median [range] of the rounds (same round, same engine)", *gains,
                      "noise floor of these cells (the largest difference in a round between policies whose batch "
                      "verifies the same depth today): " + (f"{floor:.1%}" if floor is not None else "none (no such pair ran)"),
                      *targets(cells, n, k, floor, bounds)]
        misses += missed
    return lines, misses
