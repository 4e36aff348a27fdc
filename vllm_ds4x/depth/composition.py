# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""How ds4x's draft depth composes with vLLM's own adaptive verification: refused at start-up, for now.

Both choose how many drafts each request verifies. vLLM's adaptive verification ranks every
(request, position) draft slot by confidence and admits the best within a token budget priced from
cost tables profiled at start-up, on the device, under variable-length decode graphs; each
request's scheduled drafts bound its slots, so a per-request cap from ``draft_depth`` would be
honoured. But ``draft_depth`` also cuts a batch to one depth for its CUDA graph and (adaptive) times
steps whose verified tokens vLLM's budget then changes, and vLLM's path runs only in model runner v2
with full CUDA graphs on a GPU, where nothing here tests it. Until that composition is built and
measured, the engine refuses the pair, naming both options and the fix (docs/upstream.md).
"""

from vllm_ds4x.depth.policy import DraftDepthError


def refuse_with_adaptive_verification(spec: object) -> None:
    """A speculative config with both ``draft_depth`` and ``enable_adaptive_verification``: one error
    naming both and the fix. A vLLM without adaptive verification (the fork) passes."""
    if getattr(spec, "draft_depth", None) is None or not getattr(spec, "enable_adaptive_verification", False):
        return
    raise DraftDepthError(
        "speculative_config: draft_depth (ds4x) and enable_adaptive_verification (vLLM) both choose how many "
        "drafts each request verifies, and do not run together; set one: remove draft_depth to let vLLM's "
        "adaptive verification size each step, or set enable_adaptive_verification to false to use "
        "draft_depth's policy")
