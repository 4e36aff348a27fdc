"""Run with a patched Lvllmds4-x tree on PYTHONPATH: exercise its real
vllm/envs.py hooks and print one JSON line of what they answered."""

import json
import os

os.environ["LVLLM_MOE_NUMA_ENABLED"] = "1"
import vllm.envs as envs

from vllm_ds4x.hooks import moe_residency
from vllm_ds4x.moe import placement as mp

out: dict[str, object] = {}
for value in ("0,x", "3-1", "-1"):
    os.environ["LVLLM_GPU_RESIDENT_MOE_LAYERS"] = value
    try:
        envs.is_lk_moe_gpu_resident_layer("model.layers.0.ffn.experts")
    except mp.PlacementError as e:  # raised while parsing, before any GPU query
        out[value] = str(e)
for value in ("", "5", "x"):
    os.environ["LVLLM_GPU_PREFETCH_WINDOW"] = value
    try:
        out[f"prefetch {value!r}"] = envs.get_gpu_prefetch_window()
    except mp.PlacementError as e:
        out[f"prefetch {value!r}"] = str(e)
names = ["model.layers.0.ffn.experts", "model.layers.2.ffn.experts", "model.layers.43.ffn.experts"]
for drafts_on_gpu in (True, False):
    moe_residency._placement = mp.Placement(resident=frozenset({0, 1}), draft_resident=drafts_on_gpu,
                                            num_hidden_layers=43, explanation="probe")
    out[f"drafts_on_gpu={drafts_on_gpu}"] = {
        n: [envs.is_lk_moe_gpu_resident_layer(n), envs.is_lk_moe_cpu_layer(n), envs.is_lk_moe_mtp_layer(n)]
        for n in names
    }
print(json.dumps(out))
