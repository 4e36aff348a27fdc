#!/usr/bin/env python3
"""The scheduler's added cost per step at 16, 256 and 1024 running requests:
the patched vLLM Scheduler with each policy and phase tracking, against the
same Scheduler with ds4x switched off (fixed policy, no reasoning parser: the
hooks see None and vLLM runs its own path), in the same run. Prints the median
step, the ratio, the added cost per request in microseconds, and the ratio of
the mean step (a cost paid on some steps only, such as decisions all due at
once, would hide from the median), with every request reasoning and with a
quarter of them answering (then the phase counts read the smaller group one by
one). Adaptive's decisions reach their steady pace after about 112 steps (it
reviews a steady choice every 16, 32, then 64 steps): keep --steps at 200.

Run with the Python of a venv that has our vLLM wheel:
    ENGINE_PYTHON bench/scheduler_overhead.py MODEL_DIR [--requests 16 256 1024 --steps 200]
MODEL_DIR: any model directory with a tokenizer (tests/engine/tiny_model.py makes one).
"""

import argparse
import gc
import statistics
import time

from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import init_none_hash
from vllm.v1.outputs import DraftTokenIds

from engine.scheduler_check import END_THINK, THINK, output, request, scheduler


def step_times(model: str, policy: str | None, requests: int, steps: int, answering: float) -> list[float]:
    """policy None: ds4x off. The same reasoning parser, which costs vLLM its own
    work per token, and the hooks see None: the unpatched scheduler's path."""
    s = scheduler(model, {"policy": policy or "fixed"}, False, reasoning_parser="deepseek_r1", max_num_seqs=requests)
    if policy is None:
        s.ds4x_depth = None
    ids = [f"r{i}" for i in range(requests)]
    closed = int(requests * answering)  # the first ones answer: their prompt closed the reasoning section
    for i, rid in enumerate(ids):
        s.add_request(request(rid, [5] * 8 + ([THINK, 8, END_THINK] if i < closed else [THINK]), max_tokens=900))
    out = s.schedule()
    s.update_from_output(out, output(ids, {r: [20] for r in ids}))
    times = []
    assert len(s.running) == requests
    drafts = DraftTokenIds(ids, [[30, 31]] * requests)
    for step in range(steps):
        start = time.perf_counter()
        s.update_draft_token_ids(drafts)
        out = s.schedule()
        middle = time.perf_counter()
        # the model's answer (not timed): a third of the drafts rejected at once
        sampled = {r: ([30, 21] if (step + i) % 3 else [22])[: len(out.scheduled_spec_decode_tokens.get(r, ())) + 1]
                   for i, r in enumerate(ids)}
        runner_output = output(ids, sampled)
        resume = time.perf_counter()
        s.update_from_output(out, runner_output)
        times.append(time.perf_counter() - resume + middle - start)
        assert len(out.num_scheduled_tokens) == requests, "every request must stay running"
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--requests", type=int, nargs="+", default=[16, 256, 1024])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--answering", type=float, nargs="+", default=[0.0, 0.25],
                        help="fractions of the requests in their answer (the rest reason)")
    args = parser.parse_args()
    init_none_hash(sha256)
    policies = [None, "fixed", "phase", "adaptive"]
    for requests in args.requests:
        for answering in args.answering:
            runs: dict[str | None, list[list[float]]] = {p: [] for p in policies}
            for _ in range(args.rounds):  # interleaved; each round's ratios are to its own baseline
                for policy in policies:
                    gc.collect()  # the previous run's garbage is not this one's to collect
                    runs[policy].append(step_times(args.model, policy, requests, args.steps, answering)[20:])
            print(f"{requests} running requests, {answering:.0%} answering, {args.rounds} rounds of "
                  f"{args.steps - 20} steps; median step (schedule + update), and the median of the rounds' "
                  f"ratios of their median and mean steps:")
            base = statistics.median(map(statistics.median, runs[None]))
            print(f"  vLLM path (ds4x off):            {base * 1e3:.3f} ms")
            for policy in policies[1:]:
                median, mean = (statistics.median(f(t) / f(b) for t, b in zip(runs[policy], runs[None])) - 1
                                for f in (statistics.median, statistics.mean))
                print(f"  {policy:<8} + phase tracking:       "
                      f"{statistics.median(map(statistics.median, runs[policy])) * 1e3:.3f} ms  "
                      f"({median:+.1%}, {median * base / requests * 1e6:+.2f} us per request; mean {mean:+.1%})")


if __name__ == "__main__":
    main()
