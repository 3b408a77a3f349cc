"""Tiny models from ``transformers`` configs: 2 layers, hidden 64, random init under a fixed seed.

Nothing is downloaded: every model comes from a config object built here (no ``from_pretrained``, no
tokenizer), and ``HF_HUB_OFFLINE`` is set so that a transformers code path that would reach the hub fails
instead of fetching. Inputs are made from a seeded generator, so two builds with the same seed give the
same weights and the same batch.

Each :class:`Case` has ``model`` (train mode), ``inputs()`` (the keyword arguments of one forward, labels
included) and ``loss(out)`` (a scalar).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HIDDEN, LAYERS, HEADS, FFN, VOCAB, SEQ, BATCH = 64, 2, 4, 128, 128, 16, 2

#: arch -> (family, transformers class name)
ARCHS = {
    "llama": ("decoder-only, rotary + GQA", "LlamaForCausalLM"),
    "gpt2": ("decoder-only, GPT-2", "GPT2LMHeadModel"),
    "bert": ("encoder-only", "BertForMaskedLM"),
    "t5": ("encoder-decoder", "T5ForConditionalGeneration"),
    "mixtral": ("mixture-of-experts", "MixtralForCausalLM"),
    "vit": ("vision", "ViTForImageClassification"),
}


def transformers_missing():
    """None when transformers is importable, else the reason to skip."""
    try:
        import transformers  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any broken install is a reason to skip
        return f"transformers is not importable ({type(exc).__name__}: {exc}); pip install -e '.[test]'"
    return None


@dataclass
class Case:
    arch: str
    model: object
    inputs: Callable[[], dict]
    loss: Callable[[object], object]


def _config(arch):
    import transformers as tf

    common = dict(vocab_size=VOCAB)
    if arch == "llama":
        return tf.LlamaConfig(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                              num_attention_heads=HEADS, num_key_value_heads=2, max_position_embeddings=64,
                              **common)
    if arch == "gpt2":
        return tf.GPT2Config(n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_inner=FFN, n_positions=64,
                             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=1, eos_token_id=2,
                             **common)
    if arch == "bert":      # dropout 0.1 kept: the same seed gives the same masks, with and without the tool
        return tf.BertConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                             intermediate_size=FFN, max_position_embeddings=64, **common)
    if arch == "t5":
        return tf.T5Config(d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=FFN, num_layers=LAYERS,
                           num_decoder_layers=LAYERS, num_heads=HEADS, dropout_rate=0.0,
                           decoder_start_token_id=0, pad_token_id=0, **common)
    if arch == "mixtral":
        return tf.MixtralConfig(hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                                num_attention_heads=HEADS, num_key_value_heads=2, num_local_experts=4,
                                num_experts_per_tok=2, max_position_embeddings=64, **common)
    if arch == "vit":
        return tf.ViTConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                            intermediate_size=FFN, image_size=32, patch_size=8, num_channels=3, num_labels=10,
                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    raise KeyError(f"unknown arch {arch!r}; known: {sorted(ARCHS)}")


def build(arch, seed=1234, attn="eager"):
    """A fresh :class:`Case` for ``arch``: weights from ``torch.manual_seed(seed)``, inputs from a generator
    seeded with ``seed + 1`` (re-made identically on every ``inputs()`` call)."""
    import torch
    import transformers as tf

    cfg = _config(arch)
    cfg._attn_implementation = attn          # eager: attention weights are a real (partly unused) output
    torch.manual_seed(seed)
    model = getattr(tf, ARCHS[arch][1])(cfg)
    model.train()

    def inputs():
        g = torch.Generator().manual_seed(seed + 1)
        if arch == "vit":
            return {"pixel_values": torch.randn(BATCH, 3, 32, 32, generator=g),
                    "labels": torch.randint(0, 10, (BATCH,), generator=g)}
        ids = torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)
        if arch == "t5":
            return {"input_ids": ids, "labels": torch.randint(1, VOCAB, (BATCH, SEQ // 2), generator=g)}
        if arch == "bert":
            return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
        return {"input_ids": ids, "labels": ids.clone()}

    return Case(arch, model, inputs, lambda out: out.loss)
