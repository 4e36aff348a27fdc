"""A tiny DeepSeek-V4 with a DSpark draft, for the fork's own model classes on the GPU
machine: configs and tokenizer written here, weights made in the engine process
(load_format "dummy"; these seeded weights replace vLLM's random ones), nothing carried.

Target (`DeepseekV4ForCausalLM`): DeepSeek-V4-Flash's config keys and kernel-fixed sizes
(head_dim 512, rope 64, index head 128, yarn rope, fp8 block-128 linears with e8m0
scales, mHC with 4 streams, sliding window 128) with few layers: layer 0 hash-routed
and sliding-window only, layer 1 compressed 4:1 with its indexer, layer 2 compressed
128:1. Every MoE layer has Flash's routed experts: 256 of hidden 4096 and intermediate
2048, top-6, MXFP4 on lk_moe (3.2 GiB a layer in host memory), and a shared expert.
Draft (`DSparkDraftModel`): one draft layer (sliding window, MXFP4 experts), main_proj
over target layers 0-2, a Markov head and a confidence head; embeddings and lm_head
are the target's.

Greedy output is a known cycle (e2e_model.py's): what each layer adds stays small
against the token's embedding (output projections and the experts' down projections
scaled down), mHC's mixes are positive (the streams stay the embedding), and row next(t)
of lm_head is t's embedding. DSpark's Markov head maps the previous token to its
successor (rank-64 random codes, margin far above lm_head's), so its drafts are right
and `DraftFilter` sets acceptance.

DSV4_LAYERS (default 3) gives the target more layers of the same kinds (compressed 4:1 and
128:1 in turn after layer 0), to bring the CPU experts' share of a step near a real box's.

DSV4_ROUTING (default "random": the gates' random weights, as before): "reuse=R,skew=S" gives each
routed target layer engine.locality's router instead, seeded by the layer: every token's experts are
drawn once, walking each cycle in order (so a token repeats each of its predecessor's experts with
chance R, popularity Zipf S), and the layer routes by that table: the target config makes every
layer hash-routed (num_hash_layers), DeepSeek-V4's own routing by a per-token table (tid2eid), which
the routed layers' tables replace. An earlier stand-in built the gates from the table instead, on the
assumption that a token's MoE input stays near its embedding: on the GPU the input's cosine to it
was -0.005 and no row routed as the table says (bench/results/h100-dsv4-e2e-pool-r038). Layer 0 keeps
its random hash table and DSpark's draft layer its random gate. `routing()` gives the table and
`RouteCheck` counts, in every eager MoE call, the rows whose experts are their token's.

DSV4_RESIDENT (default "0,1", the user's LVLLM_GPU_RESIDENT_MOE_LAYERS on the RTX 5090; "none"
turns it off): the target layers whose routed experts stay on the GPU, in the fork's MXFP4 MoE
path (Marlin, its kernels compiled by build_ops.py --marlin); dsv4_setup.sh exports it as
LVLLM_GPU_RESIDENT_MOE_LAYERS after `resident_layers` checked it. At least one target layer stays
on lk_moe, so that its cpu_decode is still captured in the graphs (at 3 layers: layer 2, the
128:1 compressed one; layer 0, hash-routed, is resident with layer 1). DSpark's draft layer stays
on lk_moe (dsv4_setup.sh: LVLLM_GPU_RESIDENT_DRAFT_LAYERS=0).

Usage: dsv4_model.py DEST   -> DEST/target, DEST/draft (configs and tokenizer)"""

import json
import os
import re
import sys
import zlib
from pathlib import Path
from typing import ClassVar

import torch
from e2e_model import CYCLES, END_THINK, THINK, VOCAB, successor

NOISE_TOKEN = VOCAB - 1  # DSpark's parallel-drafting token: outside both cycles
MARKOV_RANK = 64
LAYERS = 3
TARGET_LAYERS_FOR_DRAFT = [0, 1, 2]
HEAD_SCALE = 1 / 64  # lm_head rows: the target's margin ~64 logits
MARKOV_SCALE = 4.0  # the Markov head's margin ~MARKOV_RANK * MARKOV_SCALE, over lm_head's
SCALE_BYTES = {"normal": 121, "small": 100}  # e8m0: 2^(b-127); 'small': outputs that must not move the stream
EXPERT_SCALE_BYTES = {"w13": 119, "w2": 100}

CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "torch_dtype": "bfloat16",
    "tie_word_embeddings": False, "vocab_size": VOCAB, "bos_token_id": 0, "eos_token_id": 0,
    "hidden_size": 4096, "num_hidden_layers": LAYERS, "rms_norm_eps": 1e-6, "hidden_act": "silu",
    "num_attention_heads": 64, "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64,
    "q_lora_rank": 256, "o_groups": 8, "o_lora_rank": 128, "sliding_window": 128,
    "compress_ratios": [0, 4, 128], "rope_theta": 10000, "compress_rope_theta": 160000,
    "max_position_embeddings": 16384,
    "rope_scaling": {"type": "yarn", "rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 4096,
                     "beta_fast": 32, "beta_slow": 1},
    "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512,
    "n_routed_experts": 256, "num_experts_per_tok": 6, "moe_intermediate_size": 2048, "n_shared_experts": 1,
    "norm_topk_prob": True, "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc",
    "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "num_hash_layers": 1,
    "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "num_nextn_predict_layers": 1, "expert_dtype": "fp4",
    "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                            "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
}
DRAFT = {**CONFIG, "dspark_target_layer_ids": TARGET_LAYERS_FOR_DRAFT, "dspark_markov_rank": MARKOV_RANK,
         "n_mtp_layers": 1, "dspark_noise_token_id": NOISE_TOKEN, "num_nextn_predict_layers": 1}


def configs(layers: int, knobs: dict[str, float] | None = None) -> tuple[dict, dict]:
    """The target's and the draft's config for a target of `layers` layers (at least 3); with locality
    `knobs`, every target layer routes by its token's row of a table (DeepSeek-V4's hash routing, tid2eid)."""
    if layers < LAYERS:
        raise ValueError(f"DSV4_LAYERS={layers}: at least {LAYERS} (one layer of each attention kind)")
    ratios = [0] + [4 if i % 2 else 128 for i in range(1, layers)]
    more = {"num_hidden_layers": layers, "compress_ratios": ratios}
    tables = {"num_hash_layers": layers} if knobs else {}
    return {**CONFIG, **more, **tables}, {**DRAFT, **more}


def routing_knobs(value: str | None) -> dict[str, float] | None:
    """DSV4_ROUTING -> {"reuse": R, "skew": S}, or None for the gates' random weights."""
    if value in (None, "", "random"):
        return None
    try:
        knobs = {k.strip(): float(v) for k, v in (part.split("=", 1) for part in value.split(","))}
    except ValueError:
        knobs = {}
    if set(knobs) != {"reuse", "skew"}:
        raise ValueError(f"DSV4_ROUTING={value!r}: 'random' or 'reuse=R,skew=S' (e.g. reuse=0.38,skew=0.8)")
    return knobs


def routing(layer: int, knobs: dict[str, float]) -> list[list[int]]:
    """Layer `layer`'s experts for every token: engine.locality's router walking the reasoning cycle,
    then the answer cycle, then every other token, seeded by the layer."""
    from engine.locality import Router

    router = Router(CONFIG["n_routed_experts"], CONFIG["num_experts_per_tok"], seed=layer, **knobs)
    order = [*CYCLES["reasoning"], *CYCLES["answer"]]
    order += [t for t in range(VOCAB) if t not in set(order)]
    table: list[list[int]] = [[] for _ in range(VOCAB)]
    for t in order:
        table[t] = router.token()
    return table


def routed_layers() -> list[int]:
    """The target layers the locality router routes (the hash-routed ones keep their tables)."""
    return list(range(CONFIG["num_hash_layers"], int(os.environ.get("DSV4_LAYERS", LAYERS))))


RESIDENT = "0,1"  # DSV4_RESIDENT's default: the user's LVLLM_GPU_RESIDENT_MOE_LAYERS


def resident_layers(value: str | None, layers: int) -> list[int]:
    """DSV4_RESIDENT -> the target layers kept on the GPU (LVLLM_GPU_RESIDENT_MOE_LAYERS's grammar:
    N, A-B, lists, none), checked against a target of `layers` layers: each one of them, and at
    least one layer left on lk_moe (the harness checks its cpu_decode in the graphs)."""
    from vllm_ds4x.moe.placement import parse_layers

    selection = parse_layers(value, var="DSV4_RESIDENT")
    if selection.mode != "layers":
        raise ValueError(f"DSV4_RESIDENT={value!r}: name the layers (e.g. {RESIDENT}); {selection.mode} would leave "
                         f"the harness no lk_moe layer to check, or a choice of its own")
    chosen = sorted(selection.layers)
    if chosen and chosen[-1] >= layers:
        raise ValueError(f"DSV4_RESIDENT={value!r}: the target has layers 0-{layers - 1} (DSV4_LAYERS={layers})")
    if len(chosen) >= layers:
        raise ValueError(f"DSV4_RESIDENT={value!r}: every target layer on the GPU leaves no lk_moe layer, whose "
                         f"cpu_decode the harness checks in the graphs; keep one on lk_moe or raise DSV4_LAYERS")
    return chosen


