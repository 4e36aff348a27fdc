"""Fixtures every test shares: git isolated from the user's configuration, and a git helper with fixed authors and dates."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ds4x import log


@pytest.fixture(autouse=True)
def isolated_git(monkeypatch: pytest.MonkeyPatch) -> None:
    """What gitops.isolate_environ does for the CLI, undone after each test."""
    for key in list(os.environ):
        if key.startswith("GIT_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "0")
    log.setup(0)


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_DATE": "@1700000000 +0000",
           "GIT_COMMITTER_DATE": "@1700000000 +0000"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


UPSTREAM_FILES = {
    "demo/__init__.py": "VERSION = '1.0'\n",
    "demo/lookup.py": "def find(name):\n    return name in 'libcudart_stub.so'\n\n\nLIMIT = 1\n",
    "docs/assets/big.bin": "pretend this blob is missing from the mirror\n",
    "README.md": "demo upstream\n",
}


@pytest.fixture
def git_repo(tmp_path: Path) -> tuple[Path, str]:
    """A real upstream repository with two commits; returns (path, pinned commit)."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for rel, text in UPSTREAM_FILES.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "initial")
    (repo / "demo/__init__.py").write_text("VERSION = '1.1'\n")
    git(repo, "commit", "-qam", "bump")
    return repo, git(repo, "rev-parse", "HEAD")


UPSTREAM_URL = "https://example.invalid/demo/upstream"


@pytest.fixture
def project(tmp_path: Path, git_repo: tuple[Path, str]) -> Path:
    """A ds4x checkout layout for the fixture upstream: pins.toml, patches/, an overlay package."""
    _, commit = git_repo
    root = tmp_path / "project"
    (root / "patches" / "demo").mkdir(parents=True)
    (root / "demo_ds4x").mkdir(parents=True)
    (root / "demo_ds4x" / "__init__.py").write_text("")
    (root / "demo_ds4x" / "extra.py").write_text("ANSWER = 42\n")
    (root / "pins.toml").write_text(
        f'[targets.demo]\npackage = "demo"\ndefault = true\noverlays = ["demo_ds4x"]\n'
        f'git = {{ url = "{UPSTREAM_URL}", commit = "{commit}" }}\n'
    )
    return root


def cli_args(project: Path, tmp_path: Path, git_repo: tuple[Path, str], *args: str) -> list[str]:
    return [*args, "--pins", str(project / "pins.toml"), "--cache-dir", str(tmp_path / "cache"),
            "--mirror", f"{UPSTREAM_URL}={git_repo[0]}"]
