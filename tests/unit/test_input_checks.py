"""Every class of bad input is refused before any work: exit 2, one message
under 300 characters naming the input, no traceback, nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from ds4x.build import series
from ds4x.build.sources import local_mirror
from ds4x.checkout import HOME
from ds4x.cli import main
from ds4x.deploy.plan import EXAMPLE
from ds4x.errors import InputError

GOOD_PINS = HOME.pins.read_text()
GOOD_LINES = GOOD_PINS.count("\n")
FORK = "https://github.com/guqiong96/Lvllmds4-x"


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one message (argparse's usage lines left out) of a command that must exit 2."""
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = int(e.code or 0)
    err = capsys.readouterr().err
    message = " ".join(line for line in err.splitlines() if "error:" in line or line.startswith("hint:"))
    assert code == 2 and "Traceback" not in err, err
    assert message and len(message) < 300, message
    return message


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("DS4X_CACHE_DIR", str(cache))
    monkeypatch.delenv("DS4X_MIRRORS", raising=False)
    return cache


def pins_file(tmp_path: Path, content: str | bytes) -> Path:
    """A pins file with the patches folder a checkout has beside it."""
    (tmp_path / "patches").mkdir(exist_ok=True)
    path = tmp_path / "pins.toml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("targets = 5\n", "expected one [targets] table with at least one [targets.<name>]"),
        ("# no targets\n", "expected one [targets] table"),
        ("[targets]\n", "expected one [targets] table"),
        ("[targets]\nvllm = 5\n", "targets.vllm: 5 is not a table"),
        (GOOD_PINS.replace('package = "flashinfer"', "package = 5"), "targets.flashinfer.package: 5 is not an import package"),
        (GOOD_PINS.replace('default = false', 'default = "no"'), "targets.vllm.default: 'no' is not true or false"),
        (GOOD_PINS.replace('overlays = ["vllm_ds4x"]', 'overlays = "vllm_ds4x"', 1), "targets.lvllmds4-x.overlays: 'vllm_ds4x' is not a list"),
        (GOOD_PINS.replace('filename = "vllm-0.34.0.tar.gz"', 'filename = "../x.tar.gz"'), "targets.vllm.sdist.filename: '../x.tar.gz' is not a file name"),
        (GOOD_PINS.replace(f'url = "{FORK}"', f'url = "{FORK}\\nx"'), "targets.lvllmds4-x.git.url: 'https://github.com/guqiong96/Lvllmds4-x\\nx' is not a URL"),
        (GOOD_PINS.encode() + b"# \xff\n", f"pins.toml:{GOOD_LINES + 1}: byte 0xff is not UTF-8"),
        (GOOD_PINS.encode() + b"# \0\n", f"pins.toml:{GOOD_LINES + 1}: a NUL byte"),
    ],
)
def test_bad_pins_name_the_key(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str | bytes,
                               message: str) -> None:
    pins = pins_file(tmp_path, content)
    for command in (["check"], ["fetch", "--offline"]):
        assert message in refused(capsys, *command, "--pins", str(pins))
    assert pins.read_bytes() == (content if isinstance(content, bytes) else content.encode())


def test_pins_a_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert f"argument --pins: '{tmp_path}': is a folder; give a file" in refused(capsys, "check", "--pins", str(tmp_path))


def test_the_pins_of_the_checkout_pass() -> None:
    from ds4x.build import pins

    assert set(pins.load(HOME.pins).targets) == {"lvllmds4-x", "vllm", "vllm-cpu-engine", "flashinfer"}


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"a\0b.patch\n", "series:1: a NUL byte"), (b"# ok\n\xff.patch\n", "series:2: byte 0xff is not UTF-8")],
)
def test_bad_series_bytes(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "series").write_bytes(content)
    with pytest.raises(InputError, match="series:") as e:
        series.parse_series(tmp_path / "series")
    assert message in str(e.value) and "UTF-8" in str(e.value.hint)


def test_series_a_folder(tmp_path: Path) -> None:
    (tmp_path / "series").mkdir()
    with pytest.raises(InputError, match="series: a folder, not a file"):
        series.parse_series(tmp_path / "series")


def test_patch_message_not_utf8(tmp_path: Path) -> None:
    patch = tmp_path / "a.patch"
    patch.write_bytes(b"From 1\nSubject: [PATCH] x \xff\n\nOrigin: vendor\n---\ndiff --git a/x b/x\n")
    with pytest.raises(InputError, match=r"a\.patch:2: byte 0xff is not UTF-8"):
        series.read_info(series.PatchEntry(name="a.patch", path=patch, line=1))


def test_export_outputs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    existing = tmp_path / "existing"
    existing.write_text("keep")
    export = ("export", "--target", "vllm")
    assert "argument --output: " in refused(capsys, *export, "--output", str(existing))
    assert "folder /nonexistent does not exist" in refused(capsys, *export, "--mbox", "/nonexistent/x.mbox")
    assert f"argument --mbox: '{tmp_path}': is a folder" in refused(capsys, *export, "--mbox", str(tmp_path))
    assert f"--mbox {existing}: exists; give a new file, or add --force" in refused(capsys, *export, "--mbox", str(existing))
    both = refused(capsys, *export, "--output", str(tmp_path / "d"), "--mbox", str(tmp_path / "m"))
    assert "argument --mbox: not allowed with argument --output" in both
    assert existing.read_text() == "keep" and not (tmp_path / "d").exists() and not (tmp_path / "m").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("command", [("apply", "--target", "vllm"), ("roll", "--target", "vllm", "--to", "0.33.0")])
