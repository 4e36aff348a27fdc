"""The fork's Marlin MXFP4 MoE, as a GPU-resident DeepSeek-V4 layer runs it, against a plain torch
reference, on the GPU machine: the ops build_ops.py --marlin compiled (gptq_marlin_repack through the
fork's prepare_moe_mxfp4_layer_for_marlin, moe_align_block_size, moe_wna16_marlin_gemm, moe_sum
through its fused_marlin_moe) on one layer of Flash's shape (hidden 4096, intermediate 2048, top-6)
with fewer experts, random MXFP4 codes and e8m0 scales, SwiGLU clamped at 10 as DeepSeek-V4's.

Usage (after setup.sh, with the library built): marlin_check.py OPSDIR   -> prints the error, exit 1
if it is above TOLERANCE (relative to the reference's RMS), at each token count in TOKENS."""

import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

HIDDEN, INTER, EXPERTS, TOP_K, LIMIT = 4096, 2048, 16, 6, 10.0
TOKENS = (1, 3, 6, 64)  # decode (K=2 verifies 3 a request, 2 requests 6) and a prefill chunk
TOLERANCE = 0.02
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def dequant(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(E, N, K/2) uint8 MXFP4, two codes a byte, the first in the low nibble; (E, N, K/32) e8m0 ->
    (E, N, K) float32."""
    table = torch.tensor(E2M1 + tuple(-v for v in E2M1), device=codes.device)
    values = torch.stack((table[(codes & 0xF).long()], table[(codes >> 4).long()]), -1).flatten(-2)
    return values * torch.exp2(scales.float() - 127).repeat_interleave(32, -1)


def reference(x, w13, w2, ids, weights) -> torch.Tensor:
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for t in range(x.shape[0]):
        for e, w in zip(ids[t].tolist(), weights[t].tolist()):
            h = w13[e] @ x[t].float()
            gate, up = h[:INTER].clamp(max=LIMIT), h[INTER:].clamp(-LIMIT, LIMIT)
            out[t] += w * (w2[e] @ (torch.nn.functional.silu(gate) * up).to(torch.bfloat16).float())
    return out


def main(ops: Path) -> int:
    sys.path.insert(0, str(Path(__file__).parent))
    import build_ops

    build_ops.load(ops, build_ops.MARLIN)
    from vllm.model_executor.layers.fused_moe.experts.marlin_moe import fused_marlin_moe
    from vllm.model_executor.layers.quantization.utils.marlin_utils_fp4 import prepare_moe_mxfp4_layer_for_marlin
    from vllm.scalar_type import scalar_types

    gen = torch.Generator(device="cuda").manual_seed(0)
    w13 = torch.randint(0, 256, (EXPERTS, 2 * INTER, HIDDEN // 2), generator=gen, device="cuda", dtype=torch.uint8)
    w2 = torch.randint(0, 256, (EXPERTS, HIDDEN, INTER // 2), generator=gen, device="cuda", dtype=torch.uint8)
    s13 = torch.randint(117, 121, (EXPERTS, 2 * INTER, HIDDEN // 32), generator=gen, device="cuda", dtype=torch.uint8)
    s2 = torch.randint(117, 121, (EXPERTS, HIDDEN, INTER // 32), generator=gen, device="cuda", dtype=torch.uint8)
    ref13, ref2 = dequant(w13, s13), dequant(w2, s2)
    t0 = time.time()
    m13, m2, ms13, ms2, _, _ = prepare_moe_mxfp4_layer_for_marlin(
        SimpleNamespace(params_dtype=torch.bfloat16), w13, w2, s13, s2, None, None)
    torch.cuda.synchronize()
    print(f"prepare_moe_mxfp4_layer_for_marlin ({EXPERTS} experts): {time.time() - t0:.2f} s")
    worst = 0.0
    for m in TOKENS:
        x = torch.randn(m, HIDDEN, generator=gen, device="cuda").to(torch.bfloat16)
        ids = torch.stack([torch.randperm(EXPERTS, generator=gen, device="cuda")[:TOP_K] for _ in range(m)]).int()
        weights = torch.rand(m, TOP_K, generator=gen, device="cuda")
        got = fused_marlin_moe(x, m13, m2, None, None, ms13, ms2, weights, ids, scalar_types.float4_e2m1f.id,
                               clamp_limit=LIMIT).float()
        want = reference(x, ref13, ref2, ids, weights)
        err = ((got - want).norm() / want.norm()).item()
        worst = max(worst, err)
        print(f"tokens {m}: relative error {err:.4f} (output RMS {want.pow(2).mean().sqrt().item():.3g})")
    print(f"Marlin MXFP4 MoE against the torch reference: worst {worst:.4f}, tolerance {TOLERANCE}: "
          + ("PASS" if worst <= TOLERANCE else "FAIL"))
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
