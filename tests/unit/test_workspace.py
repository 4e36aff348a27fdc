"""apply / refresh / check / export / fetch against real git repositories."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from ds4x.cli import main
from tests.conftest import UPSTREAM_URL, cli_args, git

Repo = tuple[Path, str]

MESSAGE = """demo: exact lookup

Substring matches pick stubs.

Origin: vendor, ds4x
Forwarded: no
"""


def run(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo, *args: str) -> tuple[int, str, str]:
    code = main(cli_args(project, tmp_path, git_repo, *args))
    out, err = capsys.readouterr()
    return code, out, err


def make_patch(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> Path:
    """The developer loop: apply, edit, commit, refresh."""
    assert run(capsys, project, tmp_path, git_repo, "apply", "--target", "demo")[0] == 0
    tree = project / "trees" / "demo"
    (tree / "demo/lookup.py").write_text("def find(name):\n    return name == 'libcudart.so'\n\n\nLIMIT = 1\n")
    git(tree, "commit", "-qam", MESSAGE)
    code, out, _ = run(capsys, project, tmp_path, git_repo, "refresh", "--target", "demo")
    assert code == 0, out
    return tree


def pin_upstream_change(project: Path, git_repo: Repo, lookup: str) -> str:
    """Upstream commits `lookup` as its demo/lookup.py, and the project pins that commit (returned)."""
    upstream, pinned = git_repo
    (upstream / "demo/lookup.py").write_text(lookup)
    git(upstream, "commit", "-qam", "upstream changed the lookup")
    new = git(upstream, "rev-parse", "HEAD")
    pins = project / "pins.toml"
    pins.write_text(pins.read_text().replace(pinned, new))
    return new


def test_fetch_through_mirror_is_sparse_and_verified(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    code, out, _ = run(capsys, project, tmp_path, git_repo, "fetch")
    assert code == 0
    cached = tmp_path / "cache" / "git" / f"demo-{git_repo[1]}"
    assert out == f"demo: {cached} @ {git_repo[1]}\n"
    assert (cached / "demo/lookup.py").exists()
    assert not (cached / "docs").exists()  # never needed, maybe missing from the mirror


def test_shallow_fetch_over_file_url(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    args = [*cli_args(project, tmp_path, git_repo, "fetch")[:-2], "--mirror", f"{UPSTREAM_URL}=file://{git_repo[0]}"]
    assert main(args) == 0
    cached = tmp_path / "cache" / "git" / f"demo-{git_repo[1]}"
    assert git(cached, "rev-parse", "HEAD") == git_repo[1]
    assert git(cached, "rev-list", "--count", "HEAD") == "1"  # the pinned commit only
    assert (cached / ".git" / "shallow").exists()


def test_dirty_cache_is_refused(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    run(capsys, project, tmp_path, git_repo, "fetch")
    cached = tmp_path / "cache" / "git" / f"demo-{git_repo[1]}"
    (cached / "README.md").write_text("edited in the cache\n")
    code, _, err = run(capsys, project, tmp_path, git_repo, "fetch")
    assert code == 1
    assert f"error: cache entry {cached} has local changes" in err
    assert f"hint: delete {cached} and run again" in err


def test_unreachable_upstream_is_one_clear_error(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    args = [*cli_args(project, tmp_path, git_repo, "fetch")[:-2], "--mirror", f"{UPSTREAM_URL}=http://127.0.0.1:9/demo"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert f"error: cannot fetch {git_repo[1][:12]} from http://127.0.0.1:9/demo" in err
    assert "hint: check the network, map the URL to a mirror" in err
    assert list((tmp_path / "cache" / "git").iterdir()) == []  # no half-fetched entry


def test_offline_with_empty_cache(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    code, _, err = run(capsys, project, tmp_path, git_repo, "fetch", "--offline")
    assert code == 1
    assert f"demo-{git_repo[1]} is not in the cache" in err


def test_refresh_writes_dep3_patch_and_series(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    tree = make_patch(capsys, project, tmp_path, git_repo)
    folder = project / "patches" / "demo"
    assert (folder / "series").read_text() == "demo-exact-lookup.patch\n"
    text = (folder / "demo-exact-lookup.patch").read_text()
    assert text.startswith("From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n")
    assert "Subject: demo: exact lookup\n" in text and "Forwarded: no\n" in text
    assert "extra.py" not in text  # overlay files stay out of patches
    assert (tree / "demo_ds4x" / "extra.py").read_text() == "ANSWER = 42\n"


def test_check_round_trip_is_byte_identical(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    make_patch(capsys, project, tmp_path, git_repo)
    before = (project / "patches/demo/demo-exact-lookup.patch").read_bytes()
    code, out, _ = run(capsys, project, tmp_path, git_repo, "check")
    assert (code, out) == (0, "demo: ok\n")
    # a hand edit that still applies but no longer round-trips is caught
    edited = re.sub(rb"index ([0-9a-f]{7})[0-9a-f]{33}\.\.([0-9a-f]{7})[0-9a-f]{33}", rb"index \1..\2", before)
    assert edited != before
    (project / "patches/demo/demo-exact-lookup.patch").write_bytes(edited)
    code, out, err = run(capsys, project, tmp_path, git_repo, "check")
    assert (code, out) == (1, "demo: FAILED\n")
    assert "demo-exact-lookup.patch: re-export differs" in err


def test_unlisted_patch_fails_check(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    make_patch(capsys, project, tmp_path, git_repo)
    (project / "patches/demo/stray.patch").write_text("x")
    code, _, err = run(capsys, project, tmp_path, git_repo, "check")
    assert code == 1 and "stray.patch: not listed in series" in err


MOVED = "def find(name):\n    return 'cudart' in name\n\n\nLIMIT = 1\n"


@pytest.mark.parametrize(("upstream_took_ours", "said", "hint"), [
    (False, "does not apply to demo @ {new}: hunk at demo/lookup.py:1", "hint: rebase it: `build.py apply --target demo`"),
    (True, "already applied upstream (the pinned source) at demo @ {new}", "hint: delete line 1 of"),
])
def test_check_names_what_an_upstream_change_did_to_a_patch(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path,
                                                             git_repo: Repo, upstream_took_ours: bool, said: str,
                                                             hint: str) -> None:
    """Upstream moved the lines the patch changes (it no longer applies: file and hunk named), or
    took the same change (the patch is no longer needed)."""
    tree = make_patch(capsys, project, tmp_path, git_repo)
    new = pin_upstream_change(project, git_repo, (tree / "demo/lookup.py").read_text() if upstream_took_ours else MOVED)
    code, _, err = run(capsys, project, tmp_path, git_repo, "check")
    assert code == 1
    assert "demo-exact-lookup.patch: " + said.format(new=new[:12]) in err
    assert hint in err


def test_corrupt_patch_is_named_as_such(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    make_patch(capsys, project, tmp_path, git_repo)
    patch = project / "patches/demo/demo-exact-lookup.patch"
    patch.write_text(re.sub(r"\n@@ -(\d+),(\d+)", "\n@@ -\\1,99", patch.read_text(), count=1))  # a hunk longer than its lines
    code, _, err = run(capsys, project, tmp_path, git_repo, "check")
    assert code == 2 and "demo-exact-lookup.patch: corrupt patch at line" in err
    assert "hint: restore it from git" in err and "rebase it" not in err


def test_patch_symlinked_from_outside_is_refused(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    make_patch(capsys, project, tmp_path, git_repo)
    patch = project / "patches/demo/demo-exact-lookup.patch"
    outside = tmp_path / "elsewhere.patch"
    outside.write_bytes(patch.read_bytes())
    patch.unlink()
    patch.symlink_to(outside)
    code, _, err = run(capsys, project, tmp_path, git_repo, "apply", "--target", "demo", "--dir", str(tmp_path / "t2"))
    assert code == 2 and "'demo-exact-lookup.patch' is a symbolic link" in err and not (tmp_path / "t2").exists()


def test_wheel_into_an_unwritable_dist(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    with pytest.raises(SystemExit) as exit:  # refused by argparse, before any work
        run(capsys, project, tmp_path, git_repo, "wheel", "--target", "demo", "--dist", str(blocked / "dist"))
    assert exit.value.code == 2 and f"--dist: '{blocked / 'dist'}': {blocked} is a file, not a folder" in capsys.readouterr().err


def test_apply_refuses_existing_tree_and_leaves_none_on_failure(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    make_patch(capsys, project, tmp_path, git_repo)
    code, _, err = run(capsys, project, tmp_path, git_repo, "apply", "--target", "demo")
    assert code == 1 and "trees/demo exists" in err
    (project / "patches/demo/demo-exact-lookup.patch").write_text("not a patch\n")
    code, _, err = run(capsys, project, tmp_path, git_repo, "apply", "--target", "demo", "--dir", str(tmp_path / "t2"))
    assert code == 2 and "not a git format-patch file" in err
    assert not (tmp_path / "t2").exists() and not (tmp_path / "t2.part").exists()


def test_export_writes_upstream_ready_files_and_mbox(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    make_patch(capsys, project, tmp_path, git_repo)
    out = tmp_path / "out"
    author = ("--author", "Jane Doe <jane@example.org>")
    assert run(capsys, project, tmp_path, git_repo, "export", "--target", "demo", "--output", str(out), *author)[0] == 0
    (exported,) = out.iterdir()
    assert exported.name == "0001-demo-exact-lookup.patch"
    text = exported.read_text()
    # an overlay file that neither a patch nor an entry point imports stays out
    assert "Subject: [PATCH] demo: exact lookup" in text and " 1 file changed" in text and "demo_ds4x" not in text
    mbox = tmp_path / "series.mbox"
    assert run(capsys, project, tmp_path, git_repo, "export", "--target", "demo", "--mbox", str(mbox), *author)[0] == 0
    assert mbox.read_text() == text


def test_unknown_target_exit_code(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    code, _, err = run(capsys, project, tmp_path, git_repo, "fetch", "--target", "nope")
    assert code == 2
    assert err == "error: unknown target 'nope'\nhint: choose one of: demo\n"


def test_refresh_without_a_tree_says_apply_first(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    code, _, err = run(capsys, project, tmp_path, git_repo, "refresh", "--target", "demo")
    assert code == 1
    assert f"error: {project / 'trees' / 'demo'} is not a development tree" in err
    assert "hint: run `build.py apply --target demo` first" in err
    code, _, err = run(capsys, project, tmp_path, git_repo, "refresh")
    assert (code, err) == (2, "error: refresh works on one target\nhint: name it with --target\n")


def test_scratch_folders_are_private_and_removed(tmp_path: Path) -> None:
    from ds4x.scratch import scratch_dir

    with scratch_dir("ds4x-t-", tmp_path) as folder:
        assert folder.parent == tmp_path and (folder.stat().st_mode & 0o777) == 0o700
    assert not folder.exists()


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def interrupt_after_one_patch(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """refresh's patch writer, made to write one file and then take a Ctrl-C; the names it got."""
    from ds4x.build import workspace

    written: list[str] = []
    real = workspace._write_patch

    def write_then_interrupt(path: Path, text: str) -> None:
        if written:
            raise KeyboardInterrupt
        real(path, text)
        written.append(path.name)

    monkeypatch.setattr(workspace, "_write_patch", write_then_interrupt)
    return written


