"""`--kernels release:TAG` through a file:// or loopback mirror, the tags pins.toml
knows, and one error naming every missing input (offline: loopback and files only)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ds4x.build import pins, releases, sources
from ds4x.build.problems import MissingInput, MissingInputs
from ds4x.checkout import HOME
from ds4x.cli import main
from ds4x.errors import Ds4xError, InputError
from tests.conftest import UPSTREAM_URL, cli_args
from tests.unit.test_wheel import kernels_wheel
from tests.unit.test_workspace import make_patch

Repo = tuple[Path, str]
TAG = "demo-v1.1"
OTHER_TAG = "demo-v1.0"


def release_wheel(tmp_path: Path, commit: str) -> Path:
    """A 'compiled' release wheel of the fixture upstream, built at `commit` (+g<sha> in its version)."""
    built = kernels_wheel(tmp_path)
    return built.rename(built.with_name(f"demo-1.1+g{commit[:9]}-cp311-cp311-linux_x86_64.whl"))


def with_releases(project: Path, *entries: str) -> None:
    """The fixture's pins, with the kernel sources checked and these kernels-releases entries."""
    path = project / "pins.toml"
    listed = "kernels-releases = [\n" + "".join(f"  {e},\n" for e in entries) + "]\n"
    path.write_text(path.read_text().replace('overlays = ["demo_ds4x"]\n',
                                             f'overlays = ["demo_ds4x"]\nkernel-sources = ["demo"]\n{listed}'))


RELEASE_COMMIT = "c" * 40  # a release's commit where no test builds from it


def entry(tag: str, filename: str | None = None, sha256: str | None = None, commit: str = RELEASE_COMMIT) -> str:
    named = f', filename = "{filename}"' if filename else ""
    pinned = f', sha256 = "{sha256}"' if sha256 else ""
    return f'{{ tag = "{tag}", commit = "{commit}"{named}{pinned} }}'


def error_lines(err: str) -> list[str]:
    """stderr from the error on (the step lines before it left out)."""
    lines = err.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("error: ")):]


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def publish(folder: Path, wheel: Path, tag: str = TAG) -> Path:
    """The wheel as a releases mirror holds it: <folder>/download/<tag>/<file>."""
    dest = folder / "download" / tag / wheel.name
    dest.parent.mkdir(parents=True)
    dest.write_bytes(wheel.read_bytes())
    return dest


class Served:
    """A folder served on loopback; every request path is logged."""

    def __init__(self, root: Path) -> None:
        self.requests: list[str] = []
        served = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self) -> None:
                served.requests.append(self.path)
                super().do_GET()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.server.server_port}"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    root = tmp_path / "www"
    root.mkdir()
    site = Served(root)
    thread = threading.Thread(target=site.server.serve_forever, daemon=True)
    thread.start()
    yield site
    site.server.shutdown()
    site.server.server_close()


def test_release_through_a_file_mirror_builds(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path,
                                              git_repo: Repo) -> None:
    """The fork's source from a local git mirror, its release from a file:// mirror of <repo>/releases."""
    make_patch(capsys, project, tmp_path, git_repo)
    wheel = release_wheel(tmp_path, git_repo[1])
    mirror = tmp_path / "releases-mirror"
    publish(mirror, wheel)
    with_releases(project, entry(OTHER_TAG, "demo-1.0-py3-none-any.whl"),
                  entry(TAG, wheel.name, sha256_of(wheel), commit=git_repo[1]))
    dist = tmp_path / "dist"
    args = [*cli_args(project, tmp_path, git_repo, "wheel", "--kernels", f"release:{TAG}", "--dist", str(dist)),
            "--mirror", f"{UPSTREAM_URL}/releases={mirror.as_uri()}"]
    assert main(args) == 0, capsys.readouterr().err
    (built,) = dist.glob("*.whl")
    assert built.name.startswith(f"demo-1.1+g{git_repo[1][:9]}.ds4x.")
    with zipfile.ZipFile(built) as zf:
        info = next(n for n in zf.namelist() if n.endswith(".dist-info/ds4x_provenance.json"))
        assert json.loads(zf.read(info))["kernels"] == {"wheel": wheel.name, "sha256": sha256_of(wheel)}
        assert zf.read("demo/_C.so") == b"ELF kernels"


