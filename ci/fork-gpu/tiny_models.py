"""Tiny "loop" targets and random EAGLE-1 heads for the fork's model runner v2.

Targets: bf16 Qwen2 (dense), Qwen2-MoE (8 experts, top-2, shared expert) and Qwen3
(dflash: DFlash drafts for Qwen3 targets only) with init std 0.02, whose greedy output
falls into a loop, and the byte-level BPE tokenizer of
engine/tiny_model.py (<think>=1, </think>=2 for the deepseek_r1 reasoning parser).
Heads mostly draft "repeat the input token" (fc = [I | 1e-4 noise], tiny o/down
projections, embeddings and lm_head shared from the target), so on a loop target most
drafts are accepted and each request has K drafts every step. The DFlash draft (DSpark's
family: one parallel block of K mask tokens, non-causal, over the target's hidden states
of two layers) is random: it drafts K every step, and few are accepted.

Usage: tiny_models.py DEST   -> DEST/{dense,moe,dflash}, DEST/{dense,moe}_eagle, DEST/dflash_draft"""

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import (
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from engine.tiny_model import tokenizer


def target(dest: Path, kind: str) -> None:
    tok = tokenizer(dest)
    torch.manual_seed(0)
    common = {"vocab_size": len(tok), "max_position_embeddings": 4096, "initializer_range": 0.02,
              "tie_word_embeddings": True, "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 0}
    if kind == "dense":
        model = Qwen2ForCausalLM(Qwen2Config(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                             num_attention_heads=2, num_key_value_heads=1, **common))
    elif kind == "dflash":
        model = Qwen3ForCausalLM(Qwen3Config(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                             num_attention_heads=2, num_key_value_heads=1, head_dim=64, **common))
    else:
        model = Qwen2MoeForCausalLM(Qwen2MoeConfig(
            hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
            shared_expert_intermediate_size=256, decoder_sparse_step=1, mlp_only_layers=[],
            norm_topk_prob=True, **common))
    model.to(torch.bfloat16).save_pretrained(dest, safe_serialization=True)
    (dest / "generation_config.json").write_text(json.dumps({"eos_token_id": 0}))


def eagle_head(dest: Path, target_dir: Path, noise: float = 1e-4) -> None:
    t = json.loads((target_dir / "config.json").read_text())
    h, heads, kv = t["hidden_size"], t["num_attention_heads"], t["num_key_value_heads"]
    hd, inter = h // heads, 2 * h
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
        "intermediate_size": inter, "num_hidden_layers": 1, "num_attention_heads": heads,
        "num_key_value_heads": kv, "head_dim": hd, "vocab_size": t["vocab_size"],
        "max_position_embeddings": t["max_position_embeddings"], "rms_norm_eps": t.get("rms_norm_eps", 1e-6),
        "rope_theta": t.get("rope_theta", 10000.0), "hidden_act": "silu", "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 0}))
    g = torch.Generator().manual_seed(1)

    def rnd(*shape: int, std: float = 0.02) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * std).to(torch.bfloat16)

    layer = "layers.0."
    save_file({
        "fc.weight": torch.cat([torch.eye(h), torch.randn(h, h, generator=g) * noise], dim=1).to(torch.bfloat16),
        layer + "self_attn.q_proj.weight": rnd(heads * hd, h),
        layer + "self_attn.k_proj.weight": rnd(kv * hd, h),
        layer + "self_attn.v_proj.weight": rnd(kv * hd, h),
        layer + "self_attn.o_proj.weight": rnd(h, heads * hd, std=0.002),
        layer + "mlp.gate_proj.weight": rnd(inter, h),
        layer + "mlp.up_proj.weight": rnd(inter, h),
        layer + "mlp.down_proj.weight": rnd(h, inter, std=0.002),
        layer + "post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
    }, str(dest / "model.safetensors"), metadata={"format": "pt"})


def dflash_draft(dest: Path, target_dir: Path, layers: int = 1) -> None:
    """qwen3_dflash's DFlashDraftModel: the target's attention shape (one KV-cache group
    with it), fc over the hidden states after target layers 1 and 2; embeddings and
    lm_head are the target's (left out of the file)."""
    t = json.loads((target_dir / "config.json").read_text())
    h, heads, kv, hd, inter = (t["hidden_size"], t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"],
                               t["intermediate_size"])
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.json").write_text(json.dumps({
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": h, "intermediate_size": inter,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
        "vocab_size": t["vocab_size"], "max_position_embeddings": t["max_position_embeddings"],
        "rms_norm_eps": t.get("rms_norm_eps", 1e-6), "rope_parameters": t.get("rope_parameters"),
        "hidden_act": "silu", "attention_bias": False,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 0,
        "dflash_config": {"mask_token_id": t["vocab_size"] - 1, "target_layer_ids": [0, 1]}}))
    g = torch.Generator().manual_seed(2)

    def rnd(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=torch.bfloat16)

    weights = {"fc.weight": rnd(h, 2 * h), "hidden_norm.weight": ones(h), "norm.weight": ones(h)}
    for i in range(layers):
        at, mlp = f"layers.{i}.self_attn.", f"layers.{i}.mlp."
        weights.update({
            at + "q_proj.weight": rnd(heads * hd, h), at + "k_proj.weight": rnd(kv * hd, h),
            at + "v_proj.weight": rnd(kv * hd, h), at + "o_proj.weight": rnd(h, heads * hd),
            at + "q_norm.weight": ones(hd), at + "k_norm.weight": ones(hd),
            mlp + "gate_proj.weight": rnd(inter, h), mlp + "up_proj.weight": rnd(inter, h),
            mlp + "down_proj.weight": rnd(h, inter),
            f"layers.{i}.input_layernorm.weight": ones(h), f"layers.{i}.post_attention_layernorm.weight": ones(h)})
    save_file(weights, str(dest / "model.safetensors"), metadata={"format": "pt"})


if __name__ == "__main__":
    root = Path(sys.argv[1])
    for kind in ("dense", "moe", "dflash"):
        target(root / kind, kind)
        if kind == "dflash":
            dflash_draft(root / "dflash_draft", root / kind)
        else:
            eagle_head(root / f"{kind}_eagle", root / kind)
        print(root / kind)
