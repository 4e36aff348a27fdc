# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Full decode CUDA graphs for every depth a decode batch can verify.

vLLM captures uniform-decode graphs for one query length, 1 + K_max. With
per-request draft depth the scheduler makes each decode batch verify one
depth d (see ``DraftDepthConfig.verify_depths``), so its query length is
1 + d; without a graph for it the step runs eagerly, and every CPU-placed
MoE layer then synchronizes. This module lists the query lengths to capture
and keeps one graph per (query length, padded request count), so a uniform
batch of any verify depth replays a graph.

Request counts are those of vLLM's own 1 + K_max decode graphs (its capture
sizes, already multiples of 1 + K_max, divided by it), so every query length
pads a batch to the same request counts and stays within the capture limit:
with max_num_seqs 2 and K_max 2 the phase policy (1/2) gets graphs for 2 and 4
tokens (query length 2) and 3 and 6 tokens (query length 3).
"""

from collections.abc import Callable, Iterable, Mapping
from itertools import product
from typing import Any, Generic, Protocol, TypeVar

from vllm.logger import init_logger

from vllm_ds4x.config_views import VllmConfigView
from vllm_ds4x.depth.policy import configured_draft_depth

logger = init_logger(__name__)


class Descriptor(Protocol):
    @property
    def num_reqs(self) -> int | None: ...


D = TypeVar("D", bound=Descriptor)


def decode_query_lens(vllm_config: VllmConfigView, decode_query_len: int) -> list[int] | None:
    """Query lengths for the target's (and a drafter prefill's) decode graphs:
    ``decode_query_len - K_max + d`` for each verify depth d. None when that is
    ``decode_query_len`` alone: vLLM's own graphs, untouched."""
    spec = vllm_config.speculative_config
    k_max = spec.num_speculative_tokens if spec is not None else 0
    raw = getattr(spec, "draft_depth", None)
    if not k_max or not isinstance(raw, Mapping):
        return None  # none configured (or a stand-in config, as vLLM's own tests build: vLLM's graphs)
    depths = configured_draft_depth(raw, k_max).verify_depths(k_max)
    if depths == (k_max,):
        return None
    if vllm_config.parallel_config.data_parallel_size > 1 or getattr(
            vllm_config.compilation_config.pass_config, "enable_sp", False):
        # data-parallel ranks choose their depths independently and pad to each
        # other's token counts (sequence parallelism pads to the TP size): one
        # rank's graph length would not hold for another's batch
        logger.info_once("ds4x: decode CUDA graphs for 1 + K_max only (data or sequence parallelism)")
        return None
    return [decode_query_len - k_max + d for d in depths]


def request_counts(capture_sizes: Iterable[int], decode_query_len: int, max_num_reqs: int) -> list[int]:
    """The request counts of vLLM's decode graphs for decode_query_len."""
    return sorted({s // decode_query_len for s in capture_sizes
                   if s % decode_query_len == 0 and s // decode_query_len <= max_num_reqs})


class DecodeGraphs(Generic[D]):
    """Uniform-decode graph descriptors indexed by (query length, active LoRAs),
    each list ascending in requests; `find` pads a batch to the next captured
    request count of its own query length."""

    def __init__(self, descriptors: Iterable[D],
                 query_len: Callable[[D], int | None] = lambda d: d.uniform_token_count) -> None:  # type: ignore[attr-defined]
        self.by_len: dict[tuple[int | None, int], list[D]] = {}
        for desc in sorted(descriptors, key=lambda d: d.num_reqs or 0):
            key = (query_len(desc), getattr(desc, "num_active_loras", 0))
            self.by_len.setdefault(key, []).append(desc)
        self.by_len = dict(sorted(self.by_len.items(), key=lambda item: (item[0][0] or 0, item[0][1])))
        self.lengths = frozenset(q for q, _ in self.by_len)

    @classmethod
    def build(cls, query_lens: Iterable[int], counts: Iterable[int],
              make: Callable[[int, int], D]) -> "DecodeGraphs[D]":
        counts = list(counts)
        return cls(make(q, r) for q in sorted(set(query_lens)) for r in counts)

    @classmethod
    def for_dispatcher(cls, query_lens: Iterable[int], counts: Iterable[int],
                       lora_cases: Iterable[int]) -> "DecodeGraphs[Any]":
        """Model runner v1's keys: a uniform BatchDescriptor per query length,
        request count and LoRA case, as its dispatcher makes them for 1 + K_max."""
        from vllm.forward_context import BatchDescriptor

        descriptors = (BatchDescriptor(num_tokens=q * r, num_reqs=r, uniform=True, has_lora=loras > 0,
                                       num_active_loras=loras)
                       for q, r, loras in product(set(query_lens), set(counts), set(lora_cases)))
        query_len: Callable[[Any], int] = lambda d: d.num_tokens // d.num_reqs
        return cls(descriptors, query_len)

    def descriptors(self) -> list[D]:
        return [d for descs in self.by_len.values() for d in descs]

    def query_len(self, max_query_len: int, default: int) -> int:
        """Model runner v1: the query length a batch whose longest request has
        max_query_len is uniform at (default: 1 + K_max, vLLM's own)."""
        return max_query_len if max_query_len in self.lengths else default

    def find(self, num_reqs: int, uniform_token_count: int | None, num_active_loras: int = 0) -> D | None:
        for desc in self.by_len.get((uniform_token_count, num_active_loras), ()) if uniform_token_count else ():
            if desc.num_reqs is not None and desc.num_reqs >= num_reqs:
                return desc
        return None

    def summary(self) -> str:
        """`query length 2: 1, 2 requests; query length 3: 1, 2 requests`"""
        return "; ".join(
            f"query length {q}: {', '.join(str(d.num_reqs) for d in descs)} requests"
            for (q, loras), descs in self.by_len.items() if not loras
        )


def report_capture(manager: object, count: int, seconds: float, graph_bytes: int, free_bytes: int,
                   total_bytes: int) -> None:
    """The capture log line, and a warning when the graphs left little room:
    model runner v2 sizes the KV cache before capturing, without reserving
    graph memory."""
    graphs: DecodeGraphs[Any] | None = getattr(manager, "decode_graphs", None)
    layout = f"target decode: {graphs.summary()}" if graphs else "vLLM's default sizes"
    logger.info("Captured %d CUDA graphs in all (%s) in %.0f s, %.2f GiB; %.2f GiB free after capture",
                count, layout, seconds, graph_bytes / (1 << 30), free_bytes / (1 << 30))
    if free_bytes < 0.02 * total_bytes:
        logger.warning("Only %.2f GiB of GPU memory is free after CUDA graph capture: lower "
                       "gpu_memory_utilization by %.2f or draft_depth.graph_depths to keep room for "
                       "activations", free_bytes / (1 << 30), graph_bytes / total_bytes)
