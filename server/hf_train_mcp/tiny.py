"""A tiny Qwen2-style model, tokenizer and datasets built in-process: the demo and tests train without the Hub.

Imports transformers/tokenizers: only the demo and tests use this module.
"""

import json
import random
from pathlib import Path

from hf_train_mcp.chat_template import CHATML

TOPICS = ["the sea", "a robot", "bread", "the moon", "rain", "a library", "trains", "music"]


def _question(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return f"What is {a} plus {b}?", str(a + b)


def example_rows(method: str, n: int = 16, seed: int = 0) -> list[dict]:
    """Small, well-formed rows in each method's TRL format."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        question, answer = _question(rng)
        if method == "sft":
            rows.append({"messages": [
                {"role": "user", "content": f"Write one sentence about {topic}."},
                {"role": "assistant", "content": f"Here is a short sentence about {topic}, number {i}."},
            ]})
        elif method in ("dpo", "reward"):
            rows.append({"prompt": f"Say something kind about {topic}.",
                         "chosen": f"{topic.capitalize()} is lovely and worth a visit.",
                         "rejected": f"I do not care about {topic} at all."})
        elif method in ("grpo", "distill"):
            rows.append({"prompt": question, "answer": answer})
        elif method == "kto":
            kind = i % 2 == 0
            rows.append({"prompt": f"Say something about {topic}.",
                         "completion": f"{topic.capitalize()} is lovely." if kind else f"I hate {topic}.",
                         "label": kind})
        else:
            raise ValueError(method)
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def build_tiny_model(folder: Path) -> Path:
    """A 2-layer Qwen2 with random weights and a byte-level BPE tokenizer trained here, saved to `folder`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    if (folder / "config.json").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    corpus = [json.dumps(r) for m in ("sft", "dpo", "grpo") for r in example_rows(m, 64)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(folder)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
    )
    Qwen2ForCausalLM(config).save_pretrained(folder)
    return folder
