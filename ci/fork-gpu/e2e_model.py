"""The end-to-end benchmark's stand-in for DeepSeek-V4-Flash, made on the GPU
machine from nothing but configs (load_format "dummy"; these weights replace
vLLM's random ones, seeded, so every engine gets the same model).

Target: a Qwen2-MoE whose routed experts run on lk_moe with DeepSeek-V4-Flash's
expert count, top-k and hidden size, in bf16 with the bytes of its MXFP4 experts
(intermediate 512: 12.6 MB an expert against MXFP4's 13.4 MB; no model class of the
fork outside DeepSeek-V4 hands lk_moe MXFP4 experts with a SiLU MLP), attention and a
shared expert of 2048 on the GPU. Its greedy output is a known cycle: every layer
adds little to the token's embedding (o_proj and down_proj near zero), and row
next(t) of lm_head is t's embedding. Reasoning and answer requests walk two
disjoint cycles, and the tokens of a step differ, so routing is fresh per token.

Drafter: an EAGLE-1 head that drafts next(t) (fc passes the token's embedding
through; embeddings and lm_head are the target's). `DraftFilter` then keeps each
draft with its cycle's probability and replaces the rest with another random token
(drafts.py): acceptance per phase is set, and vLLM's own metrics read it back.

E2E_MODEL=dense: the same target with a dense MLP of 2048 in place of the MoE (a Qwen2 wholly on
the GPU: upstream vLLM's stand-in, which has no lk_moe; ci/fork-gpu/side_by_side).

Usage: e2e_model.py DEST   -> DEST/target, DEST/eagle (configs and tokenizer)"""

import json
import sys
import zlib
from pathlib import Path

import torch

THINK, END_THINK = 1, 2
VOCAB = 384  # engine/tiny_model.py's tokenizer
REASONING_CYCLE = list(range(10, 190))
ANSWER_CYCLE = list(range(190, 370))
CYCLES = {"reasoning": tuple(REASONING_CYCLE), "answer": tuple(ANSWER_CYCLE)}
SHAPE = {"hidden_size": 4096, "num_experts": 256, "num_experts_per_tok": 6, "moe_intermediate_size": 512,
         "shared_expert_intermediate_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4}
ATTENTION = ("hidden_size", "num_attention_heads", "num_key_value_heads")  # the dense target's share of SHAPE


def successor() -> list[int]:
    """next(t) for every token: <think> enters the reasoning cycle, </think> the answer's."""
    nxt = [REASONING_CYCLE[0]] * VOCAB
    for cycle in (REASONING_CYCLE, ANSWER_CYCLE):
        for i, t in enumerate(cycle):
            nxt[t] = cycle[(i + 1) % len(cycle)]
    nxt[END_THINK] = ANSWER_CYCLE[0]
    return nxt


def write(dest: Path, layers: int, dense: bool = False) -> None:
    from engine.tiny_model import tokenizer

    target, eagle = dest / "target", dest / "eagle"
    tok = tokenizer(target)
    assert len(tok) <= VOCAB, len(tok)
    common = {"vocab_size": VOCAB, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu"}
    model = ({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", **common,
              **{k: SHAPE[k] for k in ATTENTION}} if dense else
             {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", **common, **SHAPE,
              "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True})
    (target / "config.json").write_text(json.dumps({
        **model, "intermediate_size": 2048, "num_hidden_layers": layers, "tie_word_embeddings": False}))
    (target / "generation_config.json").write_text(json.dumps({"eos_token_id": 0}))
    eagle.mkdir(parents=True, exist_ok=True)
    h = SHAPE["hidden_size"]
    (eagle / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", **common, "hidden_size": h,
        "intermediate_size": 2 * h, "num_hidden_layers": 1, "num_attention_heads": SHAPE["num_attention_heads"],
        "num_key_value_heads": SHAPE["num_key_value_heads"], "head_dim": h // SHAPE["num_attention_heads"],
        "tie_word_embeddings": False}))


# ---- weights, in the engine process (a replacement for DummyModelLoader.load_weights)


def _std(name: str) -> float | None:
    """None: ones (norms) or zeros (biases); else the std of a seeded normal."""
    if name.endswith("norm.weight") or name.endswith(".bias"):
        return None
    if "o_proj" in name or "down_proj" in name or "experts.w2" in name:
        return 1e-4  # what a layer adds to the residual stream stays small against the embedding
    if name.endswith("embed_tokens.weight") or name.endswith("mlp.gate.weight"):
        return 1.0  # the embedding dominates the last hidden state; the router gives fresh experts per token
    return 0.02


def _fill(name: str, param: torch.Tensor) -> None:
    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    with torch.no_grad():
        if "experts.w" in name and param.dim() == 3:  # lk_moe's: copies of one expert (the cost is the bytes)
            one = torch.randn(param.shape[1:], generator=gen, dtype=torch.float32) * (_std(name) or 0.0)
            param.copy_(one.to(param.dtype).expand_as(param))
        elif name.endswith("fc.weight"):  # EAGLE: [embedding | target hidden] -> the embedding
            h = param.shape[0]
            param.copy_(torch.cat([torch.eye(h, dtype=torch.float32), torch.zeros(h, param.shape[1] - h, dtype=torch.float32)], dim=1))
        elif (std := _std(name)) is None:
            param.fill_(0.0 if name.endswith(".bias") else 1.0)
        else:
            param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float32) * std)


def init_weights(model: torch.nn.Module) -> None:
    """Seeded weights for the target (lm_head row next(t) = t's embedding) or the
    EAGLE head (its embeddings and lm_head are replaced by the target's after this)."""
    params = dict(model.named_parameters())
    for name, param in params.items():
        _fill(name, param.data)
    embed, head = params.get("model.embed_tokens.weight"), params.get("lm_head.weight")
    if embed is not None and head is not None and "model.fc.weight" not in params:
        embed = embed.data.float()
        head.data.zero_()
        rows = torch.zeros(head.shape, device=embed.device, dtype=torch.float32)
        rows.index_add_(0, torch.tensor(successor()[: embed.shape[0]], device=embed.device), embed)
        head.data.copy_(rows.to(head.dtype))


def install_loader() -> None:
    from vllm.model_executor.model_loader import dummy_loader

    def load_weights(self, model, model_config):
        init_weights(model)

    dummy_loader.DummyModelLoader.load_weights = load_weights


if __name__ == "__main__":
    import os

    write(Path(sys.argv[1]), int(os.environ.get("E2E_LAYERS", "12")), dense=os.environ.get("E2E_MODEL") == "dense")
    print(sys.argv[1])
