"""Quilt-style series files and the DEP-3 fields every patch carries."""

from __future__ import annotations

import email
import email.policy
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ds4x.errors import InputError
from ds4x.inputs import read_text

# DEP-3: Subject/From stand for Description/Author; these live in the body.
REQUIRED_FIELDS = ("Origin", "Forwarded")
KNOWN_FIELDS = (*REQUIRED_FIELDS, "Bug", "Applied-Upstream", "Last-Update", "Reviewed-by")
_FIELD = re.compile(r"^([A-Z][A-Za-z-]+):\s*(.*)$")


@dataclass(frozen=True, kw_only=True)
class PatchEntry:
    name: str
    path: Path
    line: int


@dataclass(frozen=True, kw_only=True)
class PatchInfo:
    subject: str
    fields: dict[str, str]

    @property
    def applied_upstream(self) -> str | None:
        return self.fields.get("Applied-Upstream")

    @property
    def upstream_marker(self) -> tuple[str, str] | None:
        """(file, name) from `Applied-Upstream: VERSION, FILE NAME`: what upstream's
        own fix defines, by which a tree the patch no longer applies to shows it."""
        found = re.fullmatch(r"[^,]*,\s*(\S+)\s+([A-Za-z_]\w*)", self.applied_upstream or "")
        return (found[1], found[2]) if found else None


def _strip_comment(line: str) -> str:
    """quilt: a line starting with '#', or anything after ' #', is a comment."""
    if line.lstrip().startswith("#"):
        return ""
    return line.split(" #", 1)[0].strip()


def parse_series(series: Path) -> list[PatchEntry]:
    """Ordered patch entries; a missing series file is an empty series."""
    if not series.exists():
        return []
    entries: list[PatchEntry] = []
    seen: set[str] = set()
    for number, raw in enumerate(read_text(series).splitlines(), 1):
        name = _strip_comment(raw)
        if not name:
            continue
        where = f"{series}:{number}"
        pure = PurePosixPath(name)
        if len(name.split()) > 1:
            raise InputError(f"{where}: {name!r} has options", "ds4x applies every patch with -p1; keep the name alone")
        if pure.is_absolute() or ".." in pure.parts:
            raise InputError(f"{where}: {name!r} leaves the patch folder", "name a file under this series' folder")
        if name in seen:
            raise InputError(f"{where}: {name!r} is listed twice", "delete one of the lines")
        path = series.parent / name
        if path.is_symlink() or not path.resolve().is_relative_to(series.parent.resolve()):
            raise InputError(f"{where}: {name!r} is a symbolic link", "keep each patch as a file in this series' folder")
        if not path.is_file():
            raise InputError(f"{where}: {name!r} not found", "run refresh, or delete the line")
        seen.add(name)
        entries.append(PatchEntry(name=name, path=path, line=number))
    return entries


def subject_of(text: str) -> str:
    message = email.message_from_string(text, policy=email.policy.default)
    return " ".join(str(message.get("Subject", "")).split())


def read_info(entry: PatchEntry) -> PatchInfo:
    """Subject and DEP-3 fields of a format-patch file; refuse ones without them."""
    text = read_text(entry.path)
    message = email.message_from_string(text, policy=email.policy.default)
    subject = subject_of(text)
    if not subject or "\ndiff --git " not in text:
        raise InputError(f"{entry.path}: not a git format-patch file", "recreate it with `refresh`")
    body = str(message.get_payload()).split("\n---\n", 1)[0]
    fields = {m[1]: m[2].strip() for m in map(_FIELD.match, body.splitlines()) if m and m[1] in KNOWN_FIELDS}
    missing = [f for f in REQUIRED_FIELDS if f not in fields]
    if missing:
        raise InputError(
            f"{entry.path}: missing DEP-3 field(s) {', '.join(missing)}",
            "add lines like 'Origin: vendor' and 'Forwarded: no' to the commit message, then refresh",
        )
    return PatchInfo(subject=subject, fields=fields)


def file_name(subject: str) -> str:
    """kebab-case from the subject, never a number: order lives in `series`."""
    subject = re.sub(r"^\[[^]]*\]\s*", "", subject)  # "[PATCH 2/3] " of exported files
    words = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
    return f"{words[:60].rstrip('-')}.patch"


def write_series(series: Path, names: list[str], header_from: Path | None = None) -> None:
    """Keep the leading comment block (the why) of `header_from` (default: the
    series itself), rewrite the list."""
    source = header_from or series
    header = []
    if source.exists():
        for line in source.read_text(encoding="utf-8").splitlines():
            if not line.startswith("#"):
                break
            header.append(line)
    series.write_text("\n".join([*header, *names]) + "\n", encoding="utf-8")