def test_a_release_wheel_without_a_commit_is_checked_at_the_releases_commit(
        capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path, git_repo: Repo) -> None:
    """The fork's v2.3.9 wheel is named lvllmds4_x-2.3.9-...whl, no +g<sha>: the release's commit in
    pins.toml is what the kernel-source check reads; a +g<sha> of another commit is refused."""
    make_patch(capsys, project, tmp_path, git_repo)
    plain = kernels_wheel(tmp_path)  # demo-1.1-cp311-cp311-linux_x86_64.whl
    mirror = tmp_path / "releases-mirror"
    publish(mirror, plain)
    with_releases(project, entry(TAG, plain.name, commit=git_repo[1]))
    args = [*cli_args(project, tmp_path, git_repo, "wheel", "--kernels", f"release:{TAG}", "--dist",
                      str(tmp_path / "dist")), "--mirror", f"{UPSTREAM_URL}/releases={mirror.as_uri()}"]
    assert main(args) == 0, capsys.readouterr().err
    other = release_wheel(tmp_path, "d" * 40)
    publish(tmp_path / "mirror2", other)
    project.joinpath("pins.toml").write_text(
        project.joinpath("pins.toml").read_text().replace(f'filename = "{plain.name}"', f'filename = "{other.name}"'))
    args[-1] = f"{UPSTREAM_URL}/releases={(tmp_path / 'mirror2').as_uri()}"
    assert main(args) == 1
    assert (f"error: {other.name} was built from {'d' * 9}, not from release {TAG} ({git_repo[1][:12]})"
            in capsys.readouterr().err)


