"""The scheduler, CUDA graph and (with --e2e) end-to-end checks of the
installed (patched) vLLM, in one process: importing vLLM takes minutes on a
small CI machine. Prints one JSON line: {"scheduler": ..., "graphs": ... (not with
--scheduler-only), "e2e": ..., "start_both": ... (with --e2e), "vllm": the vllm package it ran}.

Usage (from the checkout root):
  python -m engine.checks MODEL_DIR [--cpu-platform] [--e2e] [--scheduler-only] [--import MODULE]
--cpu-platform: a Python tree put on PYTHONPATH (the patched fork, not
installed here) cannot find its own version to detect the platform: name it.
--e2e: also run the engines of e2e_check.py.
--scheduler-only: no graph check (the scheduler check runs no model, so a release
whose Python runs on these kernels but whose model code does not can be checked).
--import MODULE: import MODULE first (a shim of the caller's, on PYTHONPATH).
"""

import importlib
import json
import sys

if __name__ == "__main__":
    e2e, scheduler_only = "--e2e" in sys.argv, "--scheduler-only" in sys.argv
    if "--import" in sys.argv:
        importlib.import_module(sys.argv[sys.argv.index("--import") + 1])
    if e2e:
        from engine import e2e_check  # before vLLM: it sets the environment its in-process engines need

    if "--cpu-platform" in sys.argv:
        import vllm.platforms
        from vllm.platforms.cpu import CpuPlatform

        vllm.platforms._current_platform = CpuPlatform()
    import vllm

    from engine import scheduler_check

    model = sys.argv[1]
    out = {"scheduler": scheduler_check.check(model)}
    if not scheduler_only:
        from engine import graph_check

        out["graphs"] = graph_check.check(model)
    if e2e:
        out["e2e"] = e2e_check.check(model)
        out["start_both"] = e2e_check.start_both(model)
    print(json.dumps({**out, "vllm": vllm.__file__}))