def test_a_tree_where_no_folder_can_be_made(capsys: pytest.CaptureFixture[str], command: tuple[str, ...]) -> None:
    assert "argument --dir: '/proc/ds4x': /proc is not writable" in refused(capsys, *command, "--dir", "/proc/ds4x")


@pytest.mark.parametrize("to", ["", " ", "0.33.0\n", "a b"])
def test_roll_to_names_a_version(capsys: pytest.CaptureFixture[str], to: str) -> None:
    assert "argument --to: " in refused(capsys, "roll", "--target", "vllm", "--to", to)
    assert not (HOME.trees / f"vllm-{to}").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "nan"], "--budget nan: give seconds in (0, 86400]"),
        (["--budget", "inf"], "--budget inf: give seconds in (0, 86400]"),
        (["-k", "1000000"], "--num-speculative-tokens/-k: '1000000': expected a whole number in 1..16"),
        (["--gpu-ms", "nan"], "--gpu-ms nan: one figure in 0..60000 ms"),
        (["--threads", "1000000000"], "--threads: '1000000000': expected a whole number in 1..4096"),
        (["--threads", "4096"], "--threads 4096: up to 64 values in 1.."),
        (["--python", "/nonexistent/python"], "--python /nonexistent/python: not found"),
    ],
)
def test_measure_numbers_and_programs(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    assert message in refused(capsys, "plan", "--measure", *args)


def test_measure_outputs_and_python(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert f"--profile-out {tmp_path}: a folder; give a file name" in refused(capsys, "plan", "--measure", "--profile-out", str(tmp_path))
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\n")
    assert f"--python {script}: is not executable" in refused(capsys, "plan", "--measure", "--python", str(script))


def config(tmp_path: Path, **changes: object) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(EXAMPLE.read_text()), **changes}))
    return str(path)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"vocab_size": -1}, "vocab_size=-1: expected an integer in 1..16777216"),
        ({"vocab_size": 1e308}, "vocab_size=1e+308: expected an integer"),
        ({"first_k_dense_replace": -3}, "first_k_dense_replace=-3: expected an integer in 0..42"),
        ({"first_k_dense_replace": 43}, "first_k_dense_replace=43: expected an integer in 0..42"),
        ({"o_groups": "9" * 500}, "o_groups='999"),
        ({"sliding_window": -1}, "sliding_window=-1"),
        ({"compress_ratios": "4444"}, "compress_ratios='4444': expected a list of integers >= 0"),
    ],
)
def test_config_values_below_their_minimum(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                           changes: dict[str, object], message: str) -> None:
    for json_out in ([], ["--json"]):
        assert message in refused(capsys, "plan", "--config", config(tmp_path, **changes), *json_out)


