"""The prefill benchmark's report (ci/fork-gpu/prefill writes RUNDIR): CPU prefill against the fork's GPU
prefill on the DeepSeek-V4 stand-in, by prompt length, and one Flash-shaped layer by chunk size.

  python -m bench.prefill RUNDIR [--allow-differ ARM ...]

Prints, per prompt length and arm, time to first token, prefill tok/s, the GPU arms' ratio to CPU
prefill, the decode tok/s of the greedy tokens after the prompt, whether those tokens equal CPU
prefill's and the largest difference of their logprobs from CPU prefill's; the ratio at 16384 prompt tokens
against the issue's target (at least 3x); per arm, one request's decode tok/s alone and while another
prefills; per chunk size and engine probed (parts `layer`, cutlass, and `layer-triton`), the layer's ms on
the CPU and on the GPU, the crossover chunk size (the
smallest from which the GPU is faster at every size measured) and the GPU result's difference from
the CPU's; what lk_moe holds on the GPU; and, per MoE layer on lk_moe, the rate the stand-in's few
layers give (its tok/s x its lk_moe layers), with what that rate would be on the user's box's lk_moe
layers were the routed experts the whole of a prefill step (a bound, not a measurement).

Fails closed (exit 1), each failure named: a part asked for (RUNDIR/asked) with no result, or one that
failed; an arm without a prompt length the CPU arm ran, or without the concurrent measurement it was
asked for; the CPU arm having run a GPU prefill, or a GPU arm never having run its engine's; a GPU arm's
greedy tokens after a prompt unequal to the CPU arm's (the stand-in's margins, about 64 logits, are far
above bf16 rounding: a difference is a bug, unless --allow-differ names the arm, which then prints the
difference and passes); the layer's GPU result not finite, or off the CPU's by more than LAYER_TOL of
its largest value. The targets (3x at 16k; decode no slower while the other prefills) are reported,
not enforced.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vllm_ds4x.measure import analysis

TARGET_RATIO, TARGET_LENGTH = 3.0, 16384
LAYER_TOL = 3e-2  # cutlass rounds activations to bf16 (lk_moe's README); a wrong dtype or unwritten rows is far off
ENGINE = {"gpu": "cutlass", "triton": "triton"}  # arm -> moe_prefill's driver
USER_LK_MOE_LAYERS = 41  # DeepSeek-V4-Flash's 43 MoE layers less the user's two resident ones
GIB = 1 << 30


def load(rundir: Path) -> tuple[list[str], dict[str, Any]]:
    """The parts asked for, and each part's result (absent: never written)."""
    asked_file = rundir / "asked"
    asked = asked_file.read_text().split() if asked_file.is_file() else []
    results = {}
    for part in asked:
        path = rundir / f"prefill-{part}.json"
        if path.is_file():
            try:
                results[part] = json.loads(path.read_text())
            except json.JSONDecodeError as e:
                results[part] = {"ok": False, "error": f"unreadable: {e}"}
    return asked, results


def is_layer(part: str) -> bool:
    """The layer probe's parts: `layer` (cutlass) and `layer-ENGINE`."""
    return part == "layer" or part.startswith("layer-")


def layer_parts(results: dict[str, Any]) -> dict[str, Any]:
    return {part: r for part, r in results.items() if is_layer(part)}


def first_difference(a: list[int], b: list[int]) -> str:
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"first at token {at} of {max(len(a), len(b))}, {sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))} differ"


def check(asked: list[str], results: dict[str, Any], allow_differ: frozenset[str] = frozenset()) -> list[str]:
    failures = []
    if not asked:
        return ["no RUNDIR/asked: not a prefill run's folder"]
    for part in asked:
        if part not in results:
            failures.append(f"{part}: no result (crashed before writing, hit its time limit, or skipped for the budget)")
        elif not results[part].get("ok"):
            failures.append(f"{part}: failed: {results[part].get('error', 'no error recorded')[:300]}")
    for part, layer in layer_parts(results).items():
        if not layer.get("ok"):
            continue
        if not layer.get("sizes"):
            failures.append(f"{part}: no chunk size measured")
        for rows, m in (layer.get("sizes") or {}).items():
            if not m.get("finite") or not m.get("rel_diff", float("inf")) <= LAYER_TOL:
                failures.append(f"{part}: GPU prefill of {rows} rows off the CPU's by {m.get('rel_diff')} of its "
                                f"largest value (finite: {m.get('finite')}; tolerance {LAYER_TOL})")
    arms = {a: r for a, r in results.items() if not is_layer(a) and r.get("ok")}
    cpu = arms.get("cpu")
    for arm, r in arms.items():
        failures += arm_failures(arm, r, cpu, arm in allow_differ)
    if "cpu" not in asked and arms:
        failures.append("cpu: not asked for; the GPU arms have nothing to be compared with")
    return failures


