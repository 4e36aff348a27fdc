# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Which routed-MoE layers stay on the GPU: parsed once, validated, budgeted, explained.

``LVLLM_GPU_RESIDENT_MOE_LAYERS`` grammar (whitespace allowed anywhere)::

    N | A-B | N,A-B,...      those layer indices (the fork's old forms, same meaning)
    all | none              every MoE layer / no MoE layer
    auto                    as many as fit the VRAM budget left after weights and KV cache
    auto:<GiB>              as many as fit <GiB> of VRAM (per GPU)

``auto`` ranks layers by expected distinct experts per verify step, from the
expert counts in ``LVLLM_GPU_RESIDENT_ROUTING_STATS`` (JSON ``{"<layer>":
[count per expert, ...]}``) when given, else lowest index first.

Draft layers (MTP / DSpark, named ``model.layers.{num_hidden_layers + i}``) are
resident by default when a draft model is on, and counted in the budget;
``LVLLM_GPU_RESIDENT_DRAFT_LAYERS=0`` puts them with the CPU layers.

Pure Python on purpose: the ds4x ``plan`` command loads this same file to
answer "what fits" before anyone downloads 155 GiB.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

LAYERS_ENV = "LVLLM_GPU_RESIDENT_MOE_LAYERS"
DRAFT_ENV = "LVLLM_GPU_RESIDENT_DRAFT_LAYERS"
PREFETCH_ENV = "LVLLM_GPU_PREFETCH_WINDOW"
PREFILL_MIN_ENV = "LVLLM_GPU_PREFILL_MIN_BATCH_SIZE"
ROUTING_ENV = "LVLLM_GPU_RESIDENT_ROUTING_STATS"
DEFAULT_PREFETCH_WINDOW = 3  # the fork declared 1 but defaulted to 3: keep what runs today
GIB = 1024**3
_EXAMPLE = "e.g. 0,1 or 0-3,10 or all, none, auto, auto:6.5"


class PlacementError(ValueError):
    """A resident-layer setting that cannot be honoured; the message says the fix."""


@dataclass(frozen=True)
class Selection:
    """A parsed LVLLM_GPU_RESIDENT_MOE_LAYERS value."""

    mode: str  # "layers" | "all" | "auto"
    layers: frozenset[int] = frozenset()
    budget_gib: float | None = None  # auto:<GiB>; None: derive from the GPU


MAX_LAYER_INDEX = 4095  # no model has more layers; bounds what a range can expand to
_PART = re.compile(r"([0-9]{1,9})(?:-([0-9]{1,9}))?")
_AUTO = re.compile(r"auto(?::([0-9]{1,6}(?:\.[0-9]{1,6})?))?")
_SHOWN = 60  # longer values are cut in messages


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")


def _bad(var: str, value: str, part: str, why: str) -> PlacementError:
    return PlacementError(f"{var}={_shown(value)}: {_shown(part)} {why} ({_EXAMPLE})")


def parse_layers(value: str | None, var: str = LAYERS_ENV) -> Selection:
    """Parse the whole value or raise naming the variable, the bad part, an example."""
    text = "".join((value or "").split()).lower()
    if text in ("", "none"):
        return Selection(mode="layers")
    if text == "all":
        return Selection(mode="all")
    auto = _AUTO.fullmatch(text)
    if auto:
        budget = float(auto[1]) if auto[1] else None
        return Selection(mode="auto", budget_gib=budget)
    if text.startswith("auto:"):
        raise _bad(var, value or "", text[5:], "is not a budget in GiB, e.g. auto:6.5")
    layers: set[int] = set()
    for part in text.split(","):
        found = _PART.fullmatch(part)
        if not found:
            why = "must stand alone" if part in ("all", "none", "auto") else "is not N or A-B"
            raise _bad(var, value or "", part, why)
        start, end = int(found[1]), int(found[2] if found[2] is not None else found[1])
        if start > end:
            raise _bad(var, value or "", part, "runs backwards; write the lower index first")
        if end > MAX_LAYER_INDEX:
            raise _bad(var, value or "", part, f"names a layer past {MAX_LAYER_INDEX}")
        layers.update(range(start, end + 1))
    return Selection(mode="layers", layers=frozenset(layers))


def parse_flag(value: str | None, var: str, default: bool) -> bool:
    text = (value or "").strip().lower()
    if not text:
        return default
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise PlacementError(f"{var}={value!r}: expected 1 or 0")


def parse_positive_int(value: str | None, var: str, default: int, minimum: int = 0) -> int:
    text = (value or "").strip()
    if not text:
        return default
    if not re.fullmatch(r"[0-9]{1,9}", text) or int(text) < minimum:
        raise PlacementError(f"{var}={_shown(value or '')}: expected an integer >= {minimum} (at most 9 digits)")
    return int(text)


_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)")


