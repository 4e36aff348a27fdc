"""lk_moe MOE_BF16 against a plain reference of the same routed-MoE layer.

cpu: `cpu_prefill` on host buffers, reference in float32 numpy from the same
bf16 values (the GPU-resident path's math: silu(x Wg) * (x Wu), then W2, summed
with the routing weights). gpu: `cpu_decode` fed from CUDA tensors on a CUDA
stream, reference computed by torch on the GPU. Prints one JSON line per case.
Runs under the Python that has lk_moe (cp312 only); imports nothing of ds4x.
Usage, from the checkout root: python -m engine.lk_moe_check {cpu,gpu}
"""

import json
import sys
from typing import Any

import lk_moe
import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16


def layer(experts: int, hidden: int, inter: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w13 = (rng.standard_normal((experts, 2 * inter, hidden)) / np.sqrt(hidden)).astype(BF16)  # gate rows, then up
    w2 = (rng.standard_normal((experts, hidden, inter)) / np.sqrt(inter)).astype(BF16)
    return w13, w2


def config(experts: int, top_k: int, hidden: int, inter: int, max_tokens: int) -> "lk_moe.MOEConfigV2":
    cfg = lk_moe.MOEConfigV2()  # the fields Lvllmds4-x's routed_experts.py sets for MOE_BF16
    cfg.num_processes, cfg.process_id, cfg.gpu_id = 1, 0, 0
    cfg.has_gate_proj = True
    cfg.expert_num, cfg.top_k = experts, top_k
    cfg.hidden_size, cfg.intermediate_size = hidden, inter
    cfg.max_batch_size, cfg.max_num_seqs = max_tokens, max_tokens
    cfg.stride, cfg.group_min_len, cfg.group_max_len = 32, 10, max_tokens
    cfg.activation_type = 0  # silu
    cfg.use_gpu_prefill = False
    return cfg


def reference(x: np.ndarray, ids: np.ndarray, weights: np.ndarray, w13: np.ndarray, w2: np.ndarray) -> np.ndarray:
    inter = w2.shape[2]
    xf, w13f, w2f = (a.astype(np.float32) for a in (x, w13, w2))
    out = np.zeros((x.shape[0], w2.shape[1]), np.float32)
    for t in range(x.shape[0]):
        for e, w in zip(ids[t], weights[t]):
            gate_up = w13f[e] @ xf[t]
            gate, up = gate_up[:inter], gate_up[inter:]
            act = (gate / (1 + np.exp(-gate)) * up).astype(BF16).astype(np.float32)  # bf16 intermediate
            out[t] += w * (w2f[e] @ act)
    return out


def routing(tokens: int, experts: int, top_k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = np.stack([rng.choice(experts, top_k, replace=False) for _ in range(tokens)]).astype(np.int32)
    weights = rng.random((tokens, top_k)).astype(np.float32)
    return ids, weights / weights.sum(1, keepdims=True)


def compare(got: np.ndarray, want: np.ndarray) -> dict[str, float]:
    err = np.abs(got - want)
    scale = float(np.abs(want).max())
    return {"max_abs_err": float(err.max()), "ref_max": scale, "rel_err": float(err.max() / scale),
            "cosine": float((got * want).sum() / np.sqrt((got * got).sum() * (want * want).sum()))}


def prepare(case: dict[str, int]) -> tuple[np.ndarray, np.ndarray, Any, np.ndarray, np.ndarray, np.ndarray]:
    """The layer, lk_moe's engine over it, and one batch of routed tokens."""
    E, H, I, k, n = case["experts"], case["hidden"], case["inter"], case["top_k"], case["tokens"]
    w13, w2 = layer(E, H, I, seed=1)
    moe = lk_moe.MOE_BF16(config(E, k, H, I, 64), w13.ctypes.data, w2.ctypes.data, 0, 0, 0, 0)
    ids, weights = routing(n, E, k, seed=n * 100 + k)
    x = np.random.default_rng(n).standard_normal((n, H)).astype(BF16)
    return w13, w2, moe, ids, weights, x


def run_cpu(case: dict[str, int]) -> dict[str, float]:
    w13, w2, moe, ids, weights, x = prepare(case)
    n, k = case["tokens"], case["top_k"]
    out = np.full((n, case["hidden"]), np.nan, np.float32)  # must be overwritten
    moe.cpu_prefill(n, k, ids.ctypes.data, weights.ctypes.data, x.ctypes.data, out.ctypes.data)
    return compare(out, reference(x, ids, weights, w13, w2))


def run_gpu(case: dict[str, int]) -> dict[str, float]:
    import torch

    w13, w2, moe, ids, weights, x = prepare(case)
    H, I, k, n = case["hidden"], case["inter"], case["top_k"], case["tokens"]
    dev = torch.device("cuda")
    x_gpu = torch.from_numpy(x.view(np.uint16).astype(np.int16)).view(torch.bfloat16).to(dev)
    ids_gpu = torch.from_numpy(ids).to(dev)
    w_gpu = torch.from_numpy(weights).to(dev)
    out_gpu = torch.full((64, H), float("nan"), dtype=torch.float32, device=dev)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        moe.cpu_decode(stream.cuda_stream, n, k, x_gpu.data_ptr(), ids_gpu.data_ptr(), w_gpu.data_ptr(), out_gpu.data_ptr())
    stream.synchronize()
    # reference on the GPU: the resident path's math in torch
    w13_t = torch.from_numpy(w13.view(np.uint16).astype(np.int16)).view(torch.bfloat16).to(dev).float()
    w2_t = torch.from_numpy(w2.view(np.uint16).astype(np.int16)).view(torch.bfloat16).to(dev).float()
    gate_up = torch.einsum("tkoh,th->tko", w13_t[ids_gpu.long()], x_gpu.float())
    act = (torch.nn.functional.silu(gate_up[..., :I]) * gate_up[..., I:]).bfloat16().float()
    want = (torch.einsum("tkhi,tki->tkh", w2_t[ids_gpu.long()], act) * w_gpu[..., None]).sum(1)
    return compare(out_gpu[:n].cpu().numpy(), want.cpu().numpy())


CASES = [{"experts": 16, "hidden": 512, "inter": 256, "top_k": k, "tokens": n} for k in (2, 6) for n in (1, 3, 8, 33)]

if __name__ == "__main__":
    run = run_gpu if sys.argv[1:] == ["gpu"] else run_cpu
    for case in CASES:
        print(json.dumps({**case, **run(case)}), flush=True)
