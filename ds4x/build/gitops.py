"""Project-agnostic git helpers over GitPython: one git thing per function."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from git import GitCommandError, InvalidGitRepositoryError, NoSuchPathError, RemoteProgress, Repo

from ds4x.errors import Ds4xError
from ds4x.log import logger, progress

# Hooks and wrappers export these; inherited, they would point every git
# command at the caller's repository instead of ours.
_LEAKY = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
)
# Fixed identity and dates: re-applied commits are identical on every machine.
IDENTITY = {
    "GIT_AUTHOR_NAME": "ds4x",
    "GIT_AUTHOR_EMAIL": "ds4x@localhost",
    "GIT_COMMITTER_NAME": "ds4x",
    "GIT_COMMITTER_EMAIL": "ds4x@localhost",
    "GIT_COMMITTER_DATE": "1970-01-01T00:00:00+0000",
}
# Trees we build never need docs; the fork's docs/assets also hold blobs
# too big for some mirrors. Non-cone patterns: everything but /docs/.
SPARSE_PATTERNS = ("/*", "!/docs/")


# The caller's environment before isolate_environ: `export` signs with the
# caller's own git identity (config or GIT_AUTHOR_*), which isolation hides.
CALLER_ENVIRON: dict[str, str] = {}


def isolate_environ() -> None:
    """Make every git call ignore the caller's repo and user/system config."""
    CALLER_ENVIRON.clear()
    CALLER_ENVIRON.update(os.environ)
    for key in list(os.environ):
        if key in _LEAKY or key.startswith("GIT_CONFIG"):
            del os.environ[key]
    os.environ.update(
        GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0"
    )


@contextlib.contextmanager
def open_repo(path: Path) -> Iterator[Repo]:
    with Repo(path) as repo:
        repo.git.update_environment(**IDENTITY)
        yield repo


def run(repo: Repo, *args: str) -> str:
    """One git command; on failure a Ds4xError with the command and stderr tail."""
    logger.debug("  $ git %s", " ".join(args))
    try:
        return str(repo.git.execute(["git", *args]))
    except GitCommandError as e:
        tail = "\n".join(str(e.stderr).strip().splitlines()[-8:])
        raise Ds4xError(f"git {' '.join(args[:3])} failed in {repo.working_dir}:\n{tail}") from e


