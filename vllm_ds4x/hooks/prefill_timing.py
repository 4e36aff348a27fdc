# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""measure's GPU prefill job: the timing worker (vllm_ds4x.measure.worker.prefill_worker) with the layer
built and called as the fork builds and calls a GPU-prefill layer, through this package's hook
(vllm_ds4x.hooks.moe_prefill: `configure` before lk_moe builds the layer, `gpu_prefill` for each chunk,
lk_moe's own driver as LK_GPU_PREFILL_ENGINE picks it). measure runs it as
``python -m vllm_ds4x.hooks.prefill_timing --worker JOB`` in the Python with lk_moe and torch, where a GPU
is present: the worker sits below the hooks and does not import them. Imports no vLLM.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from vllm_ds4x.hooks import moe_prefill
from vllm_ds4x.measure import worker
from vllm_ds4x.moe.placement import PREFILL_MIN_ENV


class HookWay:
    """worker.GpuWay through moe_prefill, for the layer worker.PREFILL_LAYER: one fork layer (the object the
    hook keeps its driver on) for every chunk, as the engine keeps one a layer, so lk_moe's driver is made once."""

    def __init__(self) -> None:
        self.layer: SimpleNamespace | None = None

    def configure(self, cfg: Any, min_batch: int) -> None:
        moe_prefill.configure(cfg, worker.PREFILL_LAYER, False, {**os.environ, PREFILL_MIN_ENV: str(min_batch)})

    def engine(self) -> str:
        return moe_prefill.engine_name()

    def caller(self, moe: Any) -> Callable[[Any, Any, Any], Any]:
        if self.layer is None or self.layer.lk_moe is not moe:
            self.layer = SimpleNamespace(layer_name=worker.PREFILL_LAYER, lk_moe=moe)
        experts = self.layer
        return lambda x, w, ids: moe_prefill.gpu_prefill(experts, x, w, ids)


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    print(json.dumps(worker.prefill_worker(json.loads(sys.argv[2]), HookWay())), flush=True)
