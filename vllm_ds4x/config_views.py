# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""What the hooks read of vLLM's config objects, as Protocols: the few attributes, typed, so mypy checks the seam.

vllm.config's VllmConfig and its sub-configs have these (and much more); spec_scheduling,
decode_graphs, the fork's MoE placement and its micro-batch split name nothing else of them. Pure typing: nothing here
imports vLLM, so the core and the tool's tests type their stand-ins by the same names.
"""

from __future__ import annotations

from typing import Any, Protocol


class HfTextConfigView(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


class ModelConfigView(Protocol):
    @property
    def hf_text_config(self) -> HfTextConfigView: ...
    @property
    def max_model_len(self) -> int: ...


class DraftModelConfigView(Protocol):
    @property
    def hf_config(self) -> object:
        """the draft model's config: n_mtp_layers or num_nextn_predict_layers, where it has them"""


class SpeculativeConfigView(Protocol):
    """vllm.config.SpeculativeConfig; draft_depth, which only a patched vLLM has, is read with getattr."""

    @property
    def num_speculative_tokens(self) -> int: ...
    @property
    def method(self) -> str | None: ...
    @property
    def draft_model_config(self) -> DraftModelConfigView | None: ...


class CacheConfigView(Protocol):
    @property
    def gpu_memory_utilization(self) -> float: ...
    @property
    def cache_dtype(self) -> str: ...


class ParallelConfigView(Protocol):
    @property
    def tensor_parallel_size(self) -> int: ...
    @property
    def pipeline_parallel_size(self) -> int: ...
    @property
    def data_parallel_size(self) -> int: ...


class CudaGraphModeView(Protocol):
    def has_full_cudagraphs(self) -> bool: ...


class CompilationConfigView(Protocol):
    @property
    def pass_config(self) -> object:
        """read with getattr: enable_sp, where this vLLM has it"""
    @property
    def cudagraph_mode(self) -> CudaGraphModeView: ...


class StructuredOutputsConfigView(Protocol):
    @property
    def reasoning_parser(self) -> str | None: ...


class SchedulerConfigView(Protocol):
    @property
    def async_scheduling(self) -> bool: ...
    @property
    def max_num_seqs(self) -> int: ...
    @property
    def max_num_batched_tokens(self) -> int: ...


class VllmConfigView(Protocol):
    """vllm.config.VllmConfig, as the hooks read it."""

    @property
    def model_config(self) -> ModelConfigView: ...
    @property
    def speculative_config(self) -> SpeculativeConfigView | None: ...
    @property
    def num_speculative_tokens(self) -> int: ...
    @property
    def cache_config(self) -> CacheConfigView: ...
    @property
    def parallel_config(self) -> ParallelConfigView: ...
    @property
    def compilation_config(self) -> CompilationConfigView: ...
    @property
    def structured_outputs_config(self) -> StructuredOutputsConfigView: ...
    @property
    def scheduler_config(self) -> SchedulerConfigView: ...
