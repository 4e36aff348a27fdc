"""Run in a fresh process: map a real libcudart, then a stub whose name
contains "libcudart" (as TileLang's would be), then import FlashInfer's
cuda_ipc.py from the given file. Prints one JSON line."""

import ctypes
import importlib.util
import json
import sys

cuda_ipc, real, stub = sys.argv[1:4]
# Mappings go top-down, so the library loaded last usually sits lowest and is
# listed first; the caller asserts the order it needs actually happened.
for lib in sys.argv[4:]:
    ctypes.CDLL({"real": real, "stub": stub}[lib])
with open("/proc/self/maps") as f:
    order = [line.split()[-1] for line in f if "cudart" in line]
result: dict[str, object] = {"maps_order": list(dict.fromkeys(order))}
spec = importlib.util.spec_from_file_location("cuda_ipc", cuda_ipc)
assert spec is not None and spec.loader is not None
module = importlib.util.module_from_spec(spec)
try:
    spec.loader.exec_module(module)  # `cudart = CudaRTLibrary()` runs here, as at start-up
except Exception as e:
    result["error"] = f"{type(e).__name__}: {e}"
else:
    result["resolved"] = module.find_loaded_library("libcudart")
    result["has cudaDeviceReset"] = "cudaDeviceReset" in module.cudart.funcs
print(json.dumps(result))
