#!/usr/bin/env python3
"""What the draft-depth hooks add to vLLM's scheduler step, at equal verified work.

The patched vLLM Scheduler at 16, 256 and 1024 running requests, each policy
against the same Scheduler with ds4x switched off (fixed policy, no reasoning
parser: the hooks see None and vLLM runs its own path), in the same run. Every
request is given K=2 drafts a step.

- Equal verified work (the hooks' cost alone): policies whose requests all verify
  K, as with ds4x off: fixed with phase tracking, phase K/K (reasoning_depth =
  answer_depth = K) and adaptive with min_depth K (it keeps every estimate and
  decides as usual, and K is its only choice); phase and adaptive are given graph
  depths 0..K, so the scheduler's cut scan runs as it does for phase 1/K or 0/K.
- A second ds4x-off scheduler in the same rounds: its ratio is the noise floor.
- Fewer drafts verified (phase 1/K, 0/K while reasoning): the scheduler's side of
  cutting drafts, which schedules fewer tokens: not the hooks' cost, labelled apart.

Prints the median step (schedule + update) over the rounds, the median and the
interquartile range of each round's ratio to its own ds4x-off run, that median
as microseconds per request, and the median ratio of the mean steps (a cost paid
on some steps only, such as decisions all due at once, would hide from the
median); with --hook-timing, also the time spent inside the hook calls
themselves (cut_to_batch_depth, before_output, on_step_end), per step and per request.
Adaptive reaches its steady decision pace after about 112 steps (it reviews a
steady choice every 16, 32, then 64 steps): keep --steps at 200.

Run with the Python of a venv that has our vLLM wheel:
    ENGINE_PYTHON -m bench.scheduler_overhead MODEL_DIR [--requests 16 256 1024] [--answering 0.0 0.25]
        [--rounds 11] [--steps 200] [--hook-timing] [--no-cuts]
MODEL_DIR: any model directory with a tokenizer (engine/tiny_model.py makes one).
"""

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import init_none_hash
from vllm.v1.outputs import DraftTokenIds

from engine.scheduler_check import END_THINK, THINK, K, output, request, scheduler
from vllm_ds4x.depth.named_policies import harness_policies

WARM_UP = 20  # steps left out of every run: admission, first decisions
GRAPHS = list(range(K + 1))
CONTROL = "ds4x off, again"  # a second ds4x-off scheduler: its ratio is the noise floor
EQUAL = {  # every request verifies K, as with ds4x off
    "fixed + phase tracking": {"policy": "fixed"},
    f"phase {K}/{K}": {"policy": "phase", "reasoning_depth": K, "answer_depth": K, "graph_depths": GRAPHS},
    f"adaptive (min_depth {K})": {"policy": "adaptive", "min_depth": K, "graph_depths": GRAPHS},
}
CUTS = {  # reasoning requests verify fewer drafts: the harness's phase policies
    p.name: p.draft_depth for p in harness_policies(K).values() if p.draft_depth and p.draft_depth["policy"] == "phase"}
HOOKS = ("cut_to_batch_depth", "before_output", "on_step_end")


