"""Patch problems are records (#24 item 2): workspace raises or returns them,
roll.run is the whole roll transaction, and the CLI only words them, as it
always has."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from ds4x.build import newest, pins, roll, sources, workspace
from ds4x.build.pins import GitPin
from ds4x.build.problems import PatchError, PatchProblem, RollConflict
from ds4x.checkout import Checkout
from ds4x.cli import main
from ds4x.errors import InputError
from tests.conftest import UPSTREAM_URL, cli_args, git
from tests.unit.test_workspace import make_patch

Repo = tuple[Path, str]
PATCH = "demo-exact-lookup.patch"


def settings(tmp_path: Path, git_repo: Repo) -> sources.Settings:
    return sources.Settings(cache=tmp_path / "cache", mirrors=sources.parse_mirrors([f"{UPSTREAM_URL}={git_repo[0]}"]))


def upstream_rewrites_find(git_repo: Repo) -> str:
    """An upstream commit the patch conflicts with; its id."""
    upstream, _ = git_repo
    (upstream / "demo/lookup.py").write_text("def find(name):\n    return name.endswith('.so')\n\n\nLIMIT = 1\n")
    git(upstream, "commit", "-qam", "upstream rewrites find")
    return git(upstream, "rev-parse", "HEAD")


def test_a_conflicting_patch_is_a_record_and_the_cli_words_it_as_before(
        capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    make_patch(capsys, project, tmp_path, git_repo)
    newer = upstream_rewrites_find(git_repo)
    checkout = Checkout(pins=project / "pins.toml")
    checkout.pins.write_text(checkout.pins.read_text().replace(git_repo[1], newer))
    base = sources.fetch(pins.load(checkout.pins).get("demo"), settings(tmp_path, git_repo))
    with pytest.raises(PatchError) as raised:
        workspace.check(base, checkout.layout)
    series = project / "patches/demo/series"
    assert raised.value.problem == PatchProblem(kind="conflict", patch=series.parent / PATCH, name=PATCH, target="demo",
                                                commit=newer, series=series, series_line=1, file="demo/lookup.py",
                                                line=1)
    assert raised.value.exit_code == 1
    code = main(cli_args(project, tmp_path, git_repo, "check"))
    assert (code, capsys.readouterr().err.splitlines()[-2:]) == (1, [
        f"error: {series.parent / PATCH}: does not apply to demo @ {newer[:12]}: hunk at demo/lookup.py:1",
        "hint: rebase it: `build.py apply --target demo`, fix, commit, `build.py refresh`"])


def test_check_returns_records(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path,
                               git_repo: Repo) -> None:
    make_patch(capsys, project, tmp_path, git_repo)
    folder = project / "patches/demo"
    (folder / "stray.patch").write_text("x")
    abbreviated = re.sub(r"(?m)^index ([0-9a-f]{12})[0-9a-f]+\.\.([0-9a-f]{12})[0-9a-f]+", r"index \1..\2",
                         (folder / PATCH).read_text())  # applies; re-exported with --full-index
    (folder / PATCH).write_text(abbreviated)
    checkout = Checkout(pins=project / "pins.toml")
    base = sources.fetch(pins.load(checkout.pins).get("demo"), settings(tmp_path, git_repo))
    checked = workspace.check(base, checkout.layout)
    differs = PatchProblem(kind="re-export-differs", patch=folder / PATCH, name=PATCH, target="demo",
                           commit=git_repo[1], series=folder / "series", series_line=1)
    assert checked.problems == [
        differs, replace(differs, kind="not-listed", patch=folder / "stray.patch", name="stray.patch", series_line=0)]
    assert (checked.upstream, checked.listed) == ([], 1)
    assert main(cli_args(project, tmp_path, git_repo, "check")) == 1
    assert capsys.readouterr().err.splitlines()[-2:] == [
        f"  {folder / PATCH}: re-export differs (run refresh and commit the result)",
        f"  {folder / 'stray.patch'}: not listed in series"]


def test_check_newest_is_a_drift_record(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path,
                                        git_repo: Repo) -> None:
    make_patch(capsys, project, tmp_path, git_repo)
    newer = upstream_rewrites_find(git_repo)
    checkout = Checkout(pins=project / "pins.toml")
    drift = newest.drift(pins.load(checkout.pins).get("demo"), settings(tmp_path, git_repo), checkout.layout)
    assert (drift.pinned, drift.newest, drift.released, drift.upstream) == (git_repo[1][:12], newer[:12], False, ())
    assert isinstance(drift.failure, PatchError) and drift.failure.problem.kind == "conflict"
    assert (drift.failure.problem.file, drift.failure.problem.line) == ("demo/lookup.py", 1)


def test_the_roll_transaction_is_roll_run(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path,
                                          git_repo: Repo) -> None:
    """No CLI: roll.run applies, refreshes the patches and writes the pin."""
    make_patch(capsys, project, tmp_path, git_repo)
    upstream, _ = git_repo
    (upstream / "README.md").write_text("demo upstream, next\n")
    git(upstream, "commit", "-qam", "next")
    newer = git(upstream, "rev-parse", "HEAD")
    checkout = Checkout(pins=project / "pins.toml")
    patches = {p.name: p.read_bytes() for p in (project / "patches/demo").iterdir()}
    target = pins.load(checkout.pins).get("demo")
    rolled = roll.run(target, newer, settings(tmp_path, git_repo), checkout)
    assert (rolled.tree, rolled.statuses, rolled.pin) == (project / "trees" / f"demo-{newer[:12]}", [(PATCH, True)], None)
    assert rolled.git == GitPin(url=UPSTREAM_URL, commit=newer)
    assert pins.load(checkout.pins).get("demo").git == rolled.git
    assert {p.name: p.read_bytes() for p in (project / "patches/demo").iterdir()} == patches  # applied cleanly
    with pytest.raises(InputError, match=f"{rolled.tree} exists"):  # a second roll into the same tree
        roll.run(target, newer, settings(tmp_path, git_repo), checkout)


def test_a_roll_conflict_is_a_record_with_the_upstream_commits(capsys: pytest.CaptureFixture[str], project: Path,
                                                               tmp_path: Path, git_repo: Repo) -> None:
    make_patch(capsys, project, tmp_path, git_repo)
    newer = upstream_rewrites_find(git_repo)
    checkout = Checkout(pins=project / "pins.toml")
    before = checkout.pins.read_bytes()
    with pytest.raises(RollConflict) as raised:
        roll.run(pins.load(checkout.pins).get("demo"), newer, settings(tmp_path, git_repo), checkout)
    conflict = raised.value
    assert isinstance(conflict.cause, PatchError)
    problem = conflict.cause.problem
    short = git(git_repo[0], "rev-parse", "--short", newer)
    assert (problem.kind, problem.file, problem.since, problem.commits) == (
        "conflict", "demo/lookup.py", git_repo[1], (f"{short} upstream rewrites find",))
    assert (conflict.tree, conflict.remaining) == (project / "trees" / f"demo-{newer[:12]}", [PATCH])
    assert checkout.pins.read_bytes() == before


def test_the_cli_words_what_roll_run_returns(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path,
                                             git_repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    """cmd_roll prints the Rolled record, in the words it printed before."""
    calls = []

    def run(target: pins.Target, to: str, settings: sources.Settings, checkout: Checkout,
            tree: Path | None = None) -> roll.Rolled:
        calls.append((target.name, to, checkout.pins, tree))
        return roll.Rolled(kind="git", pin=None, kernels=None, git=GitPin(url=UPSTREAM_URL, commit="a" * 40),
                           statuses=[("one.patch", True), ("two.patch", False)], tree=Path("/t/demo-aaa"))

    monkeypatch.setattr(roll, "run", run)
    code = main(cli_args(project, tmp_path, git_repo, "roll", "--target", "demo", "--to", "a" * 40))
    assert (code, capsys.readouterr().out) == (0, "  one.patch: applies cleanly\n"
                                                  "  two.patch: applies with offsets (refreshed)\n"
                                                  f"{project / 'pins.toml'}: demo now pins commit {'a' * 40}; "
                                                  "patches refreshed from /t/demo-aaa\n")
    assert calls == [("demo", "a" * 40, project / "pins.toml", None)]