def second_commit(tree: Path) -> None:
    (tree / "demo/__init__.py").write_text("VERSION = '1.1+ds4x'\n")
    git(tree, "commit", "-qam", MESSAGE.replace("demo: exact lookup", "demo: mark the version"))


def test_an_interrupted_refresh_leaves_the_old_series_whole(capsys: pytest.CaptureFixture[str], project: Path,
                                                            tmp_path: Path, git_repo: Repo,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The new series is written into patches/demo.part/ and swapped in: a Ctrl-C after the first
    of two patch files leaves patches/demo/ byte for byte as it was, and no .part."""
    tree = make_patch(capsys, project, tmp_path, git_repo)
    second_commit(tree)
    assert run(capsys, project, tmp_path, git_repo, "refresh", "--target", "demo")[0] == 0
    folder = project / "patches" / "demo"
    (folder / "series").write_text("# why these patches\n" + (folder / "series").read_text())
    (folder / "NOTES.md").write_text("kept by refresh\n")
    (tree / "demo/__init__.py").write_text("VERSION = '1.2+ds4x'\n")
    git(tree, "commit", "-qa", "--amend", "--no-edit")  # the second patch changes, the first does not
    before = snapshot(project / "patches")
    written = interrupt_after_one_patch(monkeypatch)
    code, _, err = run(capsys, project, tmp_path, git_repo, "refresh", "--target", "demo")
    assert (code, err, written) == (130, "interrupted\n", ["demo-exact-lookup.patch"])
    assert snapshot(project / "patches") == before  # also: no demo.part/ or demo.old/ beside it
    monkeypatch.undo()
    assert run(capsys, project, tmp_path, git_repo, "refresh", "--target", "demo")[0] == 0
    assert (folder / "series").read_text() == "# why these patches\ndemo-exact-lookup.patch\ndemo-mark-the-version.patch\n"
    assert sorted(snapshot(project / "patches")) == ["demo/NOTES.md", "demo/demo-exact-lookup.patch",
                                                     "demo/demo-mark-the-version.patch", "demo/series"]
    assert "1.2+ds4x" in (folder / "demo-mark-the-version.patch").read_text()


def test_an_interrupted_roll_leaves_pins_and_patches_as_they_were(capsys: pytest.CaptureFixture[str], project: Path,
                                                                  tmp_path: Path, git_repo: Repo,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """roll refreshes the patches, then puts the new pin in pins.toml: a Ctrl-C while it writes
    the patches leaves both as they were, and no temporary file or folder beside them."""
    second_commit(make_patch(capsys, project, tmp_path, git_repo))
    assert run(capsys, project, tmp_path, git_repo, "refresh", "--target", "demo")[0] == 0
    upstream, _ = git_repo
    (upstream / "README.md").write_text("demo upstream, next\n")
    git(upstream, "commit", "-qam", "next")
    before = snapshot(project / "patches"), (project / "pins.toml").read_bytes()
    written = interrupt_after_one_patch(monkeypatch)
    code, _, err = run(capsys, project, tmp_path, git_repo, "roll", "--target", "demo", "--to",
                       git(upstream, "rev-parse", "HEAD"))
    assert (code, err.splitlines()[-1], written) == (130, "interrupted", ["demo-exact-lookup.patch"])
    assert (snapshot(project / "patches"), (project / "pins.toml").read_bytes()) == before
    assert sorted(p.name for p in project.iterdir()) == ["demo_ds4x", "patches", "pins.toml", "trees"]


def test_roll_a_git_pin_to_a_commit(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path,
                                    git_repo: Repo) -> None:
    """A git-only pin moves to another commit (an abbreviation the local mirror resolves); the
    patch is refreshed there and `check` passes on the new pin."""
    make_patch(capsys, project, tmp_path, git_repo)
    upstream, pinned = git_repo
    (upstream / "README.md").write_text("demo upstream, next\n")
    git(upstream, "commit", "-qam", "next")
    newer = git(upstream, "rev-parse", "HEAD")
    code, out, err = run(capsys, project, tmp_path, git_repo, "roll", "--target", "demo", "--to", newer[:9].upper())
    assert code == 0, err
    assert "applies cleanly" in out and f"demo now pins commit {newer}" in out
    assert f'commit = "{newer}"' in (project / "pins.toml").read_text() and pinned not in (project / "pins.toml").read_text()
    assert run(capsys, project, tmp_path, git_repo, "check", "--target", "demo")[0] == 0


@pytest.mark.parametrize(("to", "message"), [
    ("1.2.0", "--to 1.2.0: https://example.invalid/demo/upstream is pinned to a git commit"),
    ("deadbeef1", "--to deadbeef1: no such commit in "),
])
def test_roll_refuses_what_names_no_commit(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path,
                                           git_repo: Repo, to: str, message: str) -> None:
    before = (project / "pins.toml").read_text()
    code, _, err = run(capsys, project, tmp_path, git_repo, "roll", "--target", "demo", "--to", to)
    assert code == 2 and message in err
    assert (project / "pins.toml").read_text() == before and not (project / "trees" / f"demo-{to}").exists()


def test_a_git_roll_conflict_names_the_commits_and_merges_three_way(
        capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    make_patch(capsys, project, tmp_path, git_repo)
    upstream, _ = git_repo
    (upstream / "demo/lookup.py").write_text("def find(name):\n    return name.endswith('.so')\n\n\nLIMIT = 1\n")
    git(upstream, "commit", "-qam", "upstream rewrites find")
    newer = git(upstream, "rev-parse", "HEAD")
    run(capsys, project, tmp_path, git_repo, "fetch", "--target", "demo")  # the pinned base, in the cache
    before = (project / "pins.toml").read_text()
    code, _, err = run(capsys, project, tmp_path, git_repo, "roll", "--target", "demo", "--to", newer)
    assert code == 1
    assert re.search(r"hunk at demo/lookup\.py:\d+; 1 upstream commits between [0-9a-f]{12} and "
                     rf"{newer[:12]} touched demo/lookup\.py: [0-9a-f]+ upstream rewrites find", err), err
    assert "refs/ds4x/pinned" in err and (project / "pins.toml").read_text() == before
    tree = project / "trees" / f"demo-{newer[:12]}"
    patch = next((project / "patches" / "demo").glob("*.patch"))
    with pytest.raises(subprocess.CalledProcessError) as failed:  # it merges, then stops at the conflict
        git(tree, "am", "--3way", str(patch))
    am = failed.value
    assert "CONFLICT (content): Merge conflict in demo/lookup.py" in am.stdout + am.stderr, am.stderr
    assert "Falling back to patching base and 3-way merge" in am.stdout + am.stderr, am.stderr


def test_check_newest_compares_a_git_pin_with_its_mirror(capsys: pytest.CaptureFixture[str], project: Path,
                                                          tmp_path: Path, git_repo: Repo) -> None:
    """A git-only pin against its local mirror's newest commit: the same, one the series applies
    to, then one it does not; pins.toml untouched."""
    make_patch(capsys, project, tmp_path, git_repo)
    upstream, pinned = git_repo
    before = (project / "pins.toml").read_text()
    assert run(capsys, project, tmp_path, git_repo, "check", "--newest")[1] == f"demo: {pinned[:12]} is the newest commit\n"
    (upstream / "README.md").write_text("demo upstream, next\n")
    git(upstream, "commit", "-qam", "next")
    newer = git(upstream, "rev-parse", "HEAD")
    assert run(capsys, project, tmp_path, git_repo, "check", "--newest")[1] == \
        f"demo: pinned {pinned[:12]}, newest {newer[:12]}: applies\n"
    (upstream / "demo/lookup.py").write_text("def find(name):\n    return name.endswith('.so')\n\n\nLIMIT = 1\n")
    git(upstream, "commit", "-qam", "upstream rewrites find")
    code, out, _ = run(capsys, project, tmp_path, git_repo, "check", "--newest")
    assert code == 1 and re.fullmatch(r"demo: pinned \w{12}, newest \w{12}: does not apply: .*hunk at demo/lookup\.py:\d+\n",
                                      out), out
    assert (project / "pins.toml").read_text() == before
