"""ci/fork-gpu/lk_versions on this machine's CPU: both lk_moe wheels (2.3.3, the fork's pin, and 2.7.4),
downloaded through pip into the ds4x cache, installed apart, and measure run with each in turn, two
rounds, on a small MXFP4 layer (where no GPU is, measure times cpu_prefill); then the report. Held to
what it ran, never to its timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ds4x.build import sources

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"num_hidden_layers": 4, "hidden_size": 512, "moe_intermediate_size": 256, "n_routed_experts": 16,
         "num_experts_per_tok": 2, "vocab_size": 1000, "num_attention_heads": 4, "head_dim": 64,
         "expert_dtype": "fp4"}


def wheels(python: Path) -> Path:
    """Both cp312 lk_moe wheels, fetched once through pip (the user's configured index) into the cache."""
    folder = sources.default_cache() / "downloads" / "lk-moe-wheels"
    for version in ("2.3.3", "2.7.4"):
        if not list(folder.glob(f"lk_moe-{version}-*.whl")):
            subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", folder,
                            f"lk-moe=={version}"], check=True, timeout=600)
    return folder


def test_both_versions_run_in_turn_and_the_report_reads_them(lk_python: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(SMALL))
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": str(lk_python), "CLI_PYTHON": sys.executable,
           "CONFIG": str(config),
           "LK_WHEELS": str(wheels(lk_python)), "LK_THREADS": "2", "BUDGET_S": "4", "ROUNDS": "2",
           "MEASURE_ARGS": "--noise-bound 10000"}  # a busy 2-core machine's noise is not this test's business
    done = subprocess.run(["bash", ROOT / "ci/fork-gpu/lk_versions"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    out = tmp_path / "out"
    assert (out / "versions.txt").read_text().split("\n")[:4] == ["2.3.3 r1 2.3.3", "2.7.4 r1 2.7.4",
                                                                  "2.3.3 r2 2.3.3", "2.7.4 r2 2.7.4"], done.stdout
    report = (out / "report.txt").read_text()
    assert "lk_moe 2.7.4 against 2.3.3, no pool: ms a layer call, rounds in turn" in report, done.stdout + done.stderr
    assert "noise floor: " in report and all(f"{n} token(s): " in report for n in (1, 2, 3))
    assert done.returncode == 0 and "lk_versions report: ok" in report, done.stdout[-3000:] + done.stderr[-3000:]
    assert (out / "logs.tgz").is_file() and not list(out.glob("*.log"))
