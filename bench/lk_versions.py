"""lk_moe 2.3.3 (the fork's pin) against 2.7.4 with no pool, on the plain hybrid path (#57): the report of
ci/fork-gpu/lk_versions, which ran `measure`'s cpu_decode timing of one DeepSeek-V4-Flash MXFP4 layer
for each version in turn, round after round, on one machine, at one LK_THREADS (cpu_prefill's path
where no GPU is: the CPU test).

  python -m bench.lk_versions RUNDIR

RUNDIR holds `asked` (the rounds asked for), `versions.txt` (per version and round, the lk_moe version
the timing's Python imported) and `lk-VERSION-rROUND.json`, measure's profile of each. Prints, per
token count (1, 2, 3: one request at verify depths 0, 1, 2), each version's ms a layer call per round
and 2.7.4's over 2.3.3's paired by round; the noise floor, the largest difference between two rounds
of one version; and the verdict: a TIE inside the floor, else how much slower or faster 2.7.4 is.

Fails closed (exit 1), each failure named: a round of a version missing, or its profile without
cpu_decode's timing at the asked threads or at a token count; a round whose Python imported another
lk_moe than the one asked; fewer than 2 rounds (no floor). Exit 2: no such folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

VERSIONS = ("2.3.3", "2.7.4")
TOKENS = (1, 2, 3)


def load(rundir: Path) -> tuple[dict[str, dict[int, dict[int, float]]], list[str]]:
    """ms[version][round][tokens] of every profile asked for, and what is missing or wrong."""
    asked = json.loads((rundir / "asked").read_text()) if (rundir / "asked").is_file() else None
    if not isinstance(asked, dict) or not isinstance(asked.get("rounds"), int) or not isinstance(asked.get("threads"), int):
        return {}, ["no RUNDIR/asked ({\"rounds\": N, \"threads\": T}): not an lk_versions run's folder"]
    imported = dict(line.rsplit(" ", 1) for line in _lines(rundir / "versions.txt"))
    problems: list[str] = []
    paths: set[str] = set()
    ms: dict[str, dict[int, dict[int, float]]] = {v: {} for v in VERSIONS}
    for version in VERSIONS:
        for r in range(1, asked["rounds"] + 1):
            key = f"{version} r{r}"
            if imported.get(key) != version:
                problems.append(f"{key}: the timing's Python imported lk_moe {imported.get(key)}, not {version}")
            got = curve(rundir / f"lk-{version}-r{r}.json", asked["threads"])
            if isinstance(got, str):
                problems.append(f"{key}: {got}")
            else:
                paths.add(got[0])
                ms[version][r] = got[1]
    if len(paths) > 1:
        problems.append(f"the rounds timed different paths ({', '.join(sorted(paths))}): not comparable")
    if asked["rounds"] < 2:
        problems.append(f"{asked['rounds']} round(s): at least 2 give a noise floor")
    return ms, problems


def _lines(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if " " in line.strip()] if path.is_file() else []


def curve(path: Path, threads: int) -> tuple[str, dict[int, float]] | str:
    """The path measure timed (cpu_decode on a GPU, cpu_prefill without one) and ms a layer call by tokens,
    from its profile at `threads`; or what is wrong with it."""
    if not path.is_file():
        return f"no {path.name} (the round did not run or crashed)"
    runs = (json.loads(path.read_text()).get("measured") or {}).get("runs") or []
    run: dict[str, Any] | None = next((r for r in runs if r.get("threads") == threads), None)
    if run is None or run.get("path") not in ("cpu_decode", "cpu_prefill"):
        return f"{path.name}: no timing at LK_THREADS={threads}"
    cases = {int(c["tokens"]): float(c["ms"]) for c in run.get("cases", []) if c.get("ms")}
    missing = [n for n in TOKENS if n not in cases]
    return f"{path.name}: no timing of {missing} token(s)" if missing else (run["path"], {n: cases[n] for n in TOKENS})


def report(ms: dict[str, dict[int, dict[int, float]]]) -> list[str]:
    old, new = (ms[v] for v in VERSIONS)
    rounds = sorted(set(old) & set(new))
    out = [f"lk_moe {VERSIONS[1]} against {VERSIONS[0]}, no pool: ms a layer call, rounds in turn",
           f"{'tokens':>6} " + " ".join(f"{v + ' r' + str(r):>12}" for v in VERSIONS for r in rounds)
           + f" {'new/old by round':>22} {'median':>7}"]
    floor = 0.0
    verdicts = []
    for n in TOKENS:
        ratios = [new[r][n] / old[r][n] for r in rounds]
        for version in (old, new):
            values = [version[r][n] for r in rounds]
            floor = max(floor, max(values) / min(values) - 1)
        median = statistics.median(ratios)
        out.append(f"{n:>6} " + " ".join(f"{ms[v][r][n]:>12.3f}" for v in VERSIONS for r in rounds)
                   + f" {' '.join(f'{x:.3f}' for x in ratios):>22} {median:>7.3f}")
        verdicts.append((n, median))
    out.append(f"noise floor: {floor:.1%} (the largest difference between two rounds of one version)")
    for n, median in verdicts:
        if abs(median - 1) <= floor:
            said = "TIE (inside the floor)"
        else:
            said = f"{VERSIONS[1]} {abs(median - 1):.1%} {'slower' if median > 1 else 'faster'}"
        out.append(f"{n} token(s): {said}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("rundir", type=Path)
    args = p.parse_args(argv)
    if not args.rundir.is_dir():
        print(f"error: {args.rundir}: no such run folder", file=sys.stderr)
        return 2
    ms, problems = load(args.rundir)
    if ms and all(len(ms[v]) >= 2 for v in VERSIONS) and len(set(ms[VERSIONS[0]]) & set(ms[VERSIONS[1]])) >= 2:
        for line in report(ms):
            print(line)
    for problem in problems:
        print("FAIL:", problem)
    print("lk_versions report:", "FAILED" if problems else "ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