def resolve_commit(path: Path, rev: str) -> str | None:
    """The full id of the commit `rev` names in the repository at `path` (a
    mirror may be a bare git dir), or None."""
    try:
        with open_repo(path) as repo:
            return run(repo, "--git-dir", str(repo.git_dir), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except (Ds4xError, InvalidGitRepositoryError, NoSuchPathError):
        return None


def head(repo: Repo) -> str:
    return repo.head.commit.hexsha


def verify_head(repo: Repo, commit: str, what: str) -> None:
    actual = head(repo)
    if actual != commit:
        raise Ds4xError(f"{what}: HEAD is {actual}, pinned {commit}", "delete the cache entry and fetch again")


def sparse_checkout(repo: Repo, commit: str) -> None:
    # As a partial clone, git lets objects outside the sparse set be missing
    # when it writes trees (commit, am): mirrors may lack big docs blobs.
    for key, value in (("core.repositoryformatversion", "1"), ("extensions.partialClone", "origin"),
                       ("remote.origin.promisor", "true")):
        run(repo, "config", key, value)
    run(repo, "sparse-checkout", "set", "--no-cone", *SPARSE_PATTERNS)
    run(repo, "checkout", "--quiet", "--detach", commit)


def clone_local(source: Path, dest: Path, commit: str, shared: bool) -> None:
    """Copy (hard-link) or share a local repo's objects and check out `commit`.
    No pack is built, so big blobs outside the sparse set may be missing."""
    mode = "--shared" if shared else "--local"
    Repo.clone_from(str(source), str(dest), multi_options=[mode, "--no-checkout", "--quiet"])
    with open_repo(dest) as repo:
        sparse_checkout(repo, commit)
        verify_head(repo, commit, str(dest))


class _Bar(RemoteProgress):
    def __init__(self) -> None:
        super().__init__()
        self.bar = progress(None, "fetch", unit="obj")

    def update(
        self, op_code: int, cur_count: str | float, max_count: str | float | None = None, message: str = ""
    ) -> None:
        self.bar.total = float(max_count) if max_count else None
        self.bar.n = int(float(cur_count))
        self.bar.refresh()


def fetch_commit(url: str, dest: Path, commit: str) -> None:
    """Shallow, blob-filtered fetch of exactly `commit`; blobs come lazily
    for the sparse checkout only."""
    dest.mkdir(parents=True, exist_ok=True)  # an empty folder made by atomic_dir, or none
    with Repo.init(dest) as repo:
        repo.git.update_environment(**IDENTITY)
        repo.create_remote("origin", url)
        bar = _Bar()
        try:
            repo.remote("origin").fetch(commit, progress=bar, depth=1, filter="blob:none")
        except GitCommandError as e:
            tail = str(e.stderr).strip().splitlines()[-1:] or [""]
            raise Ds4xError(
                f"cannot fetch {commit[:12]} from {url}: {tail[0]}",
                "check the network, map the URL to a mirror (--mirror / DS4X_MIRRORS), or use --offline",
            ) from e
        finally:
            bar.bar.close()
        sparse_checkout(repo, commit)
        verify_head(repo, commit, str(dest))


def commit_all(path: Path, message: str, epoch: int) -> str:
    """Turn a plain directory (an unpacked sdist or wheel) into a one-commit repo."""
    date = f"@{epoch} +0000"
    with Repo.init(path) as repo:
        repo.git.update_environment(**{**IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
        run(repo, "add", "--all", "--force", ".")
        run(repo, "commit", "--quiet", "--no-verify", "-m", message)
        return head(repo)


def commit_epoch(repo: Repo, commit: str = "HEAD") -> int:
    return int(repo.commit(commit).committed_date)


def changed_paths(repo: Repo, base: str, tip: str = "HEAD") -> list[str]:
    out = run(repo, "diff", "--name-only", "--no-renames", base, tip)
    return [line for line in out.splitlines() if line]


def same_content(repo: Repo, a: str, b: str, paths: Sequence[str]) -> bool:
    """Tree comparison only: needs no blobs, so it works on filtered clones."""
    try:
        repo.git.execute(["git", "diff", "--quiet", a, b, "--", *paths])
    except GitCommandError as e:
        if e.status == 1:
            return False
        raise Ds4xError(f"cannot compare {a[:12]} and {b[:12]}: {e.stderr.strip()}") from e
    return True


# Electron's flags: byte-stable output, so re-export is a no-op.
STABLE_FORMAT = ("--zero-commit", "--full-index", "--no-signature", "--no-stat", "--keep-subject", "--no-numbered")


def format_patches(repo: Repo, base: str, stable: bool = True) -> list[str]:
    """Each commit in base..HEAD as one format-patch text, oldest first."""
    flags = STABLE_FORMAT if stable else ("--full-index", "--no-signature")
    shas = run(repo, "rev-list", "--reverse", f"{base}..HEAD").split()
    cmd = ["git", "format-patch", "--stdout", *flags, "-1"]
    return [str(repo.git.execute([*cmd, sha], strip_newline_in_stdout=False)) for sha in shas]


def apply_check(repo: Repo, patch: Path, reverse: bool = False) -> str | None:
    """None if the patch applies exactly (no fuzz: git never fuzzes); else stderr."""
    args = ["git", "apply", "--check", *(["--reverse"] if reverse else []), str(patch)]
    try:
        repo.git.execute(args)
    except GitCommandError as e:
        return str(e.stderr).strip()
    return None


def caller_identity() -> str | None:
    """"Name <email>" as the caller's git would author a commit (GIT_AUTHOR_*,
    then user.name/user.email), or None when it names none explicitly."""
    found = subprocess.run(["git", "-c", "user.useConfigOnly=true", "var", "GIT_AUTHOR_IDENT"],
                           env=CALLER_ENVIRON or None, capture_output=True, text=True,
                           encoding="utf-8", errors="surrogateescape")  # the caller checks the bytes (export.author_of)
    ident = found.stdout.strip().rsplit(" ", 2)[0]  # drop the timestamp and zone
    return ident if found.returncode == 0 and ident else None


def sign_and_amend(repo: Repo, author: str, paths: Sequence[str]) -> None:
    """Amend HEAD: add `paths` (ignored or not), set the author, add Signed-off-by."""
    if paths:
        run(repo, "add", "--force", "--", *paths)
    run(repo, "commit", "--quiet", "--amend", "--no-edit", "--no-verify", "--allow-empty",
        f"--author={author}", f"--trailer=Signed-off-by: {author}")


def am(repo: Repo, patch: Path) -> None:
    run(repo, "am", "--quiet", "--keep", "--committer-date-is-author-date", str(patch))
