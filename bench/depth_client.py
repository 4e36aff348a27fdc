#!/usr/bin/env python3
"""Tokens per second by phase, from any OpenAI-compatible server.

Streams an agentic-coding style chat request, splits the stream into reasoning
(`reasoning` or `reasoning_content` deltas) and answer (`content`), times each
phase, and reads acceptance and draft depth by phase from the server's
/metrics (ds4x counters; vLLM's own totals where those are absent).

    python -m bench.depth_client --base-url http://127.0.0.1:8000/v1 --model NAME

Standard library only, so it runs beside any deployment.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

TASK = (
    "You are a coding agent. The repository has src/app.py with a function load_config(path) that "
    "crashes on a missing file. Think about the cause, then reply with a unified diff that fixes it "
    "and a one-line commit message."
)
_SAMPLE = re.compile(r'^(vllm:spec_decode_\w+?)(?:_total)?\{([^}]*)\}\s+([0-9.eE+-]+)$')


@dataclass
class PhaseTiming:
    tokens: int = 0
    first: float | None = None
    last: float | None = None

    def add(self, now: float, tokens: int) -> None:
        self.tokens += tokens
        self.first = now if self.first is None else self.first
        self.last = now

    @property
    def tok_per_s(self) -> float:
        """Tokens after the phase's first chunk over the time since it arrived."""
        if self.first is None or self.last is None or self.last <= self.first:
            return float("nan")
        return (self.tokens - self.first_chunk) / (self.last - self.first)

    first_chunk: int = 0


@dataclass
class StreamResult:
    phases: dict[str, PhaseTiming] = field(default_factory=lambda: {"reasoning": PhaseTiming(), "answer": PhaseTiming()})
    reasoning_text: str = ""
    answer_text: str = ""


def stream_chat(base_url: str, model: str, prompt: str = TASK, max_tokens: int = 256,
                extra: dict[str, Any] | None = None, timeout: float = 600) -> StreamResult:
    """One streamed chat completion. Token counts come from the running usage
    the server sends with each chunk (a chunk can carry several accepted tokens)."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "stream": True, "temperature": 0.0,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}, **(extra or {})}
    request = urllib.request.Request(f"{base_url.rstrip('/')}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    result = StreamResult()
    seen = pending = 0
    last: str | None = None
    with urllib.request.urlopen(request, timeout=timeout) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"server error: {chunk['error'].get('message', chunk['error'])}")
            usage = (chunk.get("usage") or {}).get("completion_tokens", seen)
            pending, seen = pending + usage - seen, usage
            for choice in chunk.get("choices", []):
                delta = choice.get("delta", {})
                reasoning = delta.get("reasoning") or delta.get("reasoning_content")
                if not (reasoning or delta.get("content")):
                    continue  # tokens that decode to nothing yet go with the next text
                last = "reasoning" if reasoning else "answer"
                timing = result.phases[last]
                if timing.first is None:
                    timing.first_chunk = pending
                timing.add(time.perf_counter(), pending)
                pending = 0
                if reasoning:
                    result.reasoning_text += reasoning
                else:
                    result.answer_text += delta["content"]
    if pending and last is not None:
        result.phases[last].tokens += pending
    return result


def scrape(base_url: str) -> dict[str, float]:
    """Spec-decode counters from /metrics, keyed `name{labels}` (engine label dropped)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/metrics", timeout=30) as response:
        text = response.read().decode()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if not found or line.split("{", 1)[0].endswith("_created"):
            continue
        labels = ",".join(sorted(p for p in found[2].split(",") if p.split("=")[0] in ("phase", "depth")))
        key = f"{found[1]}{{{labels}}}"
        samples[key] = samples.get(key, 0.0) + float(found[3])
    return samples


def by_phase(before: dict[str, float], after: dict[str, float]) -> dict[str, dict[str, float]]:
    """Acceptance and mean depth per phase over the interval between two scrapes."""
    def delta(name: str, phase: str) -> float:
        key = f"vllm:spec_decode_{name}_by_phase{{phase=\"{phase}\"}}"
        return after.get(key, 0.0) - before.get(key, 0.0)

    out = {}
    for phase in ("reasoning", "answer"):
        drafts, tokens, accepted = (delta(n, phase) for n in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"))
        out[phase] = {"drafts": drafts, "mean_depth": tokens / drafts if drafts else float("nan"),
                      "acceptance": accepted / tokens if tokens else float("nan")}
    return out


def measure(base_url: str, model: str, max_tokens: int = 256, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    before = scrape(base_url)
    result = stream_chat(base_url, model, max_tokens=max_tokens, extra=extra)
    spec = by_phase(before, scrape(base_url))
    return {phase: {"tokens": t.tokens, "tok_per_s": t.tok_per_s, **spec[phase]} for phase, t in result.phases.items()}


def report(label: str, figures: dict[str, Any]) -> str:
    rows = [f"{label}:"]
    for phase, f in figures.items():
        rows.append(f"  {phase:<9} {f['tokens']:>5} tokens  {f['tok_per_s']:8.2f} tok/s  "
                    f"acceptance {f['acceptance']:.1%}  mean depth {f['mean_depth']:.2f}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--draft-depth", type=int, help="send vllm_xargs draft_depth for this request")
    args = parser.parse_args()
    extra = {"vllm_xargs": {"draft_depth": args.draft_depth}} if args.draft_depth is not None else None
    print(report(args.base_url, measure(args.base_url, args.model, args.max_tokens, extra)))


if __name__ == "__main__":
    main()