def test_release_through_a_loopback_mirror_is_sha256_checked(served: Served, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A URL mirror of the repository serves <mirror>/releases/download/<tag>/<file>."""
    monkeypatch.setattr(sources, "RETRY_DELAYS", (0.0, 0.0, 0.0))
    wheel = release_wheel(tmp_path, "a" * 40)
    publish(tmp_path / "www" / "gh" / "demo" / "upstream" / "releases", wheel)
    good, bad = sha256_of(wheel), "0" * 64
    target = pins.Target(name="demo", package="demo", git=pins.GitPin(url=f"{UPSTREAM_URL}.git", commit="a" * 40),
                         kernels_releases=(pins.KernelsRelease(tag=TAG, commit=RELEASE_COMMIT, filename=wheel.name, sha256=bad),))
    settings = sources.Settings(cache=tmp_path / "cache", mirrors={"https://example.invalid": f"{served.url}/gh"})
    url = f"{served.url}/gh/demo/upstream/releases/download/{TAG}/{wheel.name}"
    assert releases.located(target, target.kernels_releases[0], settings) == url
    with pytest.raises(Ds4xError) as caught:
        releases.fetch(target, releases.find(target, f"release:{TAG}"), settings)
    assert str(caught.value) == f"{url}: the download has sha256 {good}; pins.toml (kernels-releases, {TAG}) wants {bad}"
    assert caught.value.hint == f"fix the sha256 of {TAG} in pins.toml if it is wrong, else the URL"
    assert not list((tmp_path / "cache").rglob("*.whl"))  # a refused file never lands in the cache
    right = pins.KernelsRelease(tag=TAG, commit=RELEASE_COMMIT, filename=wheel.name, sha256=good)
    path = releases.fetch(target, right, settings)
    assert path.name == wheel.name and path.read_bytes() == wheel.read_bytes()
    assert path == sources.url_cache_path(url, settings)
    assert releases.fetch(target, right, sources.Settings(cache=settings.cache, mirrors=settings.mirrors,
                                                          offline=True)) == path
    assert served.requests == [f"/gh/demo/upstream/releases/download/{TAG}/{wheel.name}"] * 2  # refused, then kept


def test_a_local_git_mirror_holds_no_release(tmp_path: Path, git_repo: Repo) -> None:
    release = pins.KernelsRelease(tag=TAG, commit=RELEASE_COMMIT, filename="demo-1.1-py3-none-any.whl")
    target = pins.Target(name="demo", package="demo", git=pins.GitPin(url=UPSTREAM_URL, commit=git_repo[1]),
                         kernels_releases=(release,))
    settings = sources.Settings(cache=tmp_path / "cache", mirrors={UPSTREAM_URL: str(git_repo[0])})
    with pytest.raises(MissingInputs) as caught:
        releases.fetch(target, release, settings)
    (missing,) = caught.value.missing
    assert (missing.lack, missing.upstream) == ("mirror-has-no-file", f"{UPSTREAM_URL}/releases")
    assert missing.where == f"{git_repo[0]}/releases/download/{TAG}/{release.filename}"


def test_an_unknown_tag_names_the_known_ones(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path,
                                             git_repo: Repo) -> None:
    with_releases(project, entry(OTHER_TAG), entry(TAG, "demo-1.1-py3-none-any.whl"))
    args = cli_args(project, tmp_path, git_repo, "wheel", "--kernels", "release:demo-v9", "--dist", str(tmp_path / "d"))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert (f"error: --kernels release:demo-v9: target demo has no release demo-v9 in pins.toml; "
            f"known tags: {OTHER_TAG}, {TAG}\n") in err
    assert "hint: use a known tag, or add the release to kernels-releases in [targets.demo]" in err
    assert not (tmp_path / "cache").exists()  # refused before any fetch


def test_the_shipped_pins_refuse_an_unknown_tag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    known = ", ".join(r.tag for r in pins.load(HOME.pins).get("lvllmds4-x").kernels_releases)
    assert known == "lvllmds4-x-v2.3.9, lvllmds4-x-v2.3.11"
    code = main(["wheel", "--target", "lvllmds4-x", "--kernels", "release:lvllmds4-x-v0.0.0",
                 "--cache-dir", str(tmp_path / "cache"), "--dist", str(tmp_path / "dist")])
    assert code == 2
    assert f"has no release lvllmds4-x-v0.0.0 in pins.toml; known tags: {known}\n" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()


def test_one_error_names_every_missing_input(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path,
                                            git_repo: Repo) -> None:
    """An empty cache, no mirror, no --kernels: the kernels and the source, each with how to get it."""
    with_releases(project, entry(TAG, "demo-1.1-py3-none-any.whl"))
    code = main(["wheel", "--pins", str(project / "pins.toml"), "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert code == 2
    assert error_lines(err) == [
        "error: target demo lacks its kernels and its source:",
        "  - kernels: none given (--kernels), and pins.toml pins none",
        f"  - source {UPSTREAM_URL} @ {git_repo[1][:12]}: not in the cache, and no mirror is set for {UPSTREAM_URL}",
        f"hint: kernels: --kernels release:TAG (pins.toml knows: {TAG}), --kernels wheel:PATH_OR_URL (a release "
        "wheel whose commit has the pin's demo), or --kernels source (CUDA toolchain and the fork's build "
        "requirements; TORCH_CUDA_ARCH_LIST, default 12.0)",
        f"      source: the next run fetches it from {UPSTREAM_URL} if that is reachable; where it is blocked, "
        f"--mirror {UPSTREAM_URL}=PATH_OR_URL (or DS4X_MIRRORS)",
    ]
    assert not (tmp_path / "cache").exists()  # refused before any fetch


def test_offline_names_the_release_and_the_source(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path,
                                                  git_repo: Repo) -> None:
    with_releases(project, entry(TAG, "demo-1.1-py3-none-any.whl"))
    code = main(["wheel", "--pins", str(project / "pins.toml"), "--cache-dir", str(tmp_path / "cache"), "--offline",
                 "--kernels", f"release:{TAG}", "--mirror", f"{UPSTREAM_URL}=https://mirror.invalid/upstream"])
    lines = error_lines(capsys.readouterr().err)
    url = f"https://mirror.invalid/upstream/releases/download/{TAG}/demo-1.1-py3-none-any.whl"
    cached = sources.url_cache_path(url, sources.Settings(cache=tmp_path / "cache"))
    assert code == 2
    assert lines[:3] == [
        "error: target demo lacks its kernels and its source:",
        f"  - kernels release {TAG} ({url}): not in the cache ({cached.parent}), and --offline",
        f"  - source {UPSTREAM_URL} @ {git_repo[1][:12]}: not in the cache "
        f"({tmp_path / 'cache' / 'git' / ('demo-' + git_repo[1])}), and --offline",
    ]
    assert lines[3:] == ["hint: kernels: run once without --offline", "      source: run once without --offline"]


def test_a_reachable_source_is_not_named(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path,
                                         git_repo: Repo) -> None:
    """With a mirror for the source, only the kernels are missing."""
    assert main(cli_args(project, tmp_path, git_repo, "wheel")) == 2
    err = "\n".join(error_lines(capsys.readouterr().err))
    assert err.startswith("error: target demo lacks its kernels:\n  - kernels: none given (--kernels), and pins.toml"
                          " pins none\nhint: kernels: --kernels release:TAG (pins.toml knows: none yet), ")
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("release:", "expected release:TAG"),
        ("release:a/b", "a release tag is letters, digits"),
        ("release:v 1", "a release tag is letters, digits"),
        ("release:../x", "a release tag is letters, digits"),
        ("release:v1..2", "a release tag is letters, digits"),
        ("release:-v1", "a release tag is letters, digits"),
        ("release:v1?x=1", "a release tag is letters, digits"),
        ("release:v1%2F", "a release tag is letters, digits"),
        ("release:v1\x07", "a release tag is letters, digits"),
        ("release:" + "v" * 101, "a release tag is letters, digits"),
        ("releases:v1", "expected source, release:TAG or wheel:PATH_OR_URL"),
    ],
)
def test_release_values_are_checked(capsys: pytest.CaptureFixture[str], tmp_path: Path, spec: str, message: str) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["wheel", "--target", "lvllmds4-x", "--kernels", spec, "--dist", str(tmp_path / "dist")])
    err = capsys.readouterr().err
    assert caught.value.code == 2
    assert "argument --kernels: " in err and message in err
    assert not (tmp_path / "dist").exists()


@pytest.mark.parametrize("tag", ["lvllmds4-x-v2.3.11", "v0.23.1rc1.dev1018-g8aba6ae7e-cu130-sm89", "1.0+cu130"])
def test_plain_tags_pass(tag: str) -> None:
    from ds4x import inputs

    assert inputs.kernels(f"release:{tag}") == f"release:{tag}"


C = f'commit = "{RELEASE_COMMIT}"'


@pytest.mark.parametrize(
    ("listed", "message"),
    [
        ('[{ filename = "a-1.0-py3-none-any.whl" }]', "is not a release"),
        ('[{ tag = "v1", filename = "a-1.0-py3-none-any.whl" }]', "is not a release"),  # no commit
        ('[{ tag = "v1", commit = "abc123" }]', "is not a full 40-hex commit"),
        (f'[{{ tag = "v1", {C}, sha256 = "{"b" * 64}" }}]', "a sha256 without the file name it is of"),
        (f'[{{ tag = "v1", {C}, filename = "a-1.0-py3-none-any.whl", url = "x" }}]', "is not a release"),
        (f'[{{ tag = "v1", {C}, filename = "notes.txt" }}]', "is not a wheel's file name"),
        (f'[{{ tag = "v1", {C}, filename = "dir/a-1.0-py3-none-any.whl" }}]', "is not a file name (no folder)"),
        (f'[{{ tag = "a/b", {C}, filename = "a-1.0-py3-none-any.whl" }}]', "is not a release tag"),
        (f'[{{ tag = "v1", {C}, filename = "a-1.0-py3-none-any.whl", sha256 = "abc" }}]', "is not a sha256 digest"),
        (f'[{{ tag = "v1", {C} }}, {{ tag = "v1", {C}, filename = "a-1.1-py3-none-any.whl" }}]',
         "tag v1 is listed twice"),
        ('{ tag = "v1" }', "is not a list"),
    ],
)
def test_pinned_releases_are_checked(tmp_path: Path, listed: str, message: str) -> None:
    path = tmp_path / "pins.toml"
    path.write_text(f'[targets.demo]\npackage = "demo"\nkernels-releases = {listed}\n'
                    f'git = {{ url = "{UPSTREAM_URL}", commit = "{"a" * 40}" }}\n')
    with pytest.raises(InputError, match="kernels-releases") as caught:
        pins.load(path)
    assert message in str(caught.value)


def test_releases_need_a_git_pin(tmp_path: Path) -> None:
    path = tmp_path / "pins.toml"
    path.write_text('[targets.demo]\npackage = "demo"\n'
                    'kernels-releases = [{ tag = "v1", filename = "a-1.0-py3-none-any.whl" }]\n'
                    f'wheel = {{ project = "a", version = "1.0", filename = "a-1.0-py3-none-any.whl", sha256 = "{"b" * 64}" }}\n')
    with pytest.raises(InputError, match="kernels-releases: the releases are of the git repository"):
        pins.load(path)


# A release pins.toml lists by its tag alone: its wheel is chosen from the release's files.
GH_REPO = "https://github.com/demo/upstream"
GH_API = "https://api.github.com/repos/demo/upstream"


def listed_target(url: str = GH_REPO, commit: str = "a" * 40) -> pins.Target:
    return pins.Target(name="demo", package="demo", git=pins.GitPin(url=f"{url}.git", commit=commit),
                       kernels_releases=(pins.KernelsRelease(tag=TAG, commit=RELEASE_COMMIT),))


def write_api(root: Path, assets: dict[str, str | None], tag: str = TAG) -> Path:
    """GitHub's JSON for the release, as `<root>/releases/tags/<tag>` (a mirror of the repository's API)."""
    path = root / "releases" / "tags" / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    listed = [{"name": name, "browser_download_url": f"{GH_REPO}/releases/download/{tag}/{name}",
               **({"digest": digest} if digest else {})} for name, digest in assets.items()]
    path.write_text(json.dumps({"tag_name": tag, "assets": listed}))
    return path


def test_a_listed_release_on_github_is_chosen_and_digest_checked(served: Served, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The API (mirrored to loopback) lists the files; the download is checked against the asset's digest;
    the listing is kept once the wheel is had, so that --offline needs neither again."""
    monkeypatch.setattr(sources, "RETRY_DELAYS", (0.0, 0.0, 0.0))
    wheel = release_wheel(tmp_path, "a" * 40)
    www = tmp_path / "www"
    publish(www / "gh" / "releases", wheel)
    decoys: dict[str, str | None] = {"flashinfer_cubin-0.6.12-py3-none-any.whl": None, "SHA256SUMS": None}
    good, bad = sha256_of(wheel), "0" * 64
    write_api(www / "api", {wheel.name: f"sha256:{bad}", **decoys})
    target = listed_target()
    (release,) = target.kernels_releases
    mirrors = {GH_API: f"{served.url}/api", GH_REPO: f"{served.url}/gh"}
    settings = sources.Settings(cache=tmp_path / "cache", mirrors=mirrors)
    api = f"{served.url}/api/releases/tags/{TAG}"
    url = f"{served.url}/gh/releases/download/{TAG}/{wheel.name}"
    assert releases.missing(target, release, settings) is None  # only the network can tell
    fresh = sources.Settings(cache=tmp_path / "fresh", mirrors=mirrors, offline=True)
    assert releases.missing(target, release, fresh) == MissingInput(
        kind="kernels", lack="offline", what=f"release {TAG}'s file list ({api})",
        where=str(sources.url_cache_path(api, fresh).parent))
    with pytest.raises(Ds4xError) as caught:
        releases.fetch(target, release, settings)
    assert str(caught.value) == f"{url}: the download has sha256 {good}; the release's listing ({api}) wants {bad}"
    assert caught.value.hint == ("the file served is not the one the release lists: check the mirror set for "
                                 f"{served.url}/gh/releases/download/{TAG}, else the URL")
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]  # neither the wheel nor the listing
    write_api(www / "api", {wheel.name: f"sha256:{good.upper()}", **decoys})
    path = releases.fetch(target, release, settings)
    assert path == sources.url_cache_path(url, settings) and path.read_bytes() == wheel.read_bytes()
    offline = sources.Settings(cache=settings.cache, mirrors=mirrors, offline=True)
    assert releases.missing(target, release, offline) is None
    assert releases.fetch(target, release, offline) == path
    assert served.requests == [f"/api/releases/tags/{TAG}", f"/gh/releases/download/{TAG}/{wheel.name}"] * 2


