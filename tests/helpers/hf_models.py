"""Random tiny transformers models and their outputs, for conversion and parity tests.

Needs torch and transformers (the test extra); nothing is downloaded.
"""

from __future__ import annotations

import numpy as np

from jaxbert.model.bert.config import bert_class_name
from jaxbert.model.registry import HEADS, head, main_output

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=40, type_vocab_size=2)
ALL_HEADS = tuple(name for name, spec in HEADS.items() if spec.family.name == "bert")


def tiny_hf_model(model_class: str, seed: int = 0, dtype=None, **overrides):
    """A random transformers ``model_class`` (eval mode) on a tiny config.

    Decoder classes (BertLMHeadModel) get is_decoder=True. Biases and LayerNorm params are
    randomised too, so a swapped or dropped tensor shows up in the outputs.
    """
    import torch
    import transformers
    kwargs = dict(TINY, **overrides)
    if head(model_class).decoder:
        kwargs.setdefault("is_decoder", True)
    config = transformers.BertConfig(**kwargs)
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(0.1 * torch.randn_like(p))
    if dtype is not None:
        model = model.to(dtype)
    return model


def tiny_inputs(model_class: str, batch: int = 2, length: int = 7, vocab: int = 99, seed: int = 0):
    """(input_ids, token_type_ids, attention_mask) as int64 NumPy, with padding in row 0."""
    rng = np.random.RandomState(seed)
    shape = (batch, 2, length) if head(model_class).choices else (batch, length)
    ids = rng.randint(1, vocab, shape)
    types = rng.randint(0, 2, shape)
    mask = np.ones(shape, np.int64)
    mask[0, ..., -2:] = 0
    return ids, types, mask


def torch_outputs(model, model_class: str, ids, types, mask) -> np.ndarray:
    """The head's main output (see jaxbert.model.registry.main_output) as float32 NumPy."""
    import torch
    with torch.no_grad():
        out = model(torch.tensor(ids), token_type_ids=torch.tensor(types), attention_mask=torch.tensor(mask))
    return main_output(head(model_class), out, torch.stack).float().numpy()


def jax_outputs(module, params, model_class: str, ids, types, mask) -> np.ndarray:
    import jax.numpy as jnp
    out = module.apply({"params": params}, jnp.asarray(ids), jnp.asarray(types), attention_mask=jnp.asarray(mask))
    return np.asarray(main_output(head(bert_class_name(model_class)), out, jnp.stack), np.float32)


ROBERTA_TINY = dict(TINY, type_vocab_size=1, max_position_embeddings=40, pad_token_id=1)


def tiny_roberta_model(model_class: str, seed: int = 0, **overrides):
    """A random transformers RoBERTa / XLM-RoBERTa ``model_class`` (eval mode) on a tiny config,
    its biases and LayerNorms randomised as in tiny_hf_model."""
    import torch
    import transformers
    config_cls = transformers.XLMRobertaConfig if model_class.startswith("XLM") else transformers.RobertaConfig
    config = config_cls(**dict(ROBERTA_TINY, **overrides))
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model
