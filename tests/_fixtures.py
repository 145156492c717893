"""Random tiny transformers models and their outputs, for conversion and parity tests.

Needs torch and transformers (the test extra); nothing is downloaded.
"""

from __future__ import annotations

import numpy as np

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=40, type_vocab_size=2)
ALL_HEADS = ("BertModel", "BertForMaskedLM", "BertForPreTraining", "BertForNextSentencePrediction",
             "BertForSequenceClassification", "BertForTokenClassification",
             "BertForQuestionAnswering", "BertForMultipleChoice", "BertLMHeadModel")


def tiny_hf_model(model_class: str, seed: int = 0, dtype=None, **overrides):
    """A random transformers ``model_class`` (eval mode) on a tiny config.

    BertLMHeadModel gets is_decoder=True. Biases and LayerNorm params are
    randomised too, so a swapped or dropped tensor shows up in the outputs.
    """
    import torch
    import transformers
    kwargs = dict(TINY, **overrides)
    if model_class == "BertLMHeadModel":
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
    shape = (batch, 2, length) if model_class == "BertForMultipleChoice" else (batch, length)
    ids = rng.randint(1, vocab, shape)
    types = rng.randint(0, 2, shape)
    mask = np.ones(shape, np.int64)
    mask[0, ..., -2:] = 0
    return ids, types, mask


def torch_outputs(model, model_class: str, ids, types, mask) -> np.ndarray:
    """The head's main output as float32 NumPy: logits, or last_hidden_state for BertModel."""
    import torch
    with torch.no_grad():
        out = model(torch.tensor(ids), token_type_ids=torch.tensor(types), attention_mask=torch.tensor(mask))
    if model_class == "BertModel":
        value = out.last_hidden_state
    elif model_class == "BertForPreTraining":
        value = out.prediction_logits
    elif model_class == "BertForQuestionAnswering":
        value = torch.stack([out.start_logits, out.end_logits], -1)
    else:
        value = out.logits
    return value.float().numpy()


def jax_outputs(module, params, model_class: str, ids, types, mask) -> np.ndarray:
    import jax.numpy as jnp
    out = module.apply({"params": params}, jnp.asarray(ids), jnp.asarray(types), attention_mask=jnp.asarray(mask))
    value = out.last_hidden_state if model_class == "BertModel" else out.logits
    return np.asarray(value, np.float32)


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