def test_a_listed_release_without_digest_is_fetched_unchecked(served: Served, tmp_path: Path) -> None:
    wheel = release_wheel(tmp_path, "a" * 40)
    publish(tmp_path / "www" / "gh" / "releases", wheel)
    write_api(tmp_path / "www" / "api", {wheel.name: None})
    target = listed_target()
    settings = sources.Settings(cache=tmp_path / "cache", mirrors={GH_API: f"{served.url}/api", GH_REPO: f"{served.url}/gh"})
    resolved = releases.resolve(target, target.kernels_releases[0], settings)
    assert (resolved.release.filename, resolved.release.sha256) == (wheel.name, None)
    assert releases.fetch(target, target.kernels_releases[0], settings).read_bytes() == wheel.read_bytes()


@pytest.mark.parametrize(
    ("listing", "error", "message"),
    [
        (None, InputError, "{api} has no release demo-v1.1 (HTTP 404)"),
        ("<html>rate limited</html>", Ds4xError, "{api} is not a GitHub release (JSON with assets[].name): "),
        ('{"assets": [{"size": 1}]}', Ds4xError, "{api} is not a GitHub release (JSON with assets[].name): KeyError"),
        ('{"tag_name": "demo-v9", "assets": []}', Ds4xError, "{api} is the release 'demo-v9', not demo-v1.1"),
    ],
)
def test_a_listing_that_is_not_the_release_is_refused(served: Served, tmp_path: Path, listing: str | None,
                                                      error: type[Ds4xError], message: str) -> None:
    if listing is not None:
        write_api(tmp_path / "www" / "api", {}).write_text(listing)
    target = listed_target()
    settings = sources.Settings(cache=tmp_path / "cache", mirrors={GH_API: f"{served.url}/api", GH_REPO: f"{served.url}/gh"})
    with pytest.raises(error) as caught:
        releases.fetch(target, target.kernels_releases[0], settings)
    assert type(caught.value) is error
    assert message.format(api=f"{served.url}/api/releases/tags/{TAG}") in str(caught.value)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert served.requests == [f"/api/releases/tags/{TAG}"]  # a 404 is not retried, nor a page that is not JSON