def layer_index(layer_name: str) -> int:
    """`model.layers.12.ffn.experts` -> 12; `mtp.0.ffn` -> 0 (the fork's old MTP names)."""
    found = _INDEX.search(layer_name) or re.search(r"(?:^|\.)(\d+)(?:\.|$)", layer_name)
    if not found:
        raise PlacementError(f"cannot find a layer index in {layer_name!r}")
    return int(found[1])


def is_draft_layer(layer_name: str, num_hidden_layers: int | None) -> bool:
    """Draft (MTP/DSpark) layers: `mtp.*`, or indices past the target model's layers."""
    if layer_name.startswith("mtp."):
        return True
    return num_hidden_layers is not None and layer_index(layer_name) >= num_hidden_layers


@dataclass(frozen=True)
class ModelShape:
    """What placement needs from a DeepSeek-style config.json."""

    num_layers: int
    moe_layers: tuple[int, ...]
    num_draft_layers: int
    n_routed_experts: int
    top_k: int
    hidden: int
    moe_intermediate: int
    expert_bytes: int
    non_expert_bytes: int
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)

    @property
    def layer_bytes(self) -> int:
        return self.n_routed_experts * self.expert_bytes

    def layer_bytes_per_gpu(self, tp_size: int) -> int:
        """Tensor parallelism splits every expert across the ranks."""
        return self.layer_bytes // tp_size


# Bytes per parameter of routed experts: FP4 (e2m1) with one e8m0 scale per 32.
EXPERT_BYTES_PER_PARAM = {"fp4": 0.5 + 1 / 32, "fp8": 1 + 4 / (128 * 128), "bf16": 2.0}
# KV bytes per cached (compressed) token: DeepSeek-V4 FlashMLA fp8_ds_mla is
# 448 NoPE + 128 RoPE + 8 scale; bf16 stores head_dim values of 2 bytes.
INDEXER_BYTES = 128 + 4  # fp8 indexer key + fp32 scale (C4A layers only)


def kv_token_bytes(head_dim: int, kv_dtype: str) -> int:
    if kv_dtype == "fp8_ds_mla":
        return 584
    if kv_dtype in ("auto", "bf16", "bfloat16"):
        return head_dim * 2
    if kv_dtype.startswith("fp8"):
        return head_dim + 4
    raise PlacementError(f"kv-cache dtype {kv_dtype!r} is not modelled; use fp8_ds_mla, fp8 or auto")


def kv_cache_bytes(config: Mapping[str, Any], max_model_len: int, kv_dtype: str, num_draft_layers: int = 0) -> int:
    """One request's KV cache at max_model_len for DeepSeek-V4 hybrid attention.

    Every layer keeps a sliding window; a layer with compress ratio r > 1 also
    keeps ceil(len / r) compressed entries, and ratio-4 layers an indexer key
    per entry. Draft layers keep the window only. Block rounding is ignored.
    """
    per_token = kv_token_bytes(_optional(config, "head_dim", 512, low=1), kv_dtype)
    window = _optional(config, "sliding_window", 0)
    layers = _int_field(config, "num_hidden_layers", high=MAX_LAYER_INDEX + 1)
    ratios = _ratios(config, layers)
    total = (layers + num_draft_layers) * min(window, max_model_len) * per_token
    for ratio in ratios:
        if ratio > 1:
            entries = math.ceil(max_model_len / ratio)
            total += entries * per_token + (entries * INDEXER_BYTES if ratio == 4 else 0)
    return total


