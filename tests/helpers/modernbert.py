"""Random tiny transformers ModernBERTs, their params in jaxbert's layout, and padded inputs.

TINY has 3 layers with global_attn_every_n_layers 2 (global, local, global) and a window of 8
(4 tokens each side), so the inputs (T = 24) reach past it. Nothing is downloaded.
"""

from __future__ import annotations

import numpy as np

from jaxbert.model.families import FAMILIES
from jaxbert.model.modernbert import ModernBertConfig
from jaxbert.model.modernbert.table import Table
from jaxbert.model.params import unflatten

TINY = dict(vocab_size=100, hidden_size=32, intermediate_size=40, num_hidden_layers=3, num_attention_heads=4,
            global_attn_every_n_layers=2, local_attention=8, max_position_embeddings=64, pad_token_id=0,
            bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)
CLASSES = FAMILIES["modernbert"].class_names()
LENGTH = 24


def tiny_hf(class_name: str, seed: int = 0, attn: str = "eager", **overrides):
    """A random transformers ModernBERT (eval mode); norm weights and every bias are perturbed so
    a misplaced norm or a dropped bias shows in the outputs, and Wqkv is scaled up so that the
    attention scores are O(1): at the init's scale (0.02) attention is near uniform, and a wrong
    rotary theta or window would move the outputs by less than the tolerance."""
    import torch
    import transformers
    kwargs = dict(TINY, num_labels=2 if class_name.endswith("QuestionAnswering") else 3, **overrides)
    config = transformers.ModernBertConfig(**kwargs, attn_implementation=attn)
    torch.manual_seed(seed)
    model = getattr(transformers, class_name)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn_like(p))
            if "Wqkv" in name:
                p.mul_(20.0)
    return model


def config_of(hf) -> ModernBertConfig:
    return ModernBertConfig.from_dict(hf.config.to_dict())


def params_of(hf, class_name: str, scan_layers: bool = False, dtype=None) -> dict:
    """The HF model's tensors placed by the key table (no converter code: the table alone)."""
    sd = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    table = Table(config_of(hf), class_name, scan_layers)
    flat = {}
    for e in table.entries:
        a = sd[e.key].T if e.transform == "transpose" else sd[e.key]
        a = a if dtype is None else a.astype(dtype)
        if e.layer is None:
            flat[e.path] = a
        else:
            flat.setdefault(e.path, np.zeros(table.leaf_shapes[e.path], a.dtype))[e.layer] = a
    return unflatten(flat)


def padded_inputs(class_name: str, batch: int = 3, length: int = LENGTH, seed: int = 0, left: bool = False,
                  pads=((1, 7), (2, 15))):
    """(input_ids, attention_mask) int64: row 0 full; by default row 1 loses 7 tokens, row 2 loses 15
    (more than a local window's reach, so some padded queries see no real key on a sliding layer)."""
    rng = np.random.RandomState(seed)
    shape = (batch, 2, length) if class_name.endswith("MultipleChoice") else (batch, length)
    mask = np.ones(shape, np.int64)
    for row, n in pads:
        if row < batch:
            if left:
                mask[row, ..., :n] = 0
            else:
                mask[row, ..., length - n:] = 0
    ids = np.where(mask == 1, rng.randint(3, TINY["vocab_size"], shape), TINY["pad_token_id"])
    return ids, mask
