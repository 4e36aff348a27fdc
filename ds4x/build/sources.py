"""Pinned base trees in the cache: git (through mirrors), sdists and wheels.

Every base becomes a git repository at a known commit, so the series applies
with `git am` whatever the source. A fetch builds in `<dir>.part` and renames
into place: an interrupted fetch leaves nothing the next run would trust.
"""

from __future__ import annotations

import argparse
import calendar
import hashlib
import html.parser
import http.client
import json
import os
import re
import sys
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from ds4x import inputs, proc
from ds4x.build import gitops
from ds4x.build.pins import Artifact, Target
from ds4x.digest import BLOCK, sha256_file
from ds4x.errors import Ds4xError, InputError
from ds4x.log import downloaded, logger, progress, step
from ds4x.scratch import atomic_dir, atomic_write

T = TypeVar("T")
MIRRORS_ENV = "DS4X_MIRRORS"
CACHE_ENV = "DS4X_CACHE_DIR"


@dataclass(frozen=True, kw_only=True)
class Settings:
    cache: Path
    mirrors: dict[str, str] = field(default_factory=dict)
    offline: bool = False
    source: str | None = None


@dataclass(frozen=True, kw_only=True)
class Base:
    """A target's pristine tree: a git repo in the cache, checked out at `commit`."""

    target: Target
    repo: Path
    commit: str
    origin: dict[str, Any]