def moe_layers(placement: dict[str, bool], layers: int) -> dict[str, list[int]]:
    """The fork's own answers (RoutedExperts' is_lk_moe_gpu_resident_layer, by layer name) -> the
    target's and the draft's MoE layers on the GPU ("resident") and on lk_moe; draft layers are
    named model.layers.{layers + i}."""
    out: dict[str, list[int]] = {"resident": [], "lk_moe": [], "draft_resident": [], "draft_lk_moe": []}
    for name, resident in placement.items():
        found = re.search(r"layers\.([0-9]+)\.", name)
        if not found:
            raise ValueError(f"MoE layer name {name!r} has no layer index")
        index = int(found[1])
        key = ("draft_" if index >= layers else "") + ("resident" if resident else "lk_moe")
        if index not in out[key]:
            out[key].append(index)
    return {k: sorted(v) for k, v in out.items()}


def write(dest: Path) -> None:
    from engine.tiny_model import tokenizer

    layers = int(os.environ.get("DSV4_LAYERS", LAYERS))
    resident_layers(os.environ.get("DSV4_RESIDENT", RESIDENT), layers)  # a bad value stops the run here
    knobs = routing_knobs(os.environ.get("DSV4_ROUTING"))  # a bad value stops the run here too
    for name, config in zip(("target", "draft"), configs(layers, knobs), strict=True):
        tok = tokenizer(dest / name)
        assert len(tok) <= VOCAB and tok.convert_tokens_to_ids(["<think>", "</think>"]) == [THINK, END_THINK]
        (dest / name / "config.json").write_text(json.dumps(config, indent=1))
        (dest / name / "generation_config.json").write_text(json.dumps({"eos_token_id": 0}))


# ---- weights, in the engine process (a replacement for DummyModelLoader.load_weights)


def _gen(name: str) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(name.encode()))


def _small(name: str) -> bool:
    """What writes into the residual streams: kept far below the embedding."""
    return any(part in name for part in ("wo_b", "down_proj", "w2_weight"))


def _scale(name: str, param: torch.Tensor) -> None:
    """fp8 block scales and MXFP4 scales, as e8m0 bytes or as the float they encode."""
    if "w13_weight_scale" in name or "w2_weight_scale" in name:
        byte = EXPERT_SCALE_BYTES["w2" if "w2_" in name else "w13"]
    else:
        byte = SCALE_BYTES["small" if _small(name) else "normal"]
    if param.dtype in (torch.uint8, torch.int8):
        param.fill_(byte)
    elif param.dtype == getattr(torch, "float8_e8m0fnu", None):
        param.view(torch.uint8).fill_(byte)
    else:
        param.fill_(2.0 ** (byte - 127))


def _fill(name: str, param: torch.Tensor) -> None:
    gen = _gen(name)
    with torch.no_grad():
        if "scale" in name and ("weight_scale" in name or param.dtype != torch.float32 or param.dim() > 1):
            _scale(name, param)
        elif param.dtype in (torch.uint8, torch.int8):  # packed MXFP4 codes: one expert's, repeated
            one = torch.randint(0, 256, param.shape[1:], generator=gen, dtype=torch.uint8)
            param.view(torch.uint8).copy_(one.expand_as(param).to(param.device))
        elif "tid2eid" in name:  # hash routing: distinct experts per token
            rows = [torch.randperm(CONFIG["n_routed_experts"], generator=gen)[: param.shape[1]] for _ in range(param.shape[0])]
            param.copy_(torch.stack(rows).to(param.dtype))
        elif name.endswith("norm.weight") or name.endswith("_scale") or name.endswith(".scale"):
            param.fill_(1.0)
        elif any(k in name for k in ("attn_sink", "e_score_correction_bias", "_base")):
            param.zero_()
        elif param.dtype == torch.float8_e4m3fn:
            param.copy_(torch.randn(param.shape, generator=gen).clamp(-4, 4).to(param.dtype))
        else:
            std = 1.0 if ("embed" in name or name.endswith("ffn.gate.weight")) else 1e-4 if _small(name) else 1e-2
            param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float32).to(param.device) * std)


def _cycle_heads(params: dict[str, torch.nn.Parameter]) -> None:
    """lm_head row next(t) = t's embedding; the Markov head maps t to next(t)."""
    nxt = torch.tensor(successor())
    embed, head = params.get("model.embed_tokens.weight"), params.get("lm_head.weight")
    if embed is not None and head is not None:
        rows = torch.zeros(head.shape, dtype=torch.float32)
        rows[: len(nxt)].index_add_(0, nxt, embed.data.float().cpu()[: len(nxt)] * HEAD_SCALE)
        head.data.copy_(rows.to(head.dtype))
    w1, w2 = params.get("model.markov_head.markov_w1.weight"), params.get("model.markov_head.markov_w2.weight")
    if w1 is not None and w2 is not None:
        codes = torch.randn(len(nxt), MARKOV_RANK, generator=_gen("markov"), dtype=torch.float32)
        w1.data.zero_()[: len(nxt)] = codes.to(w1.dtype).to(w1.device)
        rows = torch.zeros(w2.shape, dtype=torch.float32)
        rows[: len(nxt)].index_add_(0, nxt, codes * MARKOV_SCALE)
        w2.data.copy_(rows.to(w2.dtype))