def test_a_listed_release_through_a_file_mirror_builds(capsys: pytest.CaptureFixture[str], project: Path,
                                                       tmp_path: Path, git_repo: Repo) -> None:
    """pins.toml gives the tag alone; the mirror's folder holds the wheel among others, which are passed over:
    not Linux x86_64, pure Python, another project's, not a wheel."""
    make_patch(capsys, project, tmp_path, git_repo)
    wheel = release_wheel(tmp_path, git_repo[1])
    mirror = tmp_path / "releases-mirror"
    folder = publish(mirror, wheel).parent
    for decoy in (f"demo-1.1+g{git_repo[1][:9]}-cp311-cp311-macosx_11_0_arm64.whl", "demo-1.1-py3-none-any.whl",
                  "flashinfer_jit_cache-0.6.12-cp39-abi3-manylinux_2_28_x86_64.whl", "SHA256SUMS"):
        (folder / decoy).write_bytes(b"not this one")
    with_releases(project, entry(TAG, commit=git_repo[1]))
    dist = tmp_path / "dist"
    args = [*cli_args(project, tmp_path, git_repo, "wheel", "--kernels", f"release:{TAG}", "--dist", str(dist)),
            "--mirror", f"{UPSTREAM_URL}/releases={mirror.as_uri()}"]
    assert main(args) == 0, capsys.readouterr().err
    (built,) = dist.glob("*.whl")
    with zipfile.ZipFile(built) as zf:
        info = next(n for n in zf.namelist() if n.endswith(".dist-info/ds4x_provenance.json"))
        assert json.loads(zf.read(info))["kernels"] == {"wheel": wheel.name, "sha256": sha256_of(wheel)}


