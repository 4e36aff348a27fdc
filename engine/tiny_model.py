"""Write a tiny random reasoning model for CPU engine tests: a bf16 Qwen2
(hidden 64, 2 layers, one 64-wide head: CPU attention kernels need head_dim 64+) and a byte-level BPE tokenizer whose special tokens are
<|endoftext|>=0, <think>=1, </think>=2, so vLLM's deepseek_r1 reasoning parser
finds them. Deterministic for a given seed. Usage: python -m engine.tiny_model DEST [STD]."""

import json
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIAL = ["<|endoftext|>", "<think>", "</think>"]
CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "Let me think about the file layout before I edit the function.",
    "The answer is to call the tool with the path and the new text.",
    "for i in range(10):\n    print(i)\n",
] * 50
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined and not enable_thinking %}"
    "<think></think>{% else %}<think>{% endif %}{% endif %}"
)


def tokenizer(dest: Path) -> PreTrainedTokenizerFast:
    """The byte-level BPE tokenizer with its chat template, saved in dest."""
    dest.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(CORPUS, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=SPECIAL[0], pad_token=SPECIAL[0],
                                  additional_special_tokens=SPECIAL[1:])
    tok.chat_template = TEMPLATE
    tok.save_pretrained(dest)
    assert tok.convert_tokens_to_ids(SPECIAL) == [0, 1, 2]
    return tok


def build(dest: Path, std: float = 0.1, seed: int = 0) -> None:
    tok = tokenizer(dest)
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=1, num_key_value_heads=1, max_position_embeddings=4096,
                         initializer_range=std, tie_word_embeddings=True, torch_dtype="bfloat16",
                         bos_token_id=0, eos_token_id=0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(dest, safe_serialization=True)
    (dest / "generation_config.json").write_text(json.dumps({"eos_token_id": 0}))


if __name__ == "__main__":
    build(Path(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 0.1)
    print(sys.argv[1])