@pytest.mark.parametrize(("text", "message"), [
    ('{"vocab_size": NaN}', "vocab_size: nan is not a finite number"),
    ('{"vocab_size": 1e400}', "vocab_size: inf is not a finite number"),
    ('{"vocab_size": Infinity}', "vocab_size: inf is not a finite number"),
    ('{"a": {"b": [1, -1e999]}}', "a.b[1]: -inf is not a finite number"),
    ('{"a": ' + "[" * 100000 + "]" * 100000 + "}", "nested deeper than 32"),
    ('{"a": ' + "[" * 40 + "]" * 40 + "}", "nested deeper than 32"),
])
def test_config_json_bounded_and_finite(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str,
                                        message: str) -> None:
    (tmp_path / "c.json").write_text(text)
    for command in (["plan"], ["plan", "--measure"]):
        assert f"--config {tmp_path / 'c.json'}: {message}" in refused(capsys, *command, "--config", str(tmp_path / "c.json"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_endless_config_is_cut_off(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A device that never ends is refused by its kind before it is opened; a file too large, by its size."""
    large = tmp_path / "large.json"
    with large.open("wb") as f:
        f.truncate(17 * 2**20)
    for command in (["plan"], ["plan", "--measure"]):
        assert "--config /dev/zero: not a regular file" in refused(capsys, *command, "--config", "/dev/zero")
        assert f"--config {large}: larger than 16 MiB" in refused(capsys, *command, "--config", str(large))


@pytest.mark.parametrize("count", ["NaN", "1e400", "1" + "0" * 400, "-1"])
def test_routing_counts_are_finite(capsys: pytest.CaptureFixture[str], tmp_path: Path, count: str) -> None:
    stats = tmp_path / "routing.json"
    stats.write_text('{"0": [%s]}' % ", ".join([count] * 256))
    assert f"--routing-stats {stats}: " in refused(capsys, "plan", "--routing-stats", str(stats))


def test_kernels_wheel_by_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    named = tmp_path / "vllm-0.1.0-cp38-abi3-linux_x86_64.whl"
    named.write_bytes(b"")
    no_wheel_file = tmp_path / "vllm-0.2.0-cp38-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(no_wheel_file, "w") as zf:
        zf.writestr("vllm/__init__.py", "")
    notes = tmp_path / "notes.txt"
    notes.write_text("not a wheel")
    for path, message in ((notes, "not a wheel's file name"),
                          (named, "not a wheel (File is not a zip file)"),
                          (no_wheel_file, "not a wheel (no .dist-info/WHEEL in it)"),
                          (tmp_path / "missing-1.0-py3-none-any.whl", "no such file")):
        found = refused(capsys, "wheel", "--target", "lvllmds4-x", "--kernels", f"wheel:{path}")
        assert f"argument --kernels: {path}: {message}" in found


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("https://example.invalid/w/vllm-0.1.0-cp38-abi3-linux_x86_64.whl#md5=00",
         "after the URL, expected #sha256= and the wheel's 64 hex digits, or nothing"),
        ("https://example.invalid/w/vllm-0.1.0-cp38-abi3-linux_x86_64.whl#sha256=abc",
         "after the URL, expected #sha256="),
        ("https://example.invalid/download?id=3", "the URL does not end in a wheel's file name"),
        ("https://example.invalid/w/x%2F..%2Fnotes.txt", "the URL does not end in a wheel's file name"),
    ],
)
def test_kernels_wheel_by_url(capsys: pytest.CaptureFixture[str], url: str, message: str) -> None:
    found = refused(capsys, "wheel", "--target", "lvllmds4-x", "--kernels", f"wheel:{url}")
    assert f"argument --kernels: 'wheel:{url}': {message}" in found


def test_kernels_wheel_by_url_pinned_or_not() -> None:
    from ds4x import inputs

    url = "https://example.invalid/w/vllm-0.1.0%2Bcu130-cp38-abi3-linux_x86_64.whl"
    for spec in (f"wheel:{url}", f"wheel:{url}#sha256={'aB' * 32}"):
        assert inputs.kernels(spec) == spec


def test_mirror_a_plain_file(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "plain"
    plain.write_text("")
    monkeypatch.setenv("DS4X_MIRRORS", f"{FORK}={plain}")
    assert f"DS4X_MIRRORS: mirror {plain} is a file" in refused(capsys, "fetch", "--target", "lvllmds4-x")
    monkeypatch.delenv("DS4X_MIRRORS")
    assert f"--mirror: mirror {plain} is a file" in refused(capsys, "fetch", "--mirror", f"{FORK}={plain}")


def test_mirror_a_folder_that_is_not_a_repository(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch, _cache: Path) -> None:
    monkeypatch.setenv("DS4X_MIRRORS", f"{FORK}={tmp_path}")
    assert f"mirror {tmp_path} for {FORK} is not a git repository" in refused(capsys, "fetch", "--target", "lvllmds4-x")
    assert not (_cache / "git").exists() or not any((_cache / "git").iterdir())


def test_a_repository_is_a_mirror(tmp_path: Path) -> None:
    for bare in (False, True):
        repo = tmp_path / f"repo-{bare}"
        subprocess.run(["git", "init", "-q", *(["--bare"] if bare else []), str(repo)], check=True)
        assert local_mirror(str(repo)) == repo
    assert local_mirror(str(tmp_path / "missing")) is None and local_mirror("https://example.org/x") is None


def test_cache_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "plain"
    plain.write_text("")
    monkeypatch.setenv("DS4X_CACHE_DIR", str(plain))
    assert f"DS4X_CACHE_DIR '{plain}': exists and is not a folder" in refused(capsys, "fetch")
    monkeypatch.setenv("DS4X_CACHE_DIR", str(plain / "under"))
    assert f"{plain} is a file, not a folder" in refused(capsys, "fetch")
    assert "argument --cache-dir: " in refused(capsys, "fetch", "--cache-dir", str(plain))
    assert plain.read_text() == "" and os.path.isfile(plain)


@pytest.mark.parametrize(("argv", "message"), [
    (["plan", "--config", "\udcff.json"], "argument '\\xff.json' (of --config): not valid UTF-8"),
    (["plan", "--launch", "s\udce9.sh"], "argument 's\\xe9.sh' (of --launch): not valid UTF-8"),
    (["plan", "--model", "a\n\udcff", "--launch", "s.sh"], "argument 'a\\x0a\\xff' (of --model): not valid UTF-8"),
    (["export", "-t", "vllm", "--mbox", "m.txt", "--author", "A\x01 <a@example.org>"],
     "--author 'A\\x01 <a@example.org>' holds a control character"),
    (["export", "-t", "vllm", "--mbox", "m.txt", "--author", "A <a@example.org>\x1b[2J"],
     "--author 'A <a@example.org>\\x1b[2J' holds a control character"),
])
def test_text_that_no_header_or_message_can_hold(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert message in refused(capsys, *argv)
    assert list(tmp_path.iterdir()) == []
