"""Bad input at the boundaries the other input tests leave: output folders that hold
files or inputs, environment variables that are not UTF-8 or hold control characters,
input files that are pipes. Each refused before any work: exit 2, one message naming
the input, no traceback, nothing written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ds4x.build.wheel import CONSTRAINTS_HEADER
from ds4x.checkout import HOME
from ds4x.cli import main
from ds4x.deploy import plan
from tests.unit.test_input_checks import refused

NOT_UTF8 = "/tmp/x\udcff"  # how Python hands over the byte 0xff of an environment variable
AUTHOR = "A <a@example.org>"


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("DS4X_CACHE_DIR", str(cache))
    monkeypatch.delenv("DS4X_MIRRORS", raising=False)
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    return cache


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_export_output_that_holds_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "0001-mine.patch").write_text("mine\n")
    before = listing(tmp_path)
    message = refused(capsys, "export", "-t", "vllm", "--author", AUTHOR, "--output", str(out))
    assert f"--output {out}: holds 1 file(s) (0001-mine.patch, ...)" in message and "add --force" in message
    assert listing(tmp_path) == before


@pytest.mark.parametrize("inside", ["patches/vllm", "vllm_ds4x", "patches"])
def test_export_output_inside_its_inputs(capsys: pytest.CaptureFixture[str], inside: str) -> None:
    folder = HOME.root / inside
    before = listing(folder)
    message = refused(capsys, "export", "-t", "vllm", "--author", AUTHOR, "--output", str(folder), "--force")
    assert f"--output {folder}: inside the " in message and "which this command reads" in message
    assert listing(folder) == before


@pytest.mark.parametrize("held", ["other-1.0-py3-none-any.whl", "constraints.txt"])
def test_wheel_dist_of_someone_elses_files(capsys: pytest.CaptureFixture[str], tmp_path: Path, held: str) -> None:
    """Wheels a build could remove as superseded, a constraints.txt it would rewrite: not ours, so refused."""
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / held).write_text("mine\n")
    (dist / "notes.txt").write_text("mine\n")
    before = listing(tmp_path)
    message = refused(capsys, "wheel", "-t", "vllm", "--offline", "--dist", str(dist))
    assert f"--dist {dist}: holds 1 file(s) ({held}, ...)" in message and "add --force" in message
    assert listing(tmp_path) == before


@pytest.mark.parametrize("held", [{"constraints.txt": CONSTRAINTS_HEADER, "x-1.0-py3-none-any.whl": ""},
                                  {"patches/vllm/0001-a.patch": "", "notes.txt": ""}])
def test_wheel_dist_of_our_earlier_build_is_no_refusal(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                       held: dict[str, str]) -> None:
    """A dist/ our constraints.txt heads is ours to rebuild into, and files a build neither writes nor
    removes (export's patches/, notes) stay beside it: the command goes on to its work (here: the
    offline cache lacks the source), with no word on --dist."""
    dist = tmp_path / "dist"
    for name, text in held.items():
        (dist / name).parent.mkdir(parents=True, exist_ok=True)
        (dist / name).write_text(text)
    assert main(["wheel", "-t", "vllm", "--offline", "--dist", str(dist)]) != 0
    err = capsys.readouterr().err
    assert "target vllm lacks its kernels and its source" in err and "--dist" not in err


def test_wheel_dist_holding_the_kernels_wheel(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import zipfile

    kernels = tmp_path / "lvllm-1.0-cp312-cp312-linux_x86_64.whl"
    with zipfile.ZipFile(kernels, "w") as zf:
        zf.writestr("lvllm-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    before = listing(tmp_path)
    message = refused(capsys, "wheel", "-t", "lvllmds4-x", "--offline", "--force", "--kernels", f"wheel:{kernels}",
                      "--dist", str(tmp_path))
    assert f"--dist {tmp_path}: holds the --kernels wheel {kernels}" in message
    assert listing(tmp_path) == before


@pytest.mark.parametrize(("name", "value", "message"), [
    ("DS4X_CACHE_DIR", NOT_UTF8, "$DS4X_CACHE_DIR '/tmp/x\\\\xff': not valid UTF-8"),
    ("DS4X_CACHE_DIR", "/tmp/a\nb", "$DS4X_CACHE_DIR '/tmp/a\\nb': holds the control character '\\n'"),
    ("XDG_CACHE_HOME", NOT_UTF8, "$XDG_CACHE_HOME '/tmp/x\\\\xff': not valid UTF-8"),
    ("DS4X_MIRRORS", f"https://a={NOT_UTF8}", "$DS4X_MIRRORS 'https://a=/tmp/x\\\\xff': not valid UTF-8"),
    ("DS4X_MIRRORS", "https://a=/tmp/\x1b[2J", "$DS4X_MIRRORS 'https://a=/tmp/\\x1b[2J': holds the control"),
])
def test_environment_that_no_path_or_message_can_hold(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, name: str, value: str,
                                                      message: str) -> None:
    if name == "XDG_CACHE_HOME":
        monkeypatch.delenv("DS4X_CACHE_DIR")
    monkeypatch.setenv(name, value)
    before = listing(tmp_path)
    assert message in refused(capsys, "fetch", "--offline")
    assert listing(tmp_path) == before


@pytest.mark.parametrize(("value", "message"), [
    (f"http://127.0.0.1:9{NOT_UTF8}", "$PIP_INDEX_URL 'http://127.0.0.1:9/tmp/x\\\\xff': not valid UTF-8"),
    ("http://127.0.0.1:9/a b", "$PIP_INDEX_URL 'http://127.0.0.1:9/a b': a URL holds no spaces"),
])
def test_pip_index_url_passed_through(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                      value: str, message: str) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", value)
    assert message in refused(capsys, "check", "--newest", "-t", "vllm")


@pytest.mark.parametrize("option", ["--config", "--routing-stats", "--check-launch", "--profile"])
def test_an_input_file_that_is_a_pipe(capsys: pytest.CaptureFixture[str], tmp_path: Path, option: str) -> None:
    """A pipe would block the read until a writer came: refused by its kind, in no time."""
    pipe = tmp_path / "p.json"
    os.mkfifo(pipe)
    extra = ["--check-launch", str(pipe)] if option == "--profile" else []
    message = refused(capsys, "plan", option, str(pipe), *extra)
    assert str(pipe) in message and "not a regular file (a pipe or a device)" in message


def test_plot_written_aside(tmp_path: Path) -> None:
    """A save that fails halfway leaves the old plot whole and no part file; one that ends
    well replaces it."""
    path = tmp_path / "c.png"
    path.write_bytes(b"old plot")

    class Figure:
        def __init__(self, fail: bool) -> None:
            self.fail = fail

        def savefig(self, where: Path, dpi: int, format: str) -> None:
            Path(where).write_bytes(b"half")
            if self.fail:
                raise OSError("disk full")
            Path(where).write_bytes(b"new plot")

    with pytest.raises(OSError, match="disk full"):
        plan.save_png(Figure(fail=True), path)
    assert listing(tmp_path) == {"c.png": b"old plot"}
    plan.save_png(Figure(fail=False), path)
    assert listing(tmp_path) == {"c.png": b"new plot"}


def test_doctor_preload_of_a_missing_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A path is checked before doctor runs; a bare name is the loader's to look up (and doctor's to report)."""
    message = refused(capsys, "doctor", "--no-torch", "--preload", str(tmp_path / "libx.so"))
    assert f"argument --preload: '{tmp_path / 'libx.so'}': no such file" in message
    assert "argument --preload: '\\x1b': expected a library name" in refused(capsys, "doctor", "--preload", "\x1b")


