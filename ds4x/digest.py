"""sha256 of files, the one way ds4x hashes what it pins, caches and builds."""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK = 1 << 20


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read a block at a time (wheels are hundreds of MB)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()
