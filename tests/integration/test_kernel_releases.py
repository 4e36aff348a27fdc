"""The fork's releases known to match (MATCHING) and those pins.toml lists have the pin's
kernel sources, and pins.toml gives each its tag's commit (needs a local mirror of
the fork holding its tags: DS4X_MIRRORS)."""

from __future__ import annotations

import subprocess

import pytest

from ds4x.build import pins, sources
from ds4x.checkout import HOME

FORK_URL = "https://github.com/guqiong96/Lvllmds4-x"
MATCHING = ("lvllmds4-x-v2.3.9", "lvllmds4-x-v2.3.11")  # checked below whether or not pins.toml lists them
pytestmark = [
    pytest.mark.mirror,
    pytest.mark.skipif(FORK_URL not in sources.parse_mirrors([]),
                       reason=f"DS4X_MIRRORS does not map {FORK_URL}; GitHub is unreachable here"),
]


def test_the_matching_releases_have_the_pins_kernel_sources() -> None:
    fork = pins.load(HOME.pins).get("lvllmds4-x")
    assert fork.git and fork.kernel_sources
    local = sources.local_mirror(sources.resolve_url(fork.git.url, sources.parse_mirrors([])), fork.git.url)
    if local is None:
        pytest.skip("the fork's mirror is a URL: its tags are not read here")
    tags = sorted({*MATCHING, *(r.tag for r in fork.kernels_releases)})
    git_dir = local / ".git" if (local / ".git").exists() else local

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True)

    for tag in tags:
        found = git("rev-parse", "--verify", f"{tag}^{{commit}}")
        assert found.returncode == 0, f"the mirror {local} has no tag {tag}: {found.stderr.strip()}"
        commit = found.stdout.strip()
        pinned = {r.tag: r.commit for r in fork.kernels_releases}
        assert pinned.get(tag, commit) == commit, f"pins.toml gives {tag} the commit {pinned.get(tag)}, the tag is {commit}"
        same = git("diff", "--quiet", commit, fork.git.commit, "--", *fork.kernel_sources)
        assert same.returncode == 0, f"{tag} ({commit[:12]}) has other {', '.join(fork.kernel_sources)} than the pin"