def _int_field(c: Mapping[str, Any], name: str, low: int = 1, high: int = 1 << 24) -> int:
    """A config.json integer, checked before any arithmetic uses it."""
    value = c.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        shown = repr(value)[:40]
        raise PlacementError(f"config.json {name}={shown}: expected an integer in {low}..{high}")
    return value


def _optional(c: Mapping[str, Any], name: str, default: int, low: int = 0, high: int = 1 << 24) -> int:
    """An optional config.json integer (absent or null: `default`)."""
    return default if c.get(name) is None else _int_field(c, name, low, high)


def _ratios(c: Mapping[str, Any], layers: int) -> list[int]:
    """compress_ratios: one integer >= 0 per layer (absent: none compressed)."""
    ratios = c.get("compress_ratios") or [0] * layers
    if not isinstance(ratios, list) or not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r <= 1 << 20
                                               for r in ratios):
        raise PlacementError(f"config.json compress_ratios={repr(ratios)[:40]}: expected a list of integers >= 0")
    return ratios[:layers]


def _routed_experts(c: Mapping[str, Any]) -> int:
    """DeepSeek names them n_routed_experts; Qwen-MoE and most others num_experts."""
    name = "n_routed_experts" if c.get("n_routed_experts") is not None else "num_experts"
    if c.get(name) is None:
        raise PlacementError("config.json has neither n_routed_experts nor num_experts: not a MoE model")
    return _int_field(c, name, high=1 << 16)


def _non_expert_bytes(c: Mapping[str, Any], layers: int) -> int:
    """Dense weights that always live on the GPU: bf16 embeddings and head, FP8
    (128x128 block scales) attention, shared experts, router, compressor and
    indexer. An estimate from the shapes, within a few percent."""
    h, heads, hd = c["hidden_size"], c["num_attention_heads"], _optional(c, "head_dim", 128, low=1)
    q_lora, o_lora = _optional(c, "q_lora_rank", 0) or h, _optional(c, "o_lora_rank", 0) or h
    groups = _optional(c, "o_groups", 0, high=1 << 16) or 1
    attention = h * q_lora + q_lora * heads * hd + h * hd + heads * hd * o_lora + groups * o_lora * h
    shared = _optional(c, "n_shared_experts", 0, high=1 << 16) * 3 * h * c["moe_intermediate_size"]
    router = _routed_experts(c) * h
    per_layer = attention + shared + router
    ratios = _ratios(c, layers)
    idx_heads, idx_dim = _optional(c, "index_n_heads", 0, high=1 << 16), _optional(c, "index_head_dim", 0)
    compressor = sum(2 * h * hd * (2 if r == 4 else 1) for r in ratios if r > 1)
    indexer = sum(q_lora * idx_heads * idx_dim + h * idx_heads + 4 * h * idx_dim for r in ratios if r == 4)
    embeddings = _int_field(c, "vocab_size") * h * (1 if c.get("tie_word_embeddings") else 2)
    fp8 = layers * per_layer + compressor + indexer
    return cast(int, embeddings * 2 + int(fp8 * EXPERT_BYTES_PER_PARAM["fp8"]))


def model_shape(config: Mapping[str, Any], expert_dtype: str | None = None, num_draft_layers: int | None = None) -> ModelShape:
    """From a config.json dict. DeepSeek-V4 has no dense layers; V2/V3 start MoE
    at first_k_dense_replace. Draft layers: num_draft_layers (DSpark ships 3), or
    num_nextn_predict_layers / n_mtp_layers when the config names them."""
    _int_field(config, "num_hidden_layers", high=MAX_LAYER_INDEX + 1)
    for name in ("hidden_size", "moe_intermediate_size", "num_experts_per_tok", "num_attention_heads"):
        _int_field(config, name)
    if _int_field(config, "num_experts_per_tok") > _routed_experts(config):
        raise PlacementError(f"config.json num_experts_per_tok={config['num_experts_per_tok']} is more than its "
                             f"{_routed_experts(config)} routed experts")
    layers = int(config["num_hidden_layers"])
    first_moe = _optional(config, "first_k_dense_replace", 0, high=layers - 1)  # at least one MoE layer
    dtype = expert_dtype or str(config.get("expert_dtype", "fp4"))
    if dtype not in EXPERT_BYTES_PER_PARAM:
        raise PlacementError(f"expert dtype {dtype!r}: expected one of {', '.join(EXPERT_BYTES_PER_PARAM)}")
    params = 3 * config["hidden_size"] * config["moe_intermediate_size"]
    drafts = num_draft_layers
    if drafts is None:
        drafts = _optional(config, "n_mtp_layers", 0, high=64) or _optional(config, "num_nextn_predict_layers", 0, high=64)
    return ModelShape(
        num_layers=layers,
        moe_layers=tuple(range(first_moe, layers)),
        num_draft_layers=drafts,
        n_routed_experts=_routed_experts(config),
        top_k=int(config["num_experts_per_tok"]),
        hidden=int(config["hidden_size"]),
        moe_intermediate=int(config["moe_intermediate_size"]),
        expert_bytes=math.ceil(params * EXPERT_BYTES_PER_PARAM[dtype]),
        non_expert_bytes=_non_expert_bytes(config, layers),
        raw=config,
    )