def arm_failures(arm: str, r: dict[str, Any], cpu: dict[str, Any] | None, may_differ: bool) -> list[str]:
    failures = []
    prompts = r.get("prompts") or {}
    for length in (cpu or r).get("lengths") or []:
        if str(length) not in prompts:
            failures.append(f"{arm}: no result for {length} prompt tokens")
    if not prompts:
        failures.append(f"{arm}: no prompt measured")
    if r.get("concurrent_asked") and not r.get("concurrent"):
        failures.append(f"{arm}: no decode-while-prefill measurement ({r['concurrent_asked']} prompt tokens asked)")
    lk = r.get("lk_moe_calls") or {}
    calls = r.get("calls") or {}
    if arm == "cpu":
        if calls or lk.get("_gpu_prefill (prefill)"):
            failures.append(f"cpu: ran a GPU prefill ({calls or lk}): LVLLM_GPU_PREFILL_MIN_BATCH_SIZE=0 did not hold")
        if not lk.get("_cpu_prefill (prefill)"):
            failures.append("cpu: lk_moe's cpu_prefill never ran")
    elif not calls.get(ENGINE.get(arm, arm)):
        failures.append(f"{arm}: lk_moe's {ENGINE.get(arm, arm)} GPU prefill never ran (calls: {calls})")
    if cpu is not None and arm != "cpu":
        for length, p in prompts.items():
            ref = (cpu.get("prompts") or {}).get(length)
            if ref is not None and p.get("tokens") != ref.get("tokens"):
                note = f"{arm}: greedy tokens after {length} prompt tokens differ from CPU prefill's " + first_difference(
                    p.get("tokens") or [], ref.get("tokens") or [])
                failures.append(note) if not may_differ else print(f"(allowed) {note}")
    return failures


def logprob_gap(p: dict[str, Any], ref: dict[str, Any]) -> float | None:
    """The largest |logprob difference| of the greedy tokens after a prompt, over the tokens both arms chose
    alike up to their first difference (None: a run without logprobs)."""
    a, b = p.get("logprobs"), ref.get("logprobs")
    if not a or not b:
        return None
    gaps = []
    for x, y, t, u in zip(a, b, p.get("tokens") or [], ref.get("tokens") or []):
        if t != u:
            break  # past it the two continuations no longer share their context
        gaps.append(abs(x - y))
    return max(gaps, default=None)


CERTAIN = "certain"


def certain(p: dict[str, Any], ref: dict[str, Any]) -> bool:
    """Both arms' greedy tokens had probability 1 (logprob 0 to the digits recorded): no logprob gap can show."""
    both = [*(p.get("logprobs") or []), *(ref.get("logprobs") or [])]
    return bool(p.get("logprobs")) and bool(ref.get("logprobs")) and all(v == 0 for v in both)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def crossover(sizes: dict[str, dict[str, float]]) -> tuple[int | None, dict[str, float] | None]:
    """The smallest chunk size from which the GPU is faster at every larger size measured (measure's own
    rule, vllm_ds4x.measure.analysis.crossover), and its row."""
    best = analysis.crossover([{"rows": int(n), **m} for n, m in sizes.items()])
    return best, sizes[str(best)] if best is not None else None


def layer_lines(layer: dict[str, Any]) -> list[str]:
    """One engine's layer probe: ms by chunk size both ways, the crossover, what lk_moe holds."""
    out = [f"one Flash-shaped MXFP4 layer by chunk size ({layer.get('engine')} engine, LK_THREADS="
           f"{layer.get('lk_threads')}): ms",
           f"{'rows':>6} {'CPU ms':>9} {'GPU ms':>9} {'GPU/CPU':>8} {'rel diff':>9}"]
    for n in sorted(layer["sizes"], key=int):
        m = layer["sizes"][n]
        out.append(f"{n:>6} {m['cpu_ms']:>9.2f} {m['gpu_ms']:>9.2f} {fmt(ratio(m['gpu_ms'], m['cpu_ms']), '.2f'):>8} "
                   f"{m.get('rel_diff', 0):>9.1e}")
    cross, _ = crossover(layer["sizes"])
    out.append("crossover chunk size: " + (f"GPU faster from {cross} rows" if cross else
                                           "the GPU is not faster at the largest size"))
    out.append(f"lk_moe's raw gpu_prefill writes: {layer.get('raw_gpu_prefill_writes')}; lk_moe holds "
               f"{fmt((layer.get('device_bytes_after') or 0) / GIB, '.2f')} GiB on the GPU for one layer")
    return out


