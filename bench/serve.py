"""Start a vLLM OpenAI-compatible server on loopback for a bounded while."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def served(python: Path, model: Path, speculative: dict[str, Any] | None, log: Path, deadline_s: float = 600,
           eager: bool = False) -> Iterator[str]:
    """Yields the base URL (http://127.0.0.1:PORT/v1) once /health answers.
    eager: no torch.compile, vLLM's or its samplers' (tests: the C++ builds take
    minutes on a small machine)."""
    port = free_port()
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
           "--port", str(port), "--dtype", "bfloat16", "--max-model-len", "1024", "--seed", "0",
           "--kv-cache-memory-bytes", str(256 << 20), "--gpu-memory-utilization", "0.05",
           "--reasoning-parser", "deepseek_r1", "--served-model-name", "tiny", "--max-num-seqs", "8"]
    if eager:
        cmd.append("--enforce-eager")
    if speculative is not None:
        cmd += ["--speculative-config", json.dumps(speculative)]
    with log.open("w") as out:
        env = {**os.environ, "TORCHDYNAMO_DISABLE": "1"} if eager else None
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            end = time.monotonic() + deadline_s
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"server exited with {process.returncode}; see {log}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > end:
                    raise TimeoutError(f"no /health after {deadline_s}s; see {log}")
                time.sleep(1)
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