def expected_distinct(probabilities: Sequence[float], tokens: int, top_k: int) -> float:
    """Expected distinct experts touched by `tokens` tokens, each routed to top_k
    experts drawn with these per-expert frequencies (sums to 1)."""
    draws = tokens * top_k
    return sum(1 - (1 - p) ** draws for p in probabilities)


MAX_COUNT = 1e18  # routed tokens per expert: far above any trace, low enough that sums stay exact enough
_ROUTING_FIX = 'give {"<MoE layer>": [count per expert, ...]}'


def parse_routing(raw: Any, shape: ModelShape) -> dict[int, list[float]]:
    """Routing statistics, checked whole (plan --routing-stats and the engine's
    LVLLM_GPU_RESIDENT_ROUTING_STATS): an object of MoE layers the model has,
    each with one finite count in 0..MAX_COUNT per routed expert."""
    if not isinstance(raw, dict):
        raise PlacementError(f"a JSON {type(raw).__name__}, not an object; {_ROUTING_FIX}")
    routing: dict[int, list[float]] = {}
    for key, counts in raw.items():
        layer = int(key) if key.isascii() and key.isdigit() and len(key) <= 9 else None
        if layer is None or layer not in shape.moe_layers:
            raise PlacementError(f"layer {_shown(key)}: not one of the model's {len(shape.moe_layers)} MoE layers "
                                 f"({shape.moe_layers[0]}..{shape.moe_layers[-1]}); {_ROUTING_FIX}")
        if not isinstance(counts, list) or len(counts) != shape.n_routed_experts:
            got = f"{len(counts)} counts" if isinstance(counts, list) else f"a JSON {type(counts).__name__}"
            raise PlacementError(f"layer {layer}: {got}, not one per routed expert ({shape.n_routed_experts}); "
                                 f"{_ROUTING_FIX}")
        bad = next((i for i, c in enumerate(counts)
                    if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0 <= c <= MAX_COUNT), None)
        if bad is not None:
            raise PlacementError(f"layer {layer}, expert {bad}: {_shown(repr(counts[bad]))} is not a count in "
                                 f"0..{MAX_COUNT:.0e}")
        routing[layer] = [float(c) for c in counts]
    return routing


def layer_scores(shape: ModelShape, tokens: int, routing: Mapping[int, Sequence[float]] | None) -> dict[int, float]:
    """Expected distinct experts per verify step for each MoE layer: the expert
    bytes a resident layer saves reading from RAM every step. Without routing
    statistics all layers score alike (uniform routing)."""
    uniform = [1 / shape.n_routed_experts] * shape.n_routed_experts
    scores = {}
    for layer in shape.moe_layers:
        counts = (routing or {}).get(layer)
        total = sum(counts) if counts else 0
        probs = [c / total for c in counts] if counts and total else uniform
        scores[layer] = expected_distinct(probs, tokens, shape.top_k)
    return scores


