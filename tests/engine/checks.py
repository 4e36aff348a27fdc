"""The scheduler and CUDA graph checks of the installed (patched) vLLM, in one
process: importing vLLM takes minutes on a small CI machine. Prints one JSON
line: {"scheduler": ..., "graphs": ..., "vllm": the vllm package it ran}.

Usage: checks.py MODEL_DIR [--cpu-platform]
--cpu-platform: a Python tree put on PYTHONPATH (the patched fork, not
installed here) cannot find its own version to detect the platform: name it.
"""

import json
import sys

if __name__ == "__main__":
    if "--cpu-platform" in sys.argv:
        import vllm.platforms
        from vllm.platforms.cpu import CpuPlatform

        vllm.platforms._current_platform = CpuPlatform()
    import graph_check
    import scheduler_check
    import vllm

    model = sys.argv[1]
    print(json.dumps({"scheduler": scheduler_check.check(model), "graphs": graph_check.check(model),
                      "vllm": vllm.__file__}))
