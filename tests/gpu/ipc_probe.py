"""FlashInfer's CUDA IPC path on a real GPU with a libcudart stub mapped first.

export: torch's CUDA runtime, then the stub, then cuda_ipc.py (from a wheel);
allocate, fill with 0x5A, take an IPC handle and have a child process open it.
import: the child: open the handle and read the first bytes back. One JSON line.
"""

import ctypes
import importlib.util
import json
import subprocess
import sys

mode, cuda_ipc_path, stub = sys.argv[1:4]
import torch  # noqa: E402  maps libcudart.so.13 as in the user's process

torch.cuda.init()
ctypes.CDLL(stub)
with open("/proc/self/maps") as f:
    cudart_maps = list(dict.fromkeys(line.split()[-1] for line in f if "cudart" in line))
spec = importlib.util.spec_from_file_location("cuda_ipc", cuda_ipc_path)
assert spec is not None and spec.loader is not None
module = importlib.util.module_from_spec(spec)
try:
    spec.loader.exec_module(module)
except Exception as e:
    print(json.dumps({"maps": cudart_maps, "error": f"{type(e).__name__}: {e}"}))
    sys.exit(0)
cudart = module.cudart
cudart.cudaSetDevice(0)
size = 1 << 20
if mode == "export":
    pointer = cudart.cudaMalloc(size)
    cudart.cudaMemset(pointer, 0x5A, size)
    cudart.cudaDeviceSynchronize()
    handle = cudart.cudaIpcGetMemHandle(pointer)
    raw = bytes(bytearray(handle.internal)).hex()
    child = subprocess.run([sys.executable, __file__, "import", cuda_ipc_path, stub, raw],
                           capture_output=True, text=True)
    opened = json.loads(child.stdout.strip().splitlines()[-1]) if child.stdout.strip() else {"stderr": child.stderr[-2000:]}
    cudart.cudaFree(pointer)
    print(json.dumps({"maps": cudart_maps, "resolved": module.find_loaded_library("libcudart"),
                      "handle_nonzero": any(handle.internal), "child": opened}))
else:
    handle = module.cudaIpcMemHandle_t()
    ctypes.memmove(ctypes.addressof(handle), bytes.fromhex(sys.argv[4]), 128)
    remote = cudart.cudaIpcOpenMemHandle(handle)
    host = (ctypes.c_ubyte * 16)()
    cudart.cudaMemcpy(ctypes.cast(host, ctypes.c_void_p), remote, 16)
    print(json.dumps({"first_bytes": bytes(host).hex()}))