@dataclass(frozen=True)
class Budget:
    """The per-GPU memory plan, in bytes."""

    usable: int
    non_expert: int
    kv_cache: int
    reserve: int
    draft_layers: int
    pool: int = 0  # lk_moe's expert pool (vllm_ds4x.moe.pool), when LK_POOL_SLOTS asks for one
    prefill: int = 0  # GPU prefill's staging and scratch (vllm_ds4x.moe.prefill), when it is on

    @property
    def for_resident_layers(self) -> int:
        return (self.usable - self.non_expert - self.kv_cache - self.reserve - self.draft_layers - self.pool
                - self.prefill)


def budget(
    shape: ModelShape,
    *,
    gpu_bytes: int,
    gpu_memory_utilization: float,
    max_model_len: int,
    kv_dtype: str,
    tp_size: int = 1,
    pp_size: int = 1,
    reserve_bytes: int = int(1.5 * GIB),
    draft_resident: bool = True,
    pool_bytes: int = 0,
    prefill_bytes: int = 0,
) -> Budget:
    """Weights and KV are split across TP ranks and PP stages; layers per GPU are a
    layer's bytes / tp. The KV pool holds max_model_len tokens once, as vLLM sizes it:
    concurrent sequences share it (and the engine's `auto` and `plan` both call this)."""
    split = tp_size * pp_size
    kv = kv_cache_bytes(shape.raw, max_model_len, kv_dtype, shape.num_draft_layers)
    drafts = shape.num_draft_layers * shape.layer_bytes // tp_size if draft_resident else 0
    return Budget(
        usable=int(gpu_bytes * gpu_memory_utilization),
        non_expert=shape.non_expert_bytes // split,
        kv_cache=kv // split,
        reserve=reserve_bytes,
        draft_layers=drafts,
        pool=pool_bytes,
        prefill=prefill_bytes,
    )


@dataclass(frozen=True)
class Choice:
    layers: tuple[int, ...]
    reason: str


