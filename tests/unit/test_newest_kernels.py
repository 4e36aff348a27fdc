"""`check --newest` for a target that reuses a kernels wheel: the newest release
is the newest one the kernels wheel's project has too, read from a real simple
index on loopback."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from ds4x.build import newest, sources
from ds4x.build.pins import Artifact, Target
from ds4x.build.words import drift_line
from ds4x.checkout import Layout

WHEEL_TAGS = "cp38-abi3-manylinux_2_28_x86_64"
FILES = {  # project -> its files on the index
    "demo": [f"demo-{v}.tar.gz" for v in ("1.0", "1.1", "1.2")],
    "demo-cpu": [f"demo_cpu-{v}-{WHEEL_TAGS}.whl" for v in ("1.0", "1.1")],
}


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            project = self.path.removeprefix("/simple/").strip("/")
            if project not in FILES:
                self.send_error(404)
                return
            files = [{"filename": name, "url": f"../../files/{name}", "hashes": {"sha256": f"{i:064x}"}}
                     for i, name in enumerate(FILES[project], 1)]
            body = json.dumps({"files": files}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_port}/simple")
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def target(with_kernels: bool) -> Target:
    sdist = Artifact(project="demo", version="1.0", filename="demo-1.0.tar.gz", sha256="1" * 64)
    kernels = Artifact(project="demo-cpu", version="1.0", filename=f"demo_cpu-1.0-{WHEEL_TAGS}.whl", sha256="2" * 64)
    return Target(name="demo", package="demo", sdist=sdist, kernels_wheel=kernels if with_kernels else None)


def test_a_kernels_wheel_bounds_the_newest_release(index: str) -> None:
    bounded = newest.newest_release(target(with_kernels=True), "sdist")
    assert (bounded.version, bounded.filename) == ("1.1", "demo-1.1.tar.gz")  # demo-cpu has no 1.2
    assert newest.newest_release(target(with_kernels=False), "sdist").version == "1.2"


def test_the_drift_line_names_the_wheel_that_bounds_it(index: str, tmp_path: Path) -> None:
    bounded = target(with_kernels=True)
    assert bounded.sdist is not None
    at_newest = replace(bounded, sdist=sources.release(bounded.sdist, "1.1"))
    # already at the newest: no series is read, so the layout may be empty
    drift = newest.drift(at_newest, sources.Settings(cache=tmp_path), Layout(patches=tmp_path, overlays=tmp_path))
    assert drift_line(drift) == "demo: 1.1 is the newest release with a demo-cpu wheel"