@pytest.mark.parametrize("model", ["", "/m\nrm -rf /", "/m\x1b[2J"])
def test_a_model_that_no_script_can_hold(capsys: pytest.CaptureFixture[str], tmp_path: Path, model: str) -> None:
    message = refused(capsys, "plan", "--launch", str(tmp_path / "s.sh"), "--model", model)
    assert "argument --model: " in message and "without control characters" in message
    assert listing(tmp_path) == {}


@pytest.mark.parametrize(("name", "message"), [
    (b"Ann\x01X", "git's author (user.name, user.email or GIT_AUTHOR_*) 'Ann\\x01X <ann@example.org>' holds a control"),
    (b"Ann\xffX", "git's author (user.name, user.email or GIT_AUTHOR_*) 'Ann\\xffX <ann@example.org>' is not valid UTF-8"),
])
def test_a_git_identity_that_no_header_can_hold(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch, name: bytes, message: str) -> None:
    """export signs with the caller's git identity when --author is not given: checked as --author is."""
    config = tmp_path / "gitconfig"
    config.write_bytes(b"[user]\n\tname = " + name + b"\n\temail = ann@example.org\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    assert message in refused(capsys, "export", "-t", "vllm", "--mbox", str(tmp_path / "m.mbox"))
    assert not (tmp_path / "m.mbox").exists()
