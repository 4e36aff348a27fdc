"""The README's table of measured figures: each row names its run, and its ratios are the run's report
(bench/results/RUN/report.txt, which test_e2e_report and test_e2e_mixed reprint from the run's data),
within the rounding of the quote; each run it names is one docs/results.md marks current."""

from __future__ import annotations

from pathlib import Path

from tests.doc_figures import assert_quotes, row, tables
from tests.unit.test_results_index import index

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
POLICIES = ("phase 0/2", "adaptive")


def steady_ratio(report: list[str], phase: str, requests: int, policy: str) -> str:
    """`policy`'s tok/s against fixed 2 in the same round, as the report prints it for the phase."""
    start = report.index(f"{phase}, {requests} running request(s): steady decode tok/s")
    line = next(line for line in report[start + 2:] if line.split("  ")[0] == policy)
    return line.split()[-1]


def mixed_ratio(report: list[str], policy: str) -> str:
    """Per request against the batch's depth on the mixed pair: the batch's median ratio."""
    line = next(line for line in report if line.startswith(f"{policy} per request") and " vs " in line)
    return line.split("batch ")[1].split()[0]


def test_the_readme_quotes_its_runs_reports() -> None:
    [table] = [t for t in tables(ROOT / "README.md") if t[0][:2] == ["phase", "requests"]]
    header, rows = table[0], table[1:]
    assert header[2:4] == list(POLICIES) and rows
    current = {run for run, status in index().items() if status.startswith("current")}
    for phase, requests, *ratios, cell in rows:
        run = cell.strip("`")
        assert run in current, f"the README quotes {run}, which docs/results.md does not mark current"
        report = (RESULTS / run / "report.txt").read_text().splitlines()
        if phase.startswith("one of each"):
            want = [mixed_ratio(report, policy) for policy in POLICIES]
        else:
            want = [steady_ratio(report, phase, int(requests), policy) for policy in POLICIES]
        assert_quotes(" ".join(ratios), want)


def test_the_readme_quotes_the_prefill_run() -> None:
    """The README's prefill table is bench/results/h100-dsv4-prefill's reports: prefill tok/s, the ratio and
    the decode tok/s at 16384 prompt tokens, and the first token at 65536 (the CPU's from the second call)."""
    run = RESULTS / "h100-dsv4-prefill"
    assert index()["h100-dsv4-prefill"].startswith("current")
    lines = [line.split() for name in ("report.txt", "report-cpu-65536.txt")
             for line in (run / name).read_text().splitlines()]
    prompt = {(cells[0], cells[1]): cells for cells in lines if len(cells) >= 6 and cells[0].isdigit()}
    for arm, label in (("cpu", "CPU ("), ("gpu", "cutlass"), ("triton", "triton engine")):
        short, long = prompt[("16384", arm)], prompt[("65536", arm)]
        want = [short[3], *([] if arm == "cpu" else [short[4]]), long[2], short[5]]
        cells = row(ROOT / "README.md", label, column="16k prompt: tok/s")
        assert_quotes(" ".join(cells[1:]), want)