def default_cache() -> Path:
    given = inputs.environ(CACHE_ENV)
    if given:
        return check_cache(given, CACHE_ENV)
    xdg = inputs.environ("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "ds4x"


def check_cache(text: str, given_by: str) -> Path:
    """The cache folder: one that exists or can be made, checked before anything runs."""
    try:
        return inputs.output_folder(text)
    except argparse.ArgumentTypeError as e:
        raise InputError(f"{given_by} {e}", f"point {given_by} at a folder you can write (made if missing)") from None


def parse_mirrors(specs: list[str]) -> dict[str, str]:
    """`URL=URL_OR_PATH` pairs from --mirror and DS4X_MIRRORS (whitespace-separated);
    a local replacement must be a folder (a repository, or one holding them)."""
    mirrors: dict[str, str] = {}
    env = (inputs.environ(MIRRORS_ENV) or "").split()
    for number, spec in enumerate([*env, *specs]):
        given_by = MIRRORS_ENV if number < len(env) else "--mirror"
        upstream, sep, replacement = spec.partition("=")
        if not sep or not upstream or not replacement or any(c.isspace() or ord(c) < 32 for c in spec):
            raise InputError(
                f"{given_by} {inputs.shown(spec)} is not UPSTREAM=REPLACEMENT",
                "e.g. --mirror https://github.com/guqiong96/Lvllmds4-x=/srv/git/Lvllmds4-x.git",
            )
        if "://" not in replacement and Path(replacement).exists() and not Path(replacement).is_dir():
            raise InputError(f"{given_by}: mirror {replacement} is a file, not a git repository",
                             f"point {given_by} at a git repository")
        mirrors[upstream.rstrip("/")] = replacement
    return mirrors


def local_mirror(where: str, url: str = "its upstream") -> Path | None:
    """The local repository `where` mirrors `url` at (None: `where` is a URL,
    or no such path); a folder that is not a repository is refused before git runs."""
    path = Path(where)
    if "://" in where or not path.exists():
        return None
    if not ((path / ".git").exists() or ((path / "HEAD").is_file() and (path / "objects").is_dir())):
        raise InputError(f"mirror {where} for {url} is not a git repository",
                         f"point --mirror / {MIRRORS_ENV} at a clone of it")
    return path


def resolve_url(url: str, mirrors: dict[str, str]) -> str:
    """The longest mirrored prefix wins; `.git` suffixes are ignored."""
    key = url.rstrip("/").removesuffix(".git")
    for upstream in sorted(mirrors, key=len, reverse=True):
        stem = upstream.removesuffix(".git")
        if key == stem or key.startswith(stem + "/"):
            return mirrors[upstream] + key[len(stem):]
    return url


def index_url() -> str:
    """The user's package index: PIP_INDEX_URL, pip's config (`pip config list`),
    else pip's own default."""
    given = inputs.environ("PIP_INDEX_URL")
    if given:
        if any(c.isspace() for c in given):
            raise InputError(f"$PIP_INDEX_URL {inputs.shown(given)}: a URL holds no spaces", "set it to the index's URL")
        return given
    wide = {**os.environ, "COLUMNS": "10000"}  # pip wraps its help to the terminal
    listed = proc.run([sys.executable, "-m", "pip", "config", "list"], "check pip's configuration", env=wide,
                      check=False, capture=True)
    found = dict(re.findall(r"^(\S+?)='(.*)'$", listed.stdout or "", re.M))
    for key in ("global.index-url", "download.index-url", "install.index-url"):
        if found.get(key):
            return str(found[key])
    # pip's own default, as its help states it: it is pip's to name, not ours
    usage = proc.run([sys.executable, "-m", "pip", "download", "--help"], "check pip", env=wide, check=False,
                     capture=True).stdout or ""
    default = re.search(r"--index-url <url> Base URL of the Python Package Index \(default (\S+?)\)", " ".join(usage.split()))
    if not default:
        raise Ds4xError("cannot tell pip's default index from `pip download --help`", "set PIP_INDEX_URL to your index")
    return default[1]


RETRY_DELAYS = (1.0, 4.0, 15.0)  # seconds before each retry of a transient network failure


def _transient(error: BaseException) -> bool:
    """Worth another try: a dropped, reset or refused connection, a timeout, a
    5xx or 429; not a 4xx (the file is not there, or not ours to read), nor a
    local error (disk, certificates, a bad URL)."""
    if isinstance(error, urllib.error.HTTPError):
        return error.code >= 500 or error.code == 429
    if isinstance(error, urllib.error.URLError):
        error = error.reason if isinstance(error.reason, BaseException) else error
    return isinstance(error, (ConnectionError, TimeoutError, http.client.IncompleteRead,
                              http.client.RemoteDisconnected))


def _retrying(what: str, attempt: Callable[[], T]) -> T:
    for tries, delay in enumerate((0.0, *RETRY_DELAYS)):
        time.sleep(delay)
        try:
            return attempt()
        except Exception as e:
            if not _transient(e) or tries == len(RETRY_DELAYS):
                raise
            logger.warning("%s: %s; trying again in %.0f s", what, e, RETRY_DELAYS[tries])
    raise AssertionError("unreachable")


def read_url(url: str, label: str, limit: int, headers: dict[str, str] | None = None) -> bytes:
    """A small document at `url` (http(s) or file://), read whole, at most `limit`
    bytes; a transient failure is retried as a download is, any other raised as urllib raises it."""
    request = urllib.request.Request(url, headers=headers or {})

    def read() -> bytes:
        with urllib.request.urlopen(request, timeout=60) as response:
            body: bytes = response.read(limit + 1)
        if len(body) > limit:
            raise Ds4xError(f"{url}: over {limit} bytes", "check the URL")
        return body

    return _retrying(label, read)


@dataclass(frozen=True)
class IndexFile:
    """One file of a project's index page."""

    url: str  # absolute, without a fragment
    sha256: str | None  # as the index gives it, lower case
    yanked: bool


def _index_file(page: str, href: str, sha256: str | None, yanked: bool) -> IndexFile:
    url, _, fragment = urllib.parse.urljoin(page, href).partition("#")
    if sha256 is None and fragment.startswith("sha256="):
        sha256 = fragment.removeprefix("sha256=")
    return IndexFile(url=url, sha256=sha256.lower() if sha256 else None, yanked=yanked)


class _Links(html.parser.HTMLParser):
    """The files of a PEP 503 HTML index page, by name."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.page = page
        self.files: dict[str, IndexFile] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        href = found.get("href")
        if tag == "a" and href:
            name = Path(urllib.parse.urlparse(href).path).name
            self.files[name] = _index_file(self.page, href, None, "data-yanked" in found)


def _index_files(project: str) -> tuple[str, dict[str, IndexFile]]:
    """The project's index page and its files by name, from the Simple API
    (PEP 691 JSON, else PEP 503 HTML)."""
    index = index_url()
    if urllib.parse.urlparse(index).scheme not in ("http", "https"):
        raise Ds4xError(f"the package index {index!r} is not an http(s) URL", "set PIP_INDEX_URL to your index's URL")
    page = f"{index.rstrip('/')}/{project}/"
    request = urllib.request.Request(
        page, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"}
    )

    def read() -> tuple[str, bool]:
        with urllib.request.urlopen(request, timeout=60) as response:
            body = response.read().decode(errors="replace")
            return body, "json" in response.headers.get("Content-Type", "")

    try:
        body, is_json = _retrying(f"index page {page}", read)
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        raise Ds4xError(f"cannot read the index page {page}: {e}", "check the network and PIP_INDEX_URL") from e
    if not is_json:
        links = _Links(page)
        links.feed(body)
        return page, links.files
    try:
        return page, {f["filename"]: _index_file(page, f["url"], f.get("hashes", {}).get("sha256"),
                                                 bool(f.get("yanked")))
                      for f in json.loads(body)["files"]}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise Ds4xError(f"index page {page} is not a simple-API page: {e}", "check PIP_INDEX_URL") from None


def _file_url(artifact: Artifact) -> str:
    page, files = _index_files(artifact.project)
    if artifact.filename not in files:
        raise Ds4xError(f"{artifact.filename} is not on the index page {page}", "check the pin or PIP_INDEX_URL")
    return files[artifact.filename].url  # a pin may name a yanked file


def release(artifact: Artifact, version: str | None = None) -> Artifact:
    """A release of the artifact's project on the index (`version`, else the
    newest final one not yanked), in the same form (an sdist, or a wheel with
    the same tags), with its sha256 from the index."""
    from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
    from packaging.version import InvalidVersion, Version

    def parse(name: str) -> Version | None:
        try:
            if artifact.filename.endswith(".whl"):
                _, found, _, tags = parse_wheel_filename(name)
                return found if tags == parse_wheel_filename(artifact.filename)[3] else None
            return parse_sdist_filename(name)[1] if name.endswith(".tar.gz") else None
        except (InvalidWheelFilename, InvalidSdistFilename):
            return None

    try:
        wanted = Version(version) if version else None
    except InvalidVersion:
        raise InputError(f"--to {version!r} is not a version", "give a release's version, e.g. 0.32.0") from None
    page, files = _index_files(artifact.project)
    found = [(v, name) for name, file in files.items() if (v := parse(name)) is not None
             and (v == wanted if wanted else not v.is_prerelease and not file.yanked)]
    if not found:
        raise InputError(f"no {version or 'final'} release of {artifact.project} like {artifact.filename} on {page}",
                         "check the version (see `check --newest`)")
    newest, name = max(found)
    sha256 = files[name].sha256
    if sha256 is None or not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise Ds4xError(f"{page} gives no sha256 for {name}", "use an index that publishes hashes (PEP 503/691)")
    return Artifact(project=artifact.project, version=str(newest), filename=name, sha256=sha256)


def _attempt(url: str, out: IO[bytes], label: str) -> str:
    """One try at `url` into `out`, from its start, hashing as it goes; the sha256."""
    out.seek(0)
    out.truncate()
    digest = hashlib.sha256()
    start = time.monotonic()
    with (urllib.request.urlopen(url, timeout=120) as response,
          progress(int(response.headers.get("Content-Length") or 0) or None, label) as bar):
        for block in iter(lambda: response.read(BLOCK), b""):
            out.write(block)
            digest.update(block)
            bar.update(len(block))
    downloaded(label, out.tell(), time.monotonic() - start)  # a log's line, where no bar showed
    return digest.hexdigest()


def _stream(url: str, dest: Path, label: str, check: Callable[[str], None],
            hint: str = "check the network and PIP_INDEX_URL") -> None:
    """Download `url` to `dest`, which appears only once `check` has accepted its
    sha256 (it raises to refuse it). A transient failure starts the file again
    (a few times, with growing pauses)."""
    with atomic_write(dest, "wb") as out:
        try:
            actual = _retrying(f"download {label}", lambda: _attempt(url, out, label))
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            raise Ds4xError(f"cannot download {label}: {e}", hint) from e
        check(actual)


def split_url_pin(url: str) -> tuple[str, str | None]:
    """`URL#sha256=HEX` -> (URL, hex in lower case); a URL without it -> (URL, None)."""
    bare, _, fragment = url.partition("#")
    return bare, fragment.removeprefix("sha256=").lower() if fragment else None


def url_cache_path(url: str, settings: Settings) -> Path:
    """Where fetch_url keeps the file of `url` (without its #sha256=)."""
    name = inputs.url_file_name(url)
    if name in ("", ".", ".."):
        raise InputError(f"{url} names no file", "give the URL of the file itself")
    return settings.cache / "downloads" / "by-url" / hashlib.sha256(url.encode()).hexdigest() / name


@dataclass(frozen=True, kw_only=True)
class UrlPin:
    """Who pins a URL's sha256, in the words of fetch_url's errors."""

    wanted_by: str = "#sha256="
    fix: str = "fix the #sha256= after the URL in --kernels if it is wrong"


def fetch_url(url: str, settings: Settings, pin: UrlPin = UrlPin()) -> Path:
    """A file named by URL (`--kernels wheel:URL[#sha256=HEX]`, a release), cached
    under the URL's own hash (two URLs that serve one file name never share an entry)
    and, when the URL pins a sha256, checked against it on download and on every reuse."""
    bare, sha256 = split_url_pin(url)
    dest = url_cache_path(bare, settings)
    if dest.exists():
        if sha256:
            _check_url_file(bare, sha256, sha256_file(dest), dest, pin)
        return dest
    if settings.offline:
        raise Ds4xError(f"{bare} is not in the cache ({dest.parent})", "run once without --offline")
    _stream(bare, dest, dest.name, lambda actual: _check_url_file(bare, sha256, actual, None, pin),
            f"check the network and the URL, or map it to a mirror (--mirror / {MIRRORS_ENV})")
    return dest


def _check_url_file(url: str, expected: str | None, actual: str, cached: Path | None, pin: UrlPin) -> None:
    """One error naming the URL, both sha256s and the fix; `cached`: the cache entry checked."""
    if expected is None or actual == expected:
        return
    if cached:
        raise Ds4xError(f"{url}: the cached {cached} has sha256 {actual}; {pin.wanted_by} wants {expected}",
                        f"delete {cached.parent} to download it again, or {pin.fix}")
    raise Ds4xError(f"{url}: the download has sha256 {actual}; {pin.wanted_by} wants {expected}",
                    f"{pin.fix}, else the URL")


def download(artifact: Artifact, settings: Settings) -> Path:
    """The artifact from the cache, else the index; sha256-checked either way.
    The cache is keyed by the pinned sha256: a changed pin misses it, and a
    file that does not match never replaces one that matches another pin."""
    dest = settings.cache / "downloads" / artifact.sha256 / artifact.filename
    if dest.exists() and sha256_file(dest) == artifact.sha256:
        return dest
    if settings.offline:
        raise Ds4xError(f"{artifact.filename} is not in the cache ({dest.parent})", "run once without --offline")

    def check(actual: str) -> None:
        if actual != artifact.sha256:
            raise Ds4xError(
                f"{artifact.filename}: the index serves sha256 {actual}; the pin wants {artifact.sha256}",
                "if the pin is wrong, fix pins.toml; else check PIP_INDEX_URL",
            )

    _stream(_file_url(artifact), dest, artifact.filename, check)
    return dest


# Refuse links and special files on every Python that has the filter (3.10.12+).
_HAS_DATA_FILTER = hasattr(tarfile, "data_filter")


def _unpack(archive: Path, dest: Path) -> int:
    """Unpack an sdist (dropping its top folder) or a wheel; return the newest mtime."""
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(dest)
            return max(calendar.timegm((*i.date_time, 0, 0, 0)) for i in zf.infolist())
    with tarfile.open(archive) as tf:
        members = tf.getmembers()
        top = members[0].name.split("/", 1)[0]
        for member in members:
            name = member.name
            if not name.startswith(top + "/") or ".." in name.split("/") or not (member.isfile() or member.isdir()):
                continue
            member.name = name[len(top) + 1 :]
            if _HAS_DATA_FILTER:
                tf.extract(member, dest, set_attrs=False, filter="data")
            else:
                tf.extract(member, dest, set_attrs=False)
        return int(max(m.mtime for m in members))


def sdist_commit(tree: Path, package: str) -> str | None:
    """The commit an sdist was cut from, as its setuptools-scm _version.py says."""
    version_py = tree / package / "_version.py"
    found = re.search(r"commit_id\s*=\s*'g?([0-9a-f]{7,40})'", version_py.read_text()) if version_py.exists() else None
    return found[1] if found else None


def _ready(path: Path, commit: str | None = None, stamp: str | None = None) -> str | None:
    """The HEAD of a cached repo that is clean (and at `commit`, or whose commit
    message carries `stamp`: the sha256 it was unpacked from), else an error."""
    with gitops.open_repo(path) as repo:
        if repo.is_dirty(untracked_files=True):
            raise Ds4xError(f"cache entry {path} has local changes", f"delete {path} and run again")
        if commit:
            gitops.verify_head(repo, commit, str(path))
        if stamp and stamp not in str(repo.head.commit.message):
            raise Ds4xError(f"cache entry {path} was not unpacked from {stamp}", f"delete {path} and run again")
        return gitops.head(repo)


def _build(dest: Path, settings: Settings, fill: Callable[[Path], None]) -> None:
    if settings.offline:
        raise Ds4xError(f"{dest.name} is not in the cache ({dest.parent})", "run once without --offline")
    with atomic_dir(dest) as part:
        fill(part)


def _git_base(target: Target, settings: Settings) -> Base:
    assert target.git
    pin = target.git
    dest = base_dir(target, "git", settings)
    where = resolve_url(pin.url, settings.mirrors)
    if not dest.exists():
        with step(f"fetch {target.name} @ {pin.commit[:12]} from {where}"):
            if "://" not in where:  # a path: share objects, no pack protocol
                local = local_mirror(where, pin.url)
                if local is None:
                    raise InputError(f"mirror {where} for {pin.url} does not exist", "fix --mirror / DS4X_MIRRORS")
                _build(dest, settings, lambda p: gitops.clone_local(local, p, pin.commit, shared=False))
            else:
                _build(dest, settings, lambda p: gitops.fetch_commit(where, p, pin.commit))
    _ready(dest, pin.commit)
    return Base(target=target, repo=dest, commit=pin.commit, origin={"kind": "git", "url": pin.url, "commit": pin.commit})


def _archive_base(target: Target, kind: str, settings: Settings) -> Base:
    artifact: Artifact = getattr(target, kind)
    dest = base_dir(target, kind, settings)
    origin: dict[str, Any] = {"kind": kind, "filename": artifact.filename, "sha256": artifact.sha256}

    def fill(part: Path) -> None:
        archive = download(artifact, settings)
        epoch = _unpack(archive, part)
        if kind == "sdist" and target.git:
            found = sdist_commit(part, target.package)
            if not found or not target.git.commit.startswith(found):
                raise Ds4xError(
                    f"{artifact.filename} says commit {found}, pinned {target.git.commit}",
                    "pin the sdist of the pinned commit, or build from git",
                )
        gitops.commit_all(part, f"{artifact.filename}\n\nsha256: {artifact.sha256}\n", epoch)

    if not dest.exists():
        with step(f"unpack {artifact.filename} (sha256 {artifact.sha256[:12]})"):
            _build(dest, settings, fill)
    commit = _ready(dest, stamp=f"sha256: {artifact.sha256}")
    assert commit
    if kind == "sdist":  # the pinned commit (checked above), else the abbreviation the sdist names
        origin["commit"] = target.git.commit if target.git else sdist_commit(dest, target.package)
    return Base(target=target, repo=dest, commit=commit, origin=origin)


def base_dir(target: Target, kind: str, settings: Settings) -> Path:
    """The cache entry of the target's base from `kind`."""
    if kind == "git":
        assert target.git
        return settings.cache / "git" / f"{target.name}-{target.git.commit}"
    artifact: Artifact = getattr(target, kind)
    return settings.cache / "src" / f"{target.name}-{kind}-{artifact.sha256}"


def source_kind(target: Target, settings: Settings) -> str:
    """The chosen (or first pinned) source of the target's base."""
    if settings.source and settings.source not in target.sources:
        raise InputError(
            f"target {target.name} has no {settings.source} pin",
            f"its sources: {', '.join(target.sources)}",
        )
    return settings.source if settings.source in target.sources else target.sources[0]


def fetch(target: Target, settings: Settings) -> Base:
    """The target's base from the chosen (or first pinned) source."""
    kind = source_kind(target, settings)
    logger.debug("source of %s: %s", target.name, kind)
    return _git_base(target, settings) if kind == "git" else _archive_base(target, kind, settings)
