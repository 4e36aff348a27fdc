"""Summarise case.py results and check them, failing closed: every case asked for
(RESDIR/asked, written by run) must have reported, and each speculative case's
greedy tokens equal the eager non-speculative run of the same model and model runner;
no decode step ran eagerly (with n-gram on v1: none that was uniform at a captured
length); decode steps replayed graphs at the query lengths the policy verifies (adaptive
at low acceptance: below K too); MoE cases captured lk_moe's cpu_decode in the graphs
(once a graph for each target layer on lk_moe: dsv4 cases name theirs in `moe_layers`, at least
one) and never ran _cpu_prefill in a decode step; dsv4 cases with GPU-resident layers
(LVLLM_GPU_RESIDENT_MOE_LAYERS) placed exactly those, ran them through the fork's Marlin MoE
backend (the RTX 5090's choice) and called it; on model runner v2 the drafter replayed
its graphs after depth-0 steps whenever there were any, and DFlash's drafter its own
graphs. An "av" case (vLLM's adaptive verification) schedules every step at 1 + K and verifies
within it on variable-length graphs: those must have replayed, and no decode step run eagerly.
Exit 1 on any failure.

Usage: report.py RESDIR (with the checkout root on PYTHONPATH, as setup.sh sets it)"""

import json
import sys
from pathlib import Path

from bench.counters import HarnessCounters
from vllm_ds4x.depth.named_policies import AV_CASE, OWN_CASE, by_case
from vllm_ds4x.moe.placement import parse_layers

K = 2  # case.py's num_speculative_tokens
LOW = "low"  # a case name's suffix: its policy at low acceptance (case.py's adaptivelow)
PASSED = {"eager": "", AV_CASE: ": tokens equal eager, 0 eager decode steps, on its variable-length graphs",
          None: ": tokens equal eager, 0 eager decode steps at a captured uniform length"}
MOE_LAYERS = {"moe": 2, "dsv4": 3}  # lk_moe layers of the target: tiny_models.py's MoE, dsv4_model.py's


def query_lengths(mode: str) -> tuple[set[str], set[str]]:
    """(those decode steps must replay, those captured, which bound what may be replayed): 1 + the
    depths the case's policy verifies (adaptive: K at high acceptance, none for sure at low) and has
    graphs for, from the table of named policies."""
    policy = by_case(mode.removesuffix(LOW), K)
    verified = policy.verified_depths(K)
    if verified is None:
        verified = frozenset() if mode.endswith(LOW) else frozenset({K})
    return {str(1 + d) for d in verified}, {str(1 + d) for d in policy.graph_depths(K)}


def check_graphs(case: str, counters: HarnessCounters) -> list[str]:
    kind, mode, ngram = *case.split("-")[:2], case.endswith("-v1")
    problems = check_adaptive_verification(counters) if mode == AV_CASE else check_depths(mode, ngram, counters)
    if kind in ("dflash", "dsv4") and not sum(counters.replays.get("DFlashCudaGraphManager", {}).values()):
        problems.append("the DFlash-family drafter replayed none of its own graphs")
    if mode.endswith(OWN_CASE) and not sum(counters.own_depth_steps.values()):
        problems.append("no decode step had a request verifying less than the batch (no row masked)")
    return problems


def check_depths(mode: str, ngram: bool, counters: HarnessCounters) -> list[str]:
    """A draft_depth policy's decode steps: graphs at the query lengths it verifies."""
    problems = []
    # n-gram may propose fewer drafts than the batch depth for some request (no match in the
    # text yet): such a batch is uneven or at a length without graphs, and runs eagerly, as in
    # vLLM; a uniform batch at a captured length must never run eagerly
    expected, captured = query_lengths(mode)
    missed = {q: n for q, n in counters.eager_steps.items() if not ngram or q in captured}
    if sum(missed.values()):
        problems.append(f"eager decode steps {missed}")
    replayed = counters.replayed()
    if not expected <= replayed <= captured:
        problems.append(f"decode graphs replayed at query lengths {sorted(replayed)}: expected "
                        f"{sorted(expected)}, within {sorted(captured)}")
    if mode.endswith(LOW) and not replayed & {"1", "2"}:
        problems.append(f"adaptive verified only K at low acceptance (replayed {sorted(replayed)})")
    if not ngram and counters.drafted_after_depth_0() and not counters.drafter_after.get("1"):
        problems.append("the drafter replayed no graph after a depth-0 step where it drafted")
    return problems


def check_adaptive_verification(counters: HarnessCounters) -> list[str]:
    """vLLM's adaptive verification: every decode step scheduled at 1 + K, run on its
    variable-length graphs (no uniform token count: their key is "None")."""
    problems = []
    if sum(counters.eager_steps.values()):
        problems.append(f"eager decode steps {dict(counters.eager_steps)}")
    if counters.replayed() != {str(1 + K)}:
        problems.append(f"decode steps at query lengths {sorted(counters.replayed())}: expected only {1 + K}")
    if not counters.replays.get("ModelCudaGraphManager", {}).get("None"):
        problems.append("adaptive verification's variable-length target graphs never replayed")
    return problems


