"""Tiny random-init models built from transformers configs (no download) and one dumped training step.

Shared by make_golden.py (run with the reference's interpreter) and tests/test_api_capture.py (ours):
the same seed, the same inputs, the same step. Only torch and transformers are imported here, never
msprobe, so the module works under either tool.
"""
import json
import os

import torch

MODELS = ("llama", "gpt2", "bert", "t5", "mixtral", "handmade")
BATCH, SEQ, VOCAB = 2, 8, 128


class _Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.act = torch.nn.functional.gelu          # bound at construction (early-bound)

    def forward(self, x):
        x = x.float()                                # returns its input (fp32)
        x.mul_(1.5)                                  # in place on the module's input
        y = self.act(self.lin(x))
        y /= 2.0                                     # C-level dispatch to div_
        return -y + x


class Handmade(torch.nn.Module):
    """No transformers: an in-place op on a module input, an in-place ReLU module, an early-bound
    function, ``-y`` and ``/=``, an op returning its input."""

    def __init__(self):
        super().__init__()
        self.pre = torch.nn.Linear(4, 4)
        self.inner = _Inner()
        self.relu = torch.nn.ReLU(inplace=True)

    def forward(self, x):
        import types
        h = self.pre(x)
        return types.SimpleNamespace(loss=self.relu(self.inner(h) + h).sum())


def build(name):
    """(model, batch dict) for ``name``; random init under a fixed seed."""
    torch.manual_seed(0)
    if name == "handmade":
        model = Handmade()
        return model, {"x": torch.randn(3, 4, generator=torch.Generator().manual_seed(1), requires_grad=True)}
    import transformers as tf
    common = dict(vocab_size=VOCAB)
    if name == "llama":
        cfg = tf.LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             intermediate_size=128, max_position_embeddings=64, **common)
        model = tf.LlamaForCausalLM(cfg)
    elif name == "gpt2":
        cfg = tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=64, **common)
        model = tf.GPT2LMHeadModel(cfg)
    elif name == "bert":
        cfg = tf.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                            max_position_embeddings=64, **common)
        model = tf.BertForMaskedLM(cfg)
    elif name == "t5":
        cfg = tf.T5Config(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
                          decoder_start_token_id=0, **common)
        model = tf.T5ForConditionalGeneration(cfg)
    elif name == "mixtral":
        cfg = tf.MixtralConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               intermediate_size=128, num_local_experts=4, num_experts_per_tok=2,
                               max_position_embeddings=64, **common)
        model = tf.MixtralForCausalLM(cfg)
    else:
        raise ValueError(name)
    if hasattr(model.config, "_attn_implementation"):
        try:
            model.config._attn_implementation = "eager"
        except Exception:
            pass
    model.train()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    labels = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    return model, {"input_ids": ids, "labels": labels}


def config_json(dump_path, level, summary_mode="statistics"):
    return {"task": "statistics", "dump_path": dump_path, "rank": [], "step": [], "level": level,
            "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": summary_mode}}


def run(name, level, dtype, dump_path, extra=None, summary_mode="statistics"):
    """Dump one training step of model ``name`` into ``dump_path`` with whichever msprobe is importable."""
    from msprobe.pytorch import PrecisionDebugger
    os.makedirs(dump_path, exist_ok=True)
    cfg = config_json(dump_path, level, summary_mode)
    cfg.update(extra or {})
    cfg_path = os.path.join(dump_path, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    model, batch = build(name)
    debugger = PrecisionDebugger(config_path=cfg_path)
    torch.manual_seed(2)
    debugger.start(model)
    if dtype == "bf16":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(**batch).loss
    else:
        loss = model(**batch).loss
    loss.backward()
    debugger.stop()
    debugger.step()
    return os.path.join(dump_path, "step0", "rank")


if __name__ == "__main__":
    import sys
    name, level, dtype, out = sys.argv[1:5]
    extra = json.loads(sys.argv[5]) if len(sys.argv) > 5 else None
    print(run(name, level, dtype, out, extra))
