"""`export` stands alone (the overlay in the patch that first imports it, signed
off by the caller), and `check --newest` tells a patch upstream fixed its own way
from a conflict."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ds4x.build.export import imported_modules, placement
from ds4x.cli import main
from tests.conftest import cli_args, git

Repo = tuple[Path, str]
JANE = "Jane Doe <jane@example.org>"
MESSAGE = """demo: exact lookup through the overlay

Substring matches pick stubs.

Origin: vendor, ds4x
Forwarded: no
Applied-Upstream: 1.2, demo/lookup.py exact_name
"""


def run(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo, *args: str) -> tuple[int, str, str]:
    code = main(cli_args(project, tmp_path, git_repo, *args))
    out, err = capsys.readouterr()
    return code, out, err


def make_patch(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    """A patch whose code imports the overlay module demo_ds4x/extra.py; the package's entry point, which no patch imports."""
    (project / "demo_ds4x/__main__.py").write_text("print('a tool')\n")
    assert run(capsys, project, tmp_path, git_repo, "apply", "--target", "demo")[0] == 0
    tree = project / "trees" / "demo"
    (tree / "demo/lookup.py").write_text(
        "from demo_ds4x.extra import ANSWER\n\n\ndef find(name):\n    return name == 'libcudart.so'\n\n\nLIMIT = ANSWER\n")
    git(tree, "commit", "-qam", MESSAGE)
    assert run(capsys, project, tmp_path, git_repo, "refresh", "--target", "demo")[0] == 0


def test_imports_resolve_absolute_relative_and_submodules() -> None:
    lines = ["from vllm_ds4x.depth.policy import DraftDepthConfig", "    from vllm_ds4x.hooks import moe_residency",
             "from . import sim", "from .mixed import (Mixed,", "    Other)",
             "from vllm_ds4x.hooks import (", "    spec_scheduling,", ")", "import json, vllm_ds4x.x as y"]
    assert imported_modules(lines, "vllm_ds4x.depth") >= {
        "vllm_ds4x.depth.policy", "vllm_ds4x.hooks.moe_residency", "vllm_ds4x.depth.sim", "vllm_ds4x.depth.mixed", "json",
        "vllm_ds4x.hooks.spec_scheduling", "vllm_ds4x.x"}  # a parenthesised import over several lines names its modules too
    assert "vllm_ds4x.depth.mixed" not in imported_modules(lines)  # a patch line has no package to be relative to


def test_each_overlay_file_goes_into_the_first_patch_that_needs_it(tmp_path: Path) -> None:
    texts = {"__init__.py": "", "a.py": "from .b import B\n", "b.py": "B = 1\n", "c.py": "from pkg.b import B\n",
             "tool.py": "from . import a\n", "__main__.py": "from pkg import tool\n", "unused.py": "X = 1\n"}
    files = {}
    for name, text in texts.items():
        (tmp_path / name).write_text(text)
        files[f"pkg/{name}"] = tmp_path / name

    def patch(path: str, added: str) -> str:
        return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1,2 @@\n x\n+{added}\n"

    placed = placement([("one.patch", patch("up/x.py", "from pkg import a")),
                        ("docs.patch", patch("README.md", "from pkg import c")),  # not Python: imports nothing
                        ("two.patch", patch("up/y.py", "from pkg.c import C")),
                        ("last.patch", patch("up/z.py", "pass"))], files)
    assert placed == {"one.patch": ["pkg/__init__.py", "pkg/a.py", "pkg/b.py"], "docs.patch": [],
                      "two.patch": ["pkg/c.py"], "last.patch": ["pkg/__main__.py", "pkg/tool.py"]}  # no one runs unused.py


def test_export_applies_to_the_clean_base_and_imports(capsys: pytest.CaptureFixture[str], project: Path,
                                                     tmp_path: Path, git_repo: Repo) -> None:
    make_patch(capsys, project, tmp_path, git_repo)
    out = tmp_path / "out"
    code, _, err = run(capsys, project, tmp_path, git_repo, "export", "--target", "demo", "--output", str(out),
                       "--author", JANE)
    assert code == 0, err
    (exported,) = out.iterdir()
    text = exported.read_text()
    assert text.count("\nnew file mode ") == 3 and "diff --git a/demo_ds4x/__init__.py b/demo_ds4x/__init__.py" in text
    assert "+++ b/demo_ds4x/extra.py" in text and "+++ b/demo_ds4x/__main__.py" in text
    assert "From: Jane Doe <jane@example.org>" in text
    assert "Forwarded: no\nApplied-Upstream: 1.2, demo/lookup.py exact_name\nSigned-off-by: Jane Doe <jane@example.org>\n" in text
    assert "new file mode" not in (project / "patches/demo/demo-exact-lookup-through-the-overlay.patch").read_text()
    clean = tmp_path / "clean"
    git(tmp_path, "clone", "-q", str(git_repo[0]), str(clean))
    git(clean, "am", str(exported))
    found = subprocess.run([sys.executable, "-c", "import demo.lookup; print(demo.lookup.LIMIT)"], cwd=clean,
                           capture_output=True, text=True)
    assert (found.returncode, found.stdout) == (0, "42\n"), found.stderr
    assert run(capsys, project, tmp_path, git_repo, "check")[:2] == (0, "demo: ok\n")  # the patch files round-trip as before


