"""ds4x.build.sources: mirrors, the cache, and downloads checked by sha256, served from loopback only."""

from __future__ import annotations

import hashlib
import http.client
import http.server
import json
import os
import ssl
import subprocess
import sys
import threading
import urllib.error
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import pytest

from ds4x.build import sources
from ds4x.build.pins import Artifact
from ds4x.errors import Ds4xError, InputError


def test_mirrors_from_option_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS4X_MIRRORS", "https://github.com/a/b=/srv/b.git  https://github.com/c=file:///m/c")
    mirrors = sources.parse_mirrors(["https://github.com/a/b=/opt/b"])
    assert mirrors == {"https://github.com/a/b": "/opt/b", "https://github.com/c": "file:///m/c"}


@pytest.mark.parametrize("spec", ["https://github.com/a/b", "=x", "https://github.com/a/b="])
def test_bad_mirror_spec(spec: str) -> None:
    with pytest.raises(InputError, match="is not UPSTREAM=REPLACEMENT") as caught:
        sources.parse_mirrors([spec])
    assert spec in str(caught.value)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://github.com/guqiong96/Lvllmds4-x", "/srv/fork.git"),
        ("https://github.com/guqiong96/Lvllmds4-x.git", "/srv/fork.git"),
        ("https://github.com/vllm-project/vllm", "http://mirror.local/gh/vllm-project/vllm"),
        ("https://gitlab.com/x/y", "https://gitlab.com/x/y"),
        ("https://github.com/guqiong96/Lvllmds4-xyz", "http://mirror.local/gh/guqiong96/Lvllmds4-xyz"),
    ],
)
def test_longest_prefix_wins(url: str, expected: str) -> None:
    mirrors = {"https://github.com": "http://mirror.local/gh", "https://github.com/guqiong96/Lvllmds4-x": "/srv/fork.git"}
    assert sources.resolve_url(url, mirrors) == expected