def check_moe(counters: HarnessCounters, graphs: int, layers: int) -> list[str]:
    problems = []
    if counters.prefill_in_decode:
        problems.append(f"_cpu_prefill ran in {counters.prefill_in_decode} decode calls")
    if graphs and counters.decode_captured < graphs * layers:
        problems.append(f"cpu_decode captured {counters.decode_captured} times for {graphs} "
                        f"decode graphs of {layers} MoE layers")
    return problems


def lk_moe_layers(kind: str, result: dict) -> int:
    """The target's MoE layers on lk_moe: those the case names (dsv4: the rest are GPU-resident), else all."""
    placed = result.get("moe_layers")
    return MOE_LAYERS[kind] if placed is None else len(placed.get("lk_moe", []))


def check_resident(result: dict) -> list[str]:
    """A dsv4 case's GPU-resident layers: the ones asked for, on the Marlin MoE backend, called."""
    placed = result.get("moe_layers")
    if placed is None:
        return []
    problems = []
    asked = placed.get("asked", "none")
    want = sorted(parse_layers(asked).layers)
    if placed.get("resident", []) != want:
        problems.append(f"resident target layers {placed.get('resident')}, asked for {asked}")
    if not placed.get("lk_moe"):
        problems.append("no target MoE layer on lk_moe: cpu_decode in the graphs is not checked")
    if want:
        backend = result.get("kernels", {}).get("MXFP4 MoE backend", "none recorded")
        if not backend.startswith("MARLIN"):
            problems.append(f"resident MXFP4 layers on {backend}, not Marlin (the RTX 5090's backend)")
        if not placed.get("marlin_calls"):
            problems.append("the resident layers never called fused_marlin_moe")
    return problems


def check(case: str, result: dict | None, reference: dict | None) -> list[str]:
    if result is None:
        return ["no result: crashed, killed by its time limit, or skipped for the budget"]
    if not result.get("ok"):
        return [f"failed: {result.get('error', '?')[:300]}"]
    kind, mode = case.split("-")[:2]
    problems = []
    counters = HarnessCounters.read(result)
    target_graphs = sum(len(keys) for name, keys in counters.graphs.items()
                        if name in ("ModelCudaGraphManager", "CudagraphDispatcher"))
    if kind in MOE_LAYERS:
        problems += check_moe(counters, target_graphs if mode != "eager" else 0, lk_moe_layers(kind, result))
        problems += check_resident(result)
    if mode == "eager":
        return problems
    if reference is None or not reference.get("ok"):
        problems.append("no eager reference to compare with")
    elif result["tokens"] != reference["tokens"]:
        same = sum(a == b for a, b in zip(result["tokens"], reference["tokens"]))
        problems.append(f"greedy tokens differ from the eager run: {same}/{len(reference['tokens'])} equal")
    return problems + check_graphs(case, counters)


def main(resdir: Path) -> int:
    results = {p.stem: json.loads(p.read_text()) for p in sorted(resdir.glob("*.json"))}
    asked_file = resdir / "asked"
    asked = asked_file.read_text().split() if asked_file.exists() else []
    if not asked:
        print(f"no list of cases asked for in {asked_file}: nothing to check")
        return 1
    target = resdir / "target"  # written by run: lvllmds4-x (the fork) or vllm (upstream, 0.32.0 or 0.34.0)
    if target.exists():
        print("target:", target.read_text().strip())
    failed = 0
    for case in asked + sorted(set(results) - set(asked)):
        result = results.get(case)
        kind, mode, *runner = case.split("-")
        print(f"== {case}: " + (f"ok={result.get('ok')} wall {result.get('wall_s')} s, init {result.get('init_s')} s"
                                if result else "no result"))
        if result and result.get("ok") and mode != "eager":
            print("   graphs:", json.dumps(result["graphs"]))
            print("   replays by manager and query length:", json.dumps(result["replays"]))
            print("   decode steps by query length:", json.dumps(result["decode_steps"]))
            print("   drafter replays after target steps of query length:", json.dumps(result["drafter_after"]))
            if "drafter_rested" in result:  # DSpark's rests (runs before them had none)
                print("   DSpark rested after target steps of query length: whole", json.dumps(result["drafter_rested"]),
                      "some rows", json.dumps(result["drafter_rested_rows"]))
            depth = {k: v for k, v in result["spec_metrics"].items() if "depth" in k or k.endswith("accepted_tokens")
                     or k.endswith("num_draft_tokens")}
            print("   spec metrics:", json.dumps(depth))
        if result and result.get("kernels"):
            print("   kernels by source:", json.dumps(result["kernels"]))
        if result and result.get("lk_moe"):
            print("   lk_moe calls:", json.dumps(result["lk_moe"]))
        if result and result.get("moe_layers"):
            print("   MoE layers:", json.dumps(result["moe_layers"]))
        if result and result.get("ubatch", {}).get("level", "off") != "off":
            print("   LVLLM_MOE_OVERLAP:", json.dumps(result["ubatch"]))
        problems = check(case, result, results.get("-".join([kind, "eager", *runner])))
        failed += bool(problems)
        print("   " + ("FAIL: " + "; ".join(problems) if problems else "PASS" + PASSED.get(mode, PASSED[None])))
    print(f"{len(asked) - failed}/{len(asked)} cases pass" if not failed else f"{failed} case(s) FAIL")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
