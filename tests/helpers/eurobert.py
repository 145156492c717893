"""Random tiny transformers EuroBERTs (transformers 5), their params in jaxbert's layout, and padded inputs.

TINY has 3 layers, 4 query heads sharing 2 key/value heads (grouped-query attention), head_dim 8 and the
released models' RoPE theta 250,000. Nothing is downloaded.
"""

from __future__ import annotations

import numpy as np

from jaxbert.model.eurobert import EuroBertConfig
from jaxbert.model.eurobert.table import Table
from jaxbert.model.params import unflatten

TINY = dict(vocab_size=100, hidden_size=32, intermediate_size=40, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            mask_token_id=3, rope_parameters={"rope_type": "default", "rope_theta": 250000.0})
CLASSES = ("EuroBertModel", "EuroBertForMaskedLM", "EuroBertForSequenceClassification",
           "EuroBertForTokenClassification")
LENGTH = 24


def tiny_hf(class_name: str, seed: int = 0, attn: str = "eager", **overrides):
    """A random transformers EuroBERT (eval mode); norm weights and every bias are perturbed so a misplaced
    norm or a dropped bias shows in the outputs, and q_proj, k_proj are scaled up so that the attention
    scores are O(1): at the init's scale (0.02) attention is near uniform, and a wrong theta or a wrong
    grouping of the heads would move the outputs by less than the tolerance."""
    import torch
    import transformers
    kwargs = dict(TINY, num_labels=3, **overrides)
    config = transformers.EuroBertConfig(**kwargs, attn_implementation=attn)
    torch.manual_seed(seed)
    model = getattr(transformers, class_name)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn_like(p))
            if "q_proj" in name or "k_proj" in name:
                p.mul_(8.0)
    return model


def config_of(hf) -> EuroBertConfig:
    return EuroBertConfig.from_dict(hf.config.to_dict())


def params_of(hf, class_name: str, scan_layers: bool = False, dtype=None) -> dict:
    """The HF model's tensors placed by the key table (no converter code: the table alone)."""
    sd = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    table = Table(config_of(hf), class_name, scan_layers)
    flat = {}
    for e in table.entries:
        key = e.key if e.key in sd else table.aliases.get(e.key, e.key)
        a = sd[key].T if e.transform == "transpose" else sd[key]
        a = a if dtype is None else a.astype(dtype)
        if e.layer is None:
            flat[e.path] = a
        else:
            flat.setdefault(e.path, np.zeros(table.leaf_shapes[e.path], a.dtype))[e.layer] = a
    return unflatten(flat)


def padded_inputs(batch: int = 3, length: int = LENGTH, seed: int = 0, pads=((1, 7), (2, 15))):
    """(input_ids, attention_mask) int64: row 0 full, row 1 loses 7 tokens at its end, row 2 loses 15."""
    rng = np.random.RandomState(seed)
    mask = np.ones((batch, length), np.int64)
    for row, n in pads:
        if row < batch:
            mask[row, length - n:] = 0
    ids = np.where(mask == 1, rng.randint(4, TINY["vocab_size"], (batch, length)), TINY["pad_token_id"])
    return ids, mask