@pytest.mark.parametrize(
    ("names", "message", "hint"),
    [
        (["demo-1.1-py3-none-any.whl", "demo-1.1-cp311-cp311-macosx_11_0_arm64.whl", "notes.txt"],
         "release demo-v1.1 has no Linux x86_64 wheel; {folder} lists: demo-1.1-cp311-cp311-macosx_11_0_arm64.whl, "
         "demo-1.1-py3-none-any.whl, notes.txt",
         "give the kernels wheel with --kernels wheel:PATH_OR_URL, or name the release's wheel in kernels-releases"),
        ([], "release demo-v1.1 has no Linux x86_64 wheel; {folder} lists: no files", "give the kernels wheel"),
        (["demo-1.1-cp311-cp311-manylinux_2_28_x86_64.whl", "demo-1.1-cp312-cp312-linux_x86_64.whl",
          "other-1.0-cp312-cp312-manylinux_2_28_x86_64.whl"],
         "release demo-v1.1 has 2 Linux x86_64 wheels that could be its kernels ({folder}): "
         "demo-1.1-cp311-cp311-manylinux_2_28_x86_64.whl, demo-1.1-cp312-cp312-linux_x86_64.whl",
         "pass the one to use as --kernels wheel:{uri}/<one of them>, or name the release's wheel in kernels-releases"),
    ],
)
def test_no_wheel_or_several_is_one_error_naming_them(tmp_path: Path, names: list[str], message: str,
                                                       hint: str) -> None:
    folder = tmp_path / "releases-mirror" / "download" / TAG
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_bytes(b"x")
    target = listed_target(UPSTREAM_URL)
    settings = sources.Settings(cache=tmp_path / "cache",
                                mirrors={f"{UPSTREAM_URL}/releases": (tmp_path / "releases-mirror").as_uri()})
    with pytest.raises(InputError) as caught:
        releases.fetch(target, target.kernels_releases[0], settings)
    assert str(caught.value) == f"--kernels release:{TAG}: " + message.format(folder=folder)
    assert (caught.value.hint or "").startswith(hint.format(uri=folder.as_uri()))
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(
    ("names", "chosen"),
    [
        # the repository's or the package's own project, over another's
        (["upstream-1.1-cp312-cp312-manylinux_2_34_x86_64.whl", "flashinfer_jit_cache-1.0-cp39-abi3-linux_x86_64.whl"],
         "upstream-1.1-cp312-cp312-manylinux_2_34_x86_64.whl"),
        # one built from the pin, over another build
        ([f"demo-1.1+g{'a' * 9}-cp311-cp311-linux_x86_64.whl", f"demo-1.1+g{'b' * 9}-cp311-cp311-linux_x86_64.whl"],
         f"demo-1.1+g{'a' * 9}-cp311-cp311-linux_x86_64.whl"),
    ],
)
def test_the_wheel_that_fits_is_preferred(tmp_path: Path, names: list[str], chosen: str) -> None:
    folder = tmp_path / "m" / "releases" / "download" / TAG
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_bytes(b"x")
    target = listed_target()
    settings = sources.Settings(cache=tmp_path / "cache", mirrors={GH_REPO: str(tmp_path / "m")})
    assert releases.resolve(target, target.kernels_releases[0], settings).release == pins.KernelsRelease(
        tag=TAG, commit=RELEASE_COMMIT, filename=chosen)