def choose_auto(shape: ModelShape, budget_bytes: int, tp_size: int, tokens: int,
                routing: Mapping[int, Sequence[float]] | None = None) -> Choice:
    """Highest expected-cost layers first; ties (and no statistics) by lowest index."""
    per_layer = shape.layer_bytes_per_gpu(tp_size)
    fit = max(0, budget_bytes // per_layer) if per_layer else 0
    scores = layer_scores(shape, tokens, routing)
    ranked = sorted(shape.moe_layers, key=lambda layer: (-round(scores[layer], 6), layer))
    chosen = tuple(sorted(ranked[:fit]))
    basis = "routing statistics" if routing else "uniform routing (no statistics given): lowest indices first"
    reason = (
        f"{fit} layer(s) of {per_layer / GIB:.2f} GiB fit {budget_bytes / GIB:.2f} GiB; "
        f"ranked by expected distinct experts per {tokens}-token verify step, {basis}"
    )
    return Choice(layers=chosen, reason=reason)


def validate(selection: Selection, shape: ModelShape, var: str = LAYERS_ENV) -> frozenset[int]:
    """Indices must name MoE layers of this model (per pipeline stage: the fork's names)."""
    if selection.mode == "all":
        return frozenset(shape.moe_layers)
    unknown = sorted(selection.layers - set(shape.moe_layers))
    if unknown:
        lo, hi = shape.moe_layers[0], shape.moe_layers[-1]
        raise PlacementError(
            f"{var}: layer(s) {', '.join(map(str, unknown))} name no MoE layer of this model "
            f"(MoE layers are {lo}-{hi}); draft layers follow {DRAFT_ENV} instead"
        )
    return selection.layers


@dataclass(frozen=True)
class Placement:
    resident: frozenset[int]
    draft_resident: bool
    num_hidden_layers: int
    explanation: str

    def is_resident(self, layer_name: str) -> bool:
        if is_draft_layer(layer_name, self.num_hidden_layers):
            return self.draft_resident
        return layer_index(layer_name) in self.resident


def summary(shape: ModelShape, placement: Placement, plan: Budget, tp_size: int = 1) -> str:
    """One placement summary line for the log."""
    per_layer = shape.layer_bytes_per_gpu(tp_size)
    resident = sorted(placement.resident)
    cpu = [layer for layer in shape.moe_layers if layer not in placement.resident]
    left = plan.for_resident_layers - len(resident) * per_layer
    drafts = f"{shape.num_draft_layers} draft layer(s) {'on GPU' if placement.draft_resident else 'on CPU'}"
    return (
        f"resident MoE layers {_ranges(resident) or 'none'} ({per_layer / GIB:.2f} GiB each, "
        f"{len(resident) * per_layer / GIB:.2f} GiB total); {drafts}; KV cache {plan.kv_cache / GIB:.2f} GiB; "
        f"{left / GIB:.2f} GiB of the budget left; CPU layers {_ranges(cpu) or 'none'}. {placement.explanation}"
    )


def _ranges(values: Iterable[int]) -> str:
    out: list[str] = []
    for v in sorted(values):
        if out and out[-1].split("-")[-1] == str(v - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        else:
            out.append(str(v))
    return ",".join(out)


def place(
    selection: Selection,
    shape: ModelShape,
    plan: Budget,
    *,
    draft_resident: bool,
    tp_size: int = 1,
    verify_tokens: int = 1,
    routing: Mapping[int, Sequence[float]] | None = None,
) -> Placement:
    """Decide, and refuse with numbers what cannot fit."""
    per_layer = shape.layer_bytes_per_gpu(tp_size)
    if selection.mode == "auto":
        room = int(selection.budget_gib * GIB) if selection.budget_gib is not None else plan.for_resident_layers
        if room > max(plan.for_resident_layers, 0):
            raise PlacementError(
                f"{LAYERS_ENV}=auto:{selection.budget_gib:g}: {selection.budget_gib:g} GiB is more than the "
                f"{max(plan.for_resident_layers, 0) / GIB:.2f} GiB left for resident layers on this GPU; use a "
                f"smaller budget or plain auto"
            )
        choice = choose_auto(shape, room, tp_size, verify_tokens, routing)
        return Placement(resident=frozenset(choice.layers), draft_resident=draft_resident,
                         num_hidden_layers=shape.num_layers, explanation=f"auto: {choice.reason}")
    layers = validate(selection, shape)
    need = len(layers) * per_layer
    if need > plan.for_resident_layers:
        raise PlacementError(
            f"{LAYERS_ENV}: {len(layers)} resident layer(s) need {need / GIB:.2f} GiB but only "
            f"{plan.for_resident_layers / GIB:.2f} GiB is left ({plan.usable / GIB:.2f} usable - "
            f"{plan.non_expert / GIB:.2f} weights - {plan.kv_cache / GIB:.2f} KV cache - "
            f"{plan.draft_layers / GIB:.2f} draft layers - {plan.reserve / GIB:.2f} reserve"
            f"{f' - {plan.pool / GIB:.2f} expert pool' if plan.pool else ''}"
            f"{f' - {plan.prefill / GIB:.2f} GPU prefill' if plan.prefill else ''}); "
            f"use auto, fewer layers, a shorter max-model-len or {DRAFT_ENV}=0"
        )
    return Placement(resident=frozenset(layers), draft_resident=draft_resident,
                     num_hidden_layers=shape.num_layers, explanation="as requested")


def decode_ceiling(shape: ModelShape, resident_layers: int, ram_bytes_per_s: float, tokens: int = 1,
                   made: float | None = None) -> float:
    """Tokens/s bound by RAM bandwidth: each CPU layer reads the distinct experts
    a verify step of `tokens` tokens touches (uniform routing); a step makes
    `made` tokens (default: every verified token accepted)."""
    cpu_layers = len(shape.moe_layers) - resident_layers
    distinct = expected_distinct([1 / shape.n_routed_experts] * shape.n_routed_experts, tokens, shape.top_k)
    per_step = cpu_layers * distinct * shape.expert_bytes
    return math.inf if per_step == 0 else ram_bytes_per_s / per_step * (tokens if made is None else made)


def check_prefill_min_batch(min_batch: int, max_num_batched_tokens: int) -> None:
    """A GPU-prefill threshold above the batch limit could never trigger."""
    if min_batch > max_num_batched_tokens:
        raise PlacementError(
            f"{PREFILL_MIN_ENV}={min_batch} exceeds max-num-batched-tokens={max_num_batched_tokens}: "
            f"GPU prefill would never run; lower it or raise --max-num-batched-tokens"
        )
