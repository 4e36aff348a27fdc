"""Summarise case.py results and check them: each speculative case's greedy tokens equal
the eager non-speculative run of the same model and model runner, no decode step ran eagerly
(with n-gram on v1: none that was uniform at a captured length), and decode
steps replayed graphs at the query lengths the policy verifies. Exit 1 on any failure.

Usage: report.py RESDIR"""

import json
import sys
from pathlib import Path

# query lengths whose graphs decode steps must replay (adaptive: at least K_max's; it picks from 1, 2, 3)
EXPECTED_QUERY_LENGTHS = {"fixed": {"3"}, "phase12": {"2", "3"}, "phase02": {"1", "3"}, "adaptive": {"3"}}
CAPTURED_QUERY_LENGTHS = {"fixed": {"3"}, "phase12": {"2", "3"}, "phase02": {"1", "3"}, "adaptive": {"1", "2", "3"}}


def check(case: str, result: dict, reference: dict | None) -> list[str]:
    if not result.get("ok"):
        return [f"failed: {result.get('error', '?')[:300]}"]
    problems = []
    if reference is None or not reference.get("ok"):
        problems.append("no eager reference to compare with")
    elif result["tokens"] != reference["tokens"]:
        same = sum(a == b for a, b in zip(result["tokens"], reference["tokens"]))
        problems.append(f"greedy tokens differ from the eager run: {same}/{len(reference['tokens'])} equal")
    mode, ngram = case.split("-")[1], case.endswith("-v1")
    eager = result["decode_steps"]["eager"]
    # n-gram may propose fewer drafts than the batch depth for some request (no match in the
    # text yet): such a batch is uneven or at a length without graphs, and runs eagerly, as in
    # vLLM; a uniform batch at a captured length must never run eagerly
    missed = {q: n for q, n in eager.items() if not ngram or q in CAPTURED_QUERY_LENGTHS[mode]}
    if sum(missed.values()):
        problems.append(f"eager decode steps {missed}")
    replayed = set(result["decode_steps"]["graph"])
    if not EXPECTED_QUERY_LENGTHS[mode] <= replayed <= CAPTURED_QUERY_LENGTHS[mode]:
        problems.append(f"decode graphs replayed at query lengths {sorted(replayed)}: expected "
                        f"{sorted(EXPECTED_QUERY_LENGTHS[mode])}, within {sorted(CAPTURED_QUERY_LENGTHS[mode])}")
    return problems


def main(resdir: Path) -> int:
    results = {p.stem: json.loads(p.read_text()) for p in sorted(resdir.glob("*.json"))}
    failed = 0
    for case, result in results.items():
        kind, mode, *runner = case.split("-")
        print(f"== {case}: ok={result.get('ok')} wall {result.get('wall_s')} s, init {result.get('init_s')} s")
        if mode == "eager" or not result.get("ok"):
            print("   ", result.get("error", "reference run"))
            continue
        print("   graphs:", json.dumps(result["graphs"]))
        print("   replays by manager and query length:", json.dumps(result["replays"]))
        print("   decode steps by query length:", json.dumps(result["decode_steps"]))
        if result["lk_moe"]:
            print("   lk_moe calls:", json.dumps(result["lk_moe"]))
        depth = {k: v for k, v in result["spec_metrics"].items() if "depth" in k or k.endswith("accepted_tokens")
                 or k.endswith("num_draft_tokens")}
        print("   spec metrics:", json.dumps(depth))
        problems = check(case, result, results.get("-".join([kind, "eager", *runner])))
        failed += bool(problems)
        print("   " + ("; ".join(problems) if problems else
                       "PASS: tokens equal eager, 0 eager decode steps at a captured uniform length"))
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