def _embedding() -> torch.Tensor:
    """The token embedding as _fill makes it (the MoE input's direction), unit rows."""
    embed = torch.randn((VOCAB, CONFIG["hidden_size"]), generator=_gen("model.embed_tokens.weight"))
    return embed / embed.norm(dim=1, keepdim=True)


def _locality_table(name: str, param: torch.Tensor, knobs: dict[str, float]) -> None:
    """A routed layer's hash table (tid2eid): row t = the experts `routing` gives token t."""
    layer = int(re.search(r"layers\.([0-9]+)\.", name)[1])
    param.copy_(torch.tensor(routing(layer, knobs), dtype=param.dtype).to(param.device))


class RouteCheck:
    """Counts, per routed layer, the eager MoE calls' rows whose top-k experts are their token's in
    `routing` (a forward pre-hook on each DeepseekV4MoE: prefill runs eager, decode graphs run no hook)."""

    rows: ClassVar[dict[int, list[float]]] = {}  # layer -> [rows agreeing, seen, experts agreeing, cosines]

    @classmethod
    def install(cls, model: torch.nn.Module, knobs: dict[str, float]) -> None:
        tables = {layer: torch.tensor(routing(layer, knobs)) for layer in routed_layers()}
        for name, module in model.named_modules():
            found = re.search(r"layers\.([0-9]+)\.ffn$", name)
            if found and int(found[1]) in tables and hasattr(module, "gate"):
                # before the call: the layer may write its output over its input (in-place experts)
                module.register_forward_pre_hook(cls._hook(int(found[1]), tables[int(found[1])]), with_kwargs=True)

    @classmethod
    def _hook(cls, layer: int, table: torch.Tensor):
        embed = _embedding()
        def check(module, args, kwargs) -> None:
            hidden, ids = args[0], args[1] if len(args) > 1 else kwargs.get("input_ids")
            if ids is None or (hidden.is_cuda and torch.cuda.is_current_stream_capturing()):
                return
            routed = getattr(module.gate, "tid2eid", None)  # a hash-routed layer: its table, else the gate's top-k
            top = (routed[ids.long()] if routed is not None else
                   module.gate(hidden)[0].float().topk(table.size(1), dim=-1).indices).long().sort(dim=-1).values
            want = table.to(top.device)[ids.long()].sort(dim=-1).values
            seen = cls.rows.setdefault(layer, [0, 0, 0, 0.0])
            seen[0] += int((top == want).all(dim=-1).sum())
            seen[1] += int(ids.numel())
            seen[2] += int((top.unsqueeze(-1) == want.unsqueeze(-2)).any(-1).sum())
            unit = hidden.float() / hidden.float().norm(dim=-1, keepdim=True)
            seen[3] += float((unit * embed.to(hidden.device)[ids.long()]).sum())  # the input's cosine to its token
        return check

    @classmethod
    def agreement(cls) -> dict[str, dict[str, float]]:
        """Per layer: the share of rows routed exactly as the table says, and of their experts; the
        MoE input's mean cosine to its token's embedding (what the gate's construction relies on)."""
        return {str(layer): {"rows": ok / seen, "experts": shared / (seen * CONFIG["num_experts_per_tok"]),
                             "cosine": cosine / seen}
                for layer, (ok, seen, shared, cosine) in sorted(cls.rows.items()) if seen}


def init_weights(model: torch.nn.Module) -> None:
    params = dict(model.named_parameters())
    knobs = routing_knobs(os.environ.get("DSV4_ROUTING"))
    target = any(n.endswith("embed_tokens.weight") for n in params)
    for name, param in params.items():
        _fill(name, param.data)
        found = re.search(r"layers\.([0-9]+)\.ffn\.gate\.tid2eid$", name)
        if knobs and target and found and int(found[1]) in routed_layers():
            _locality_table(name, param.data, knobs)
    for name, buf in model.named_buffers():
        if "tid2eid" in name:
            _fill(name, buf)
    _cycle_heads(params)
    if knobs and target:
        RouteCheck.install(model, knobs)


def install_loader() -> None:
    from vllm.model_executor.model_loader import dummy_loader

    def load_weights(self, model, model_config):
        init_weights(model)

    dummy_loader.DummyModelLoader.load_weights = load_weights


if __name__ == "__main__":
    write(Path(sys.argv[1]))
    print(sys.argv[1])