def timed_hooks(hooks: Any, spent: list[float]) -> None:
    """Wrap the scheduler's ds4x hook calls: their time adds to spent[0]."""
    def timed(call: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            start = time.perf_counter()
            result = call(*args)
            spent[0] += time.perf_counter() - start
            return result
        return run

    for name in HOOKS:
        setattr(hooks, name, timed(getattr(hooks, name)))


def started(model: str, config: dict[str, Any] | None, requests: int, answering: float) -> tuple[Any, list[str]]:
    """A scheduler with `requests` decoding, after their prefill step. config None: ds4x
    off, with the same reasoning parser (which costs vLLM its own work per token)."""
    s = scheduler(model, config or {"policy": "fixed"}, False, reasoning_parser="deepseek_r1", max_num_seqs=requests)
    if config is None:
        s.ds4x_depth = None
    ids = [f"r{i}" for i in range(requests)]
    closed = int(requests * answering)  # the first ones answer: their prompt closed the reasoning section
    for i, rid in enumerate(ids):
        s.add_request(request(rid, [5] * 8 + ([THINK, 8, END_THINK] if i < closed else [THINK]), max_tokens=900))
    out = s.schedule()
    s.update_from_output(out, output(ids, {r: [20] for r in ids}))
    assert len(s.running) == requests
    return s, ids


class Run:
    """One scheduler under one policy, stepped one step at a time (the rounds interleave
    every policy's steps, so a slow spell of the machine falls on all of them alike)."""

    def __init__(self, model: str, config: dict[str, Any] | None, requests: int, answering: float,
                 hook_timing: bool) -> None:
        self.s, self.ids = started(model, config, requests, answering)
        self.drafts = DraftTokenIds(self.ids, [[30, 31]] * requests)
        self.times: list[float] = []
        self.spent = [0.0]  # seconds inside the hooks
        if hook_timing and self.s.ds4x_depth is not None:
            timed_hooks(self.s.ds4x_depth, self.spent)

    def step(self, step: int) -> None:
        s, ids = self.s, self.ids
        if step == WARM_UP:
            self.times.clear()
            self.spent[0] = 0.0
        start = time.perf_counter()
        s.update_draft_token_ids(self.drafts)
        out = s.schedule()
        middle = time.perf_counter()
        # the model's answer (not timed): a third of the drafts rejected at once
        sampled = {r: ([30, 21] if (step + i) % 3 else [22])[: len(out.scheduled_spec_decode_tokens.get(r, ())) + 1]
                   for i, r in enumerate(ids)}
        runner_output = output(ids, sampled)
        resume = time.perf_counter()
        s.update_from_output(out, runner_output)
        self.times.append(time.perf_counter() - resume + middle - start)
        assert len(out.num_scheduled_tokens) == len(ids), "every request must stay running"


def one_round(args: argparse.Namespace, policies: dict[str, dict[str, Any] | None], requests: int,
              answering: float, turn: int) -> dict[str, Run]:
    """Every policy's scheduler, stepped in turn, the order rotating each step. The
    order they are made in rotates with `turn` (the round): the first one made runs
    slower (by about 2% at 256 requests, whatever its policy)."""
    gc.collect()  # the previous round's garbage is not this one's to collect
    names = list(policies)
    names = names[turn % len(names):] + names[: turn % len(names)]
    runs = {name: Run(args.model, policies[name], requests, answering, args.hook_timing) for name in names}
    order = list(runs.values())
    for step in range(args.steps):
        turn = step % len(order)
        for run in order[turn:] + order[:turn]:
            run.step(step)
    return runs


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def line(name: str, runs: list[list[float]], base: list[list[float]], requests: int, spent: list[float]) -> str:
    """One policy: its median step, and its rounds' ratios to their own ds4x-off run."""
    ratios = [statistics.median(t) / statistics.median(b) - 1 for t, b in zip(runs, base)]
    means = [statistics.mean(t) / statistics.mean(b) - 1 for t, b in zip(runs, base)]
    low, median, high = quartiles(ratios)
    base_s = statistics.median(map(statistics.median, base))
    text = (f"  {name:<24} {statistics.median(map(statistics.median, runs)) * 1e3:7.3f} ms  {median:+6.1%} "
            f"(IQR {low:+.1%}..{high:+.1%}), {median * base_s / requests * 1e6:+.2f} us per request; "
            f"mean {statistics.median(means):+.1%}")
    if spent:
        steps = len(runs[0])
        inside = statistics.median(spent) / steps
        text += (f"; inside the hooks {inside * 1e6:.1f} us a step, {inside / requests * 1e6:.3f} us per request "
                 f"({inside / base_s:.1%} of the ds4x-off step)")
    return text


def measure(args: argparse.Namespace, requests: int, answering: float) -> None:
    policies: dict[str, dict[str, Any] | None] = {"ds4x off": None, CONTROL: None, **EQUAL, **({} if args.no_cuts else CUTS)}
    runs: dict[str, list[list[float]]] = {name: [] for name in policies}
    spent: dict[str, list[float]] = {name: [] for name in policies}
    for turn in range(args.rounds):  # each round's ratios are to its own baseline
        for name, run in one_round(args, policies, requests, answering, turn).items():
            runs[name].append(run.times)
            spent[name].append(run.spent[0])
    base = runs["ds4x off"]
    print(f"{requests} running requests, {answering:.0%} answering, {args.rounds} rounds of "
          f"{args.steps - WARM_UP} steps: median step (schedule + update), median ratio of the rounds to their "
          f"own ds4x-off run (interquartile range), per request, and the ratio of the mean steps")
    print(f"  {'ds4x off (vLLM path)':<24} {statistics.median(map(statistics.median, base)) * 1e3:7.3f} ms")
    print(f" equal verified work (every request verifies {K}): the hooks' cost, after the noise floor")
    for name in (CONTROL, *EQUAL):
        print(line(name, runs[name], base, requests, spent[name] if args.hook_timing and name != CONTROL else []))
    if not args.no_cuts:
        print(" fewer drafts verified while reasoning: the cost (or saving) of cutting drafts, not the hooks' alone")
        for name in CUTS:
            print(line(name, runs[name], base, requests, spent[name] if args.hook_timing else []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--requests", type=int, nargs="+", default=[16, 256, 1024])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--answering", type=float, nargs="+", default=[0.0, 0.25],
                        help="fractions of the requests in their answer (the rest reason)")
    parser.add_argument("--hook-timing", action="store_true",
                        help="also time the hook calls themselves (their wrappers add about 0.1 us a call)")
    parser.add_argument("--no-cuts", action="store_true", help="only the equal-work policies")
    args = parser.parse_args()
    if args.steps <= WARM_UP:
        parser.error(f"--steps {args.steps}: more than the {WARM_UP} warm-up steps")
    init_none_hash(sha256)
    for requests in args.requests:
        for answering in args.answering:
            measure(args, requests, answering)


if __name__ == "__main__":
    main()