def test_where_a_listed_release_cannot_be_had(tmp_path: Path, git_repo: Repo) -> None:
    """A local git mirror has no release folder; a repository off GitHub has no API to list its files."""
    release = pins.KernelsRelease(tag=TAG, commit=RELEASE_COMMIT)
    at_git = listed_target(UPSTREAM_URL)
    settings = sources.Settings(cache=tmp_path / "cache", mirrors={UPSTREAM_URL: str(git_repo[0])})
    assert releases.missing(at_git, release, settings) == MissingInput(
        kind="kernels", lack="mirror-has-no-file", what=f"release {TAG}", upstream=f"{UPSTREAM_URL}/releases",
        where=f"{git_repo[0]}/releases/download/{TAG}")
    off_github = sources.Settings(cache=tmp_path / "cache", mirrors={UPSTREAM_URL: "http://127.0.0.1:9/upstream"})
    with pytest.raises(InputError, match=f"names no file for release {TAG}, and {UPSTREAM_URL} is not on GitHub"):
        releases.missing(at_git, release, off_github)
    assert not (tmp_path / "cache").exists()


def test_the_shipped_tags_are_listed_through_githubs_api(tmp_path: Path) -> None:
    """No file name pinned: GitHub's API lists the release's files, or its mirror (no network here)."""
    fork = pins.load(HOME.pins).get("lvllmds4-x")
    release = releases.find(fork, "release:lvllmds4-x-v2.3.11")
    assert release == pins.KernelsRelease(tag="lvllmds4-x-v2.3.11", commit="08010fac212de1d674395bb110f3b6912caf8b24")
    repo = "https://github.com/guqiong96/Lvllmds4-x"
    api = "https://api.github.com/repos/guqiong96/Lvllmds4-x"
    assert releases.api_url(fork, release.tag) == f"{api}/releases/tags/{release.tag}"
    settings = sources.Settings(cache=tmp_path / "cache")
    assert releases.missing(fork, release, settings) == MissingInput(
        kind="kernels", lack="no-mirror", what=f"release {release.tag}", upstream=f"{repo}/releases", certain=False)
    mirrored = sources.Settings(cache=tmp_path / "cache", mirrors={api: "http://127.0.0.1:9/api"})
    found = releases.listing(fork, release.tag, mirrored)
    assert isinstance(found, releases.Listing)
    assert (found.where, found.download) == (f"http://127.0.0.1:9/api/releases/tags/{release.tag}",
                                             f"{repo}/releases/download/{release.tag}")
    assert releases.missing(fork, release, mirrored) is None