def test_cache_dir_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DS4X_CACHE_DIR", str(tmp_path / "c"))
    assert sources.default_cache() == tmp_path / "c"
    monkeypatch.delenv("DS4X_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert sources.default_cache() == tmp_path / "xdg" / "ds4x"


PAYLOAD = b"pretend wheel bytes\n" * 100
OTHER = b"another wheel by the same name\n" * 100


class Index:
    """A simple index on loopback serving one file: PEP 691 JSON, or PEP 503
    HTML with `html`; `drops` first connections to the file are cut without an
    answer; every request path is logged."""

    def __init__(self) -> None:
        self.html, self.broken, self.drops = False, False, 0
        self.requests: list[str] = []
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                index.requests.append(self.path)
                if self.path == "/simple/demo/" and index.broken:
                    body, kind = b'{"projects": []}', "application/vnd.pypi.simple.v1+json"
                elif self.path == "/simple/demo/" and index.html:
                    body = b'<html><body><a href="../../files/demo-1.0.whl#sha256=x">demo-1.0.whl</a></body></html>'
                    kind = "text/html"
                elif self.path == "/simple/demo/":
                    body = json.dumps({"files": [{"filename": "demo-1.0.whl", "url": "../../files/demo-1.0.whl"}]}).encode()
                    kind = "application/vnd.pypi.simple.v1+json"
                elif self.path == "/files/demo-1.0.whl" and index.drops:
                    index.drops -= 1
                    self.close_connection = True  # no status line: the client sees the connection drop
                    return
                elif self.path == "/files/demo-1.0.whl":
                    body, kind = PAYLOAD, "application/octet-stream"
                elif self.path == "/other/demo-1.0.whl":
                    body, kind = OTHER, "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[Index]:
    index = Index()
    thread = threading.Thread(target=index.server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("PIP_INDEX_URL", f"{index.url}/simple")
    monkeypatch.setattr(sources, "RETRY_DELAYS", (0.0, 0.0, 0.0))
    yield index
    index.server.shutdown()
    index.server.server_close()


@pytest.fixture
def index(served: Index) -> str:
    return served.url


def artifact(sha: str) -> Artifact:
    return Artifact(project="demo", version="1.0", filename="demo-1.0.whl", sha256=sha)


def test_download_checks_sha256_and_caches(index: str, tmp_path: Path) -> None:
    settings = sources.Settings(cache=tmp_path)
    good = artifact(hashlib.sha256(PAYLOAD).hexdigest())
    path = sources.download(good, settings)
    assert path.read_bytes() == PAYLOAD
    offline = sources.Settings(cache=tmp_path, offline=True)
    assert sources.download(good, offline) == path


def files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_download_sha_mismatch_leaves_nothing(index: str, tmp_path: Path) -> None:
    actual = hashlib.sha256(PAYLOAD).hexdigest()
    with pytest.raises(Ds4xError, match=f"the index serves sha256 {actual}; the pin wants {'0' * 64}"):
        sources.download(artifact("0" * 64), sources.Settings(cache=tmp_path))
    assert files(tmp_path / "downloads") == []


def test_a_wrong_pin_never_deletes_the_file_of_another(index: str, tmp_path: Path) -> None:
    settings = sources.Settings(cache=tmp_path)
    good = sources.download(artifact(hashlib.sha256(PAYLOAD).hexdigest()), settings)
    with pytest.raises(Ds4xError, match="the pin wants " + "1" * 64):
        sources.download(artifact("1" * 64), settings)
    assert good.read_bytes() == PAYLOAD and files(tmp_path / "downloads") == [good.relative_to(tmp_path / "downloads").as_posix()]


def test_a_dropped_connection_is_retried(served: Index, tmp_path: Path) -> None:
    served.drops = 1
    path = sources.download(artifact(hashlib.sha256(PAYLOAD).hexdigest()), sources.Settings(cache=tmp_path))
    assert path.read_bytes() == PAYLOAD
    assert served.requests.count("/files/demo-1.0.whl") == 2


def test_a_404_fails_at_once(served: Index, tmp_path: Path) -> None:
    with pytest.raises(Ds4xError, match="cannot download missing.whl: HTTP Error 404"):
        sources.fetch_url(f"{served.url}/files/missing.whl", sources.Settings(cache=tmp_path))
    assert served.requests == ["/files/missing.whl"]


def test_an_html_index_page(served: Index, tmp_path: Path) -> None:
    served.html = True
    path = sources.download(artifact(hashlib.sha256(PAYLOAD).hexdigest()), sources.Settings(cache=tmp_path))
    assert path.read_bytes() == PAYLOAD


def test_offline_without_cache(tmp_path: Path) -> None:
    with pytest.raises(Ds4xError, match="demo-1.0.whl is not in the cache") as caught:
        sources.download(artifact("0" * 64), sources.Settings(cache=tmp_path, offline=True))
    assert caught.value.hint == "run once without --offline"


def test_network_down(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setattr(sources, "RETRY_DELAYS", (0.0, 0.0, 0.0))
    with pytest.raises(Ds4xError, match="cannot read the index page http://127.0.0.1:9/simple/demo/"):
        sources.download(artifact("0" * 64), sources.Settings(cache=tmp_path))
    assert not any((tmp_path / "downloads").glob("*"))


def by_url(cache: Path, url: str) -> Path:
    return cache / "downloads" / "by-url" / hashlib.sha256(url.encode()).hexdigest() / url.rsplit("/", 1)[-1]


def test_fetch_url_streams_into_the_cache(index: str, tmp_path: Path) -> None:
    url = f"{index}/files/demo-1.0.whl"
    path = sources.fetch_url(url, sources.Settings(cache=tmp_path))
    assert path == by_url(tmp_path, url) and path.read_bytes() == PAYLOAD
    assert sources.fetch_url(url, sources.Settings(cache=tmp_path, offline=True)) == path
    with pytest.raises(Ds4xError, match="cannot download missing.whl"):
        sources.fetch_url(f"{index}/files/missing.whl", sources.Settings(cache=tmp_path))
    assert files(tmp_path / "downloads") == [path.relative_to(tmp_path / "downloads").as_posix()]


def test_two_urls_that_serve_one_file_name_never_share_an_entry(served: Index, tmp_path: Path) -> None:
    settings = sources.Settings(cache=tmp_path)
    first = sources.fetch_url(f"{served.url}/files/demo-1.0.whl", settings)
    second = sources.fetch_url(f"{served.url}/other/demo-1.0.whl", settings)
    assert first.name == second.name and first != second
    assert (first.read_bytes(), second.read_bytes()) == (PAYLOAD, OTHER)
    sources.fetch_url(f"{served.url}/files/demo-1.0.whl", settings)
    assert served.requests.count("/files/demo-1.0.whl") == 1  # the second time, from the cache


def test_a_url_pinned_by_sha256_is_checked(served: Index, tmp_path: Path) -> None:
    url, good = f"{served.url}/files/demo-1.0.whl", hashlib.sha256(PAYLOAD).hexdigest()
    settings = sources.Settings(cache=tmp_path)
    with pytest.raises(Ds4xError) as caught:
        sources.fetch_url(f"{url}#sha256={'0' * 64}", settings)
    assert str(caught.value) == f"{url}: the download has sha256 {good}; #sha256= wants {'0' * 64}"
    assert caught.value.hint == "fix the #sha256= after the URL in --kernels if it is wrong, else the URL"
    assert files(tmp_path / "downloads") == []  # a refused file never lands in the cache
    path = sources.fetch_url(f"{url}#sha256={good.upper()}", settings)
    assert path == by_url(tmp_path, url) and path.read_bytes() == PAYLOAD


def test_a_cached_url_file_is_checked_again_on_reuse(served: Index, tmp_path: Path) -> None:
    url, good = f"{served.url}/files/demo-1.0.whl", hashlib.sha256(PAYLOAD).hexdigest()
    path = sources.fetch_url(f"{url}#sha256={good}", sources.Settings(cache=tmp_path))
    path.write_bytes(b"changed in the cache")
    bad = hashlib.sha256(b"changed in the cache").hexdigest()
    with pytest.raises(Ds4xError) as caught:
        sources.fetch_url(f"{url}#sha256={good}", sources.Settings(cache=tmp_path, offline=True))
    assert str(caught.value) == f"{url}: the cached {path} has sha256 {bad}; #sha256= wants {good}"
    assert str(caught.value.hint).startswith(f"delete {path.parent} to download it again, or fix the #sha256=")
    assert served.requests == ["/files/demo-1.0.whl"]
    assert sources.fetch_url(url, sources.Settings(cache=tmp_path)) == path  # no pin, nothing to check


@pytest.mark.parametrize("verbose", [False, True])
@pytest.mark.parametrize("configured", [True, False])
def test_the_index_comes_from_pip_and_never_from_its_internals(tmp_path: Path, configured: bool, verbose: bool) -> None:
    """pip's config when it names an index, else the default pip states in its own help
    (under -v too, where pip's output is otherwise streamed, and on a narrow terminal)."""
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nindex-url = http://127.0.0.1:1/simple\n" if configured else "")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    code = ("import sys; from ds4x import log; from ds4x.build import sources; log.setup(VERBOSE); print(sources.index_url()); "
            "print('pip' in sys.modules)").replace("VERBOSE", "1" if verbose else "0")
    done = subprocess.run([sys.executable, "-c", code], env={**env, "PIP_CONFIG_FILE": str(config), "COLUMNS": "40"},
                          capture_output=True, text=True, check=True)
    url, imported_pip = done.stdout.split()
    assert imported_pip == "False"
    assert url == "http://127.0.0.1:1/simple" if configured else url.startswith("https://") and url.endswith("/simple")


def test_an_index_that_is_not_a_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "packages.internal/simple")
    with pytest.raises(Ds4xError, match="the package index 'packages.internal/simple' is not an http"):
        sources.download(artifact("0" * 64), sources.Settings(cache=tmp_path))


def test_a_json_page_that_is_not_a_simple_index(served: Index, tmp_path: Path) -> None:
    served.broken = True
    with pytest.raises(Ds4xError, match="is not a simple-API page"):
        sources.download(artifact("0" * 64), sources.Settings(cache=tmp_path))


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (urllib.error.HTTPError("u", 404, "Not Found", Message(), None), False),
        (urllib.error.HTTPError("u", 503, "Unavailable", Message(), None), True),
        (urllib.error.HTTPError("u", 429, "Too Many", Message(), None), True),
        (urllib.error.URLError(ConnectionRefusedError()), True),
        (urllib.error.URLError(TimeoutError()), True),
        (http.client.RemoteDisconnected("closed"), True),
        (ConnectionResetError(), True),
        (urllib.error.URLError(ssl.SSLCertVerificationError()), False),
        (PermissionError(), False),
        (OSError(28, "No space left on device"), False),
        (http.client.InvalidURL(), False),
    ],
)
def test_only_network_failures_are_retried(error: BaseException, transient: bool) -> None:
    assert sources._transient(error) is transient
