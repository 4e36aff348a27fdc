"""bench/lk_versions.py: lk_moe 2.3.3 against 2.7.4 on measure's cpu_decode curve, rounds in turn (#57)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import lk_versions

MS = {"2.3.3": {1: [1.23, 1.27], 2: [3.0, 3.1], 3: [4.4, 4.5]},
      "2.7.4": {1: [1.17, 1.25], 2: [3.3, 3.4], 3: [4.4, 4.6]}}


def profile(ms: dict[int, float], threads: int = 12, path: str = "cpu_decode") -> dict[str, object]:
    cases = [{"tokens": n, "ms": v, "calls": 10, "distinct": 6.0 * n} for n, v in ms.items()]
    return {"measured": {"runs": [{"threads": 4, "path": path, "cases": []},
                                  {"threads": threads, "path": path, "cases": cases}]}}


def write(folder: Path, rounds: int = 2, ms: dict[str, dict[int, list[float]]] = MS) -> Path:
    (folder / "asked").write_text(json.dumps({"rounds": rounds, "threads": 12}))
    lines = []
    for version, by_tokens in ms.items():
        for r in range(1, rounds + 1):
            (folder / f"lk-{version}-r{r}.json").write_text(json.dumps(profile({n: v[r - 1] for n, v in by_tokens.items()})))
            lines.append(f"{version} r{r} {version}")
    (folder / "versions.txt").write_text("\n".join(lines) + "\n")
    return folder


def run(folder: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = lk_versions.main([str(folder)])
    return code, capsys.readouterr().out.splitlines()


def test_pairs_by_round_and_calls_a_tie_inside_the_floor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(write(tmp_path), capsys)
    assert code == 0 and out[-1] == "lk_versions report: ok"
    one = next(line for line in out if line.split()[:1] == ["1"])
    assert one.split()[-3:] == ["0.951", "0.984", "0.968"]  # 1.17/1.23, 1.25/1.27, their median
    floor = max(1.27 / 1.23, 1.25 / 1.17, 3.1 / 3.0, 3.4 / 3.3, 4.5 / 4.4, 4.6 / 4.4) - 1
    assert f"noise floor: {floor:.1%}" in " ".join(out)
    assert "1 token(s): TIE (inside the floor)" in out
    assert "2 token(s): 2.7.4 9.8% slower" in out  # 3.3/3.0 and 3.4/3.1: median 1.098, past the 6.8% floor


@pytest.mark.parametrize(("how", "message"), [
    ("missing round", "2.7.4 r2: no lk-2.7.4-r2.json (the round did not run or crashed)"),
    ("other threads", "2.3.3 r1: lk-2.3.3-r1.json: no timing at LK_THREADS=12"),
    ("other path", "the rounds timed different paths (cpu_decode, cpu_prefill): not comparable"),
    ("missing tokens", "2.3.3 r2: lk-2.3.3-r2.json: no timing of [3] token(s)"),
    ("other version", "2.3.3 r1: the timing's Python imported lk_moe 2.7.4, not 2.3.3"),
    ("one round", "1 round(s): at least 2 give a noise floor"),
    ("not asked", "no RUNDIR/asked"),
])
def test_fails_closed(tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str, message: str) -> None:
    write(tmp_path, rounds=1 if how == "one round" else 2)
    if how == "missing round":
        (tmp_path / "lk-2.7.4-r2.json").unlink()
    elif how == "other threads":
        (tmp_path / "lk-2.3.3-r1.json").write_text(json.dumps(profile({1: 1.0, 2: 2.0, 3: 3.0}, threads=8)))
    elif how == "other path":
        (tmp_path / "lk-2.7.4-r1.json").write_text(json.dumps(profile({1: 1.0, 2: 2.0, 3: 3.0}, path="cpu_prefill")))
    elif how == "missing tokens":
        (tmp_path / "lk-2.3.3-r2.json").write_text(json.dumps(profile({1: 1.0, 2: 2.0})))
    elif how == "other version":
        text = (tmp_path / "versions.txt").read_text()
        (tmp_path / "versions.txt").write_text(text.replace("2.3.3 r1 2.3.3", "2.3.3 r1 2.7.4"))
    elif how == "not asked":
        (tmp_path / "asked").unlink()
    code, out = run(tmp_path, capsys)
    assert code == 1 and f"FAIL: {message}" in [line[:len(message) + 6] for line in out], out
    assert out[-1] == "lk_versions report: FAILED"


def test_no_folder_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lk_versions.main([str(tmp_path / "none")]) == 2
    assert "no such run folder" in capsys.readouterr().err