def test_export_signs_with_the_git_config_identity(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path,
                                                   git_repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    make_patch(capsys, project, tmp_path, git_repo)
    config = tmp_path / "gitconfig"
    config.write_text("[user]\n\tname = Ann Config\n\temail = ann@example.org\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    mbox = tmp_path / "series.mbox"
    assert run(capsys, project, tmp_path, git_repo, "export", "--target", "demo", "--mbox", str(mbox))[0] == 0
    text = mbox.read_text()
    assert "From: Ann Config <ann@example.org>" in text and "Signed-off-by: Ann Config <ann@example.org>" in text


@pytest.mark.parametrize(("author", "message"), [
    (None, "error: export signs each patch off, and git names no author\n"
           "hint: set git config user.name and user.email, or pass --author 'Name <email>'\n"),
    ("jane@example.org", "error: --author 'jane@example.org' is not 'Name <email>'\n"),
])
def test_export_without_an_author_is_refused(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path,
                                             git_repo: Repo, author: str | None, message: str) -> None:
    assert os.environ["GIT_CONFIG_GLOBAL"] == os.devnull  # no identity configured
    code, _, err = run(capsys, project, tmp_path, git_repo, "export", "--target", "demo",
                       *(["--author", author] if author else []))
    assert code == 2 and err.startswith(message), err
    assert not (project / "dist").exists()


def test_a_patch_upstream_fixed_its_own_way_is_no_conflict(capsys: pytest.CaptureFixture[str], project: Path,
                                                          tmp_path: Path, git_repo: Repo) -> None:
    """Upstream's own fix defines what the patch's Applied-Upstream field names:
    `check --newest` says so and exits 0; `check` on that pin names it to drop."""
    make_patch(capsys, project, tmp_path, git_repo)
    upstream, _ = git_repo
    lookup = "def exact_name(path, lib):\n    return path.rsplit('/', 1)[-1] == lib\n\n\nLIMIT = 2\n"
    (upstream / "demo/lookup.py").write_text(lookup)
    git(upstream, "commit", "-qam", "upstream: its own exact match")
    newer = git(upstream, "rev-parse", "HEAD")
    code, out, _ = run(capsys, project, tmp_path, git_repo, "check", "--newest")
    assert (code, out.split(": ", 2)[2]) == (0, "demo-exact-lookup-through-the-overlay.patch: fixed upstream (differently): "
                                                "demo/lookup.py defines exact_name (drop it from the series at the roll); "
                                                "no other patch\n")
    (upstream / "demo/lookup.py").write_text(lookup.replace("exact_name", "by_name"))  # not the fix it names
    git(upstream, "commit", "-qam", "upstream: renamed")
    code, out, _ = run(capsys, project, tmp_path, git_repo, "check", "--newest")
    assert code == 1 and "does not apply: " in out and "hunk at demo/lookup.py:1" in out
    pins = project / "pins.toml"
    pins.write_text(pins.read_text().replace(git_repo[1], newer))
    code, _, err = run(capsys, project, tmp_path, git_repo, "check")
    assert code == 1 and (f"demo-exact-lookup-through-the-overlay.patch: fixed upstream (differently) at demo @ {newer[:12]}: "
                          "demo/lookup.py defines exact_name (Applied-Upstream: 1.2, demo/lookup.py exact_name)") in err
    assert "hint: delete line 1 of" in err


def test_export_writes_over_a_folder_only_with_force(capsys: pytest.CaptureFixture[str], project: Path,
                                                    tmp_path: Path, git_repo: Repo) -> None:
    """An --output that holds numbered patches is refused; with --force an earlier export's numbered
    patches that this one does not make go (`git am *.patch` would apply them too), other files stay."""
    make_patch(capsys, project, tmp_path, git_repo)
    out = tmp_path / "out"
    out.mkdir()
    (out / "0007-stale.patch").write_text("stale\n")
    (out / "notes.txt").write_text("mine\n")
    export = ("export", "--target", "demo", "--output", str(out), "--author", JANE)
    code, _, err = run(capsys, project, tmp_path, git_repo, *export)
    assert code == 2 and f"--output {out}: holds 1 file(s) (0007-stale.patch, ...)" in err, err
    assert sorted(p.name for p in out.iterdir()) == ["0007-stale.patch", "notes.txt"]
    code, _, err = run(capsys, project, tmp_path, git_repo, *export, "--force")
    assert code == 0, err
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == 2 and names[0].startswith("0001-") and names[1] == "notes.txt"