def fmt(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def report(asked: list[str], results: dict[str, Any]) -> list[str]:
    out = []
    arms = {a: r for a, r in results.items() if not is_layer(a)}
    cpu = arms.get("cpu") or {}
    lengths = sorted({int(n) for r in arms.values() for n in (r.get("prompts") or {})})
    out.append("prefill by prompt length (one request alone; --max-num-batched-tokens 8192, chunked prefill)")
    out.append(f"{'tokens':>7} {'arm':<7} {'TTFT s':>8} {'prefill tok/s':>14} {'x CPU':>6} {'decode tok/s':>13} "
               f"{'tokens = CPU':>12} {'max dlogprob':>12}")
    for n in lengths:
        ref = (cpu.get("prompts") or {}).get(str(n)) or {}
        for arm, r in arms.items():
            p = (r.get("prompts") or {}).get(str(n))
            if p is None:
                continue
            x = ratio(p.get("prefill_tok_s"), ref.get("prefill_tok_s")) if arm != "cpu" else None
            equal = "-" if arm == "cpu" or not ref else "yes" if p.get("tokens") == ref.get("tokens") else "NO"
            gap = logprob_gap(p, ref) if arm != "cpu" and ref else None
            shown = CERTAIN if arm != "cpu" and certain(p, ref) else fmt(gap, '.2e')
            out.append(f"{n:>7} {arm:<7} {fmt(p.get('ttft_s'), '.3f'):>8} {fmt(p.get('prefill_tok_s')):>14} "
                       f"{fmt(x, '.2f'):>6} {fmt(p.get('decode_tok_s'), '.2f'):>13} {equal:>12} {shown:>12}")
    if any(CERTAIN in line for line in out):
        out.append(f"{CERTAIN}: every greedy token's logprob is 0 in both arms (probability 1), so the logprobs cannot "
                   "show a difference; the layer's rel diff below does")
    at = {arm: ratio(((r.get("prompts") or {}).get(str(TARGET_LENGTH)) or {}).get("prefill_tok_s"),
                     ((cpu.get("prompts") or {}).get(str(TARGET_LENGTH)) or {}).get("prefill_tok_s"))
          for arm, r in arms.items() if arm != "cpu"}
    best = max((v, a) for a, v in at.items() if v is not None) if any(v is not None for v in at.values()) else None
    if best:
        out.append(f"GPU/CPU prefill at {TARGET_LENGTH} tokens: {best[1]} {best[0]:.2f}x (target >= {TARGET_RATIO:g}x: "
                   f"{'met' if best[0] >= TARGET_RATIO else 'NOT met'})")
    else:
        out.append(f"GPU/CPU prefill at {TARGET_LENGTH} tokens: not measured")
    rows = [(arm, r["concurrent"]) for arm, r in arms.items() if r.get("concurrent")]
    if rows:
        out.append("one request decoding while another prefills (max-num-seqs 2)")
        out.append(f"{'arm':<7} {'other prompt':>12} {'alone tok/s':>12} {'while tok/s':>12} {'other TTFT s':>13}")
        for arm, c in rows:
            out.append(f"{arm:<7} {c.get('prompt_tokens'):>12} {fmt(c.get('alone_tok_s'), '.2f'):>12} "
                       f"{fmt(c.get('while_prefill_tok_s'), '.2f'):>12} {fmt(c.get('other_ttft_s'), '.3f'):>13}")
        base = (cpu.get("concurrent") or {}).get("while_prefill_tok_s")
        for arm, c in rows:
            if arm != "cpu" and base:
                got = c.get("while_prefill_tok_s") or 0
                out.append(f"decode while prefilling, {arm} against cpu: {got:.2f} against {base:.2f} tok/s "
                           f"(target no worse: {'met' if got >= base else 'NOT met'})")
    for layer in layer_parts(results).values():
        if layer.get("sizes"):
            out += layer_lines(layer)
    for arm, r in arms.items():
        placed = (r.get("moe_layers") or {}).get("lk_moe") or []
        held = (r.get("lk_moe_info") or {}).get("device_bytes")
        p = (r.get("prompts") or {}).get(str(TARGET_LENGTH)) or {}
        if placed and p.get("prefill_tok_s"):
            per = p["prefill_tok_s"] * len(placed)
            out.append(f"{arm}: {len(placed)} MoE layers on lk_moe, {per:.0f} layer-tok/s at {TARGET_LENGTH} tokens "
                       f"(bound on {USER_LK_MOE_LAYERS} lk_moe layers: {per / USER_LK_MOE_LAYERS:.0f} tok/s); lk_moe "
                       f"holds {fmt((held or 0) / GIB, '.2f')} GiB on the GPU; peak torch "
                       f"{fmt((r.get('gpu_peak_bytes') or 0) / GIB, '.2f')} GiB")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("rundir", type=Path)
    p.add_argument("--allow-differ", nargs="*", default=[], help="arms whose tokens may differ from CPU prefill's")
    args = p.parse_args(argv)
    asked, results = load(args.rundir)
    for line in report(asked, results):
        print(line)
    failures = check(asked, results, frozenset(args.allow_differ))
    for f in failures:
        print("FAIL", f)
    print("prefill report:", "FAILED" if failures else "ok", f"({', '.join(asked) or 'nothing asked'})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
