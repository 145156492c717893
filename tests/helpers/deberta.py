"""Random tiny transformers DeBERTa-v2 models in two styles, saved once per style and class for a test session.

V2: DeBERTa-v2's shape of config: a conv layer after the first layer (conv_kernel_size 3), absolute positions
added to the input (position_biased_input), token types, separate pos_key_proj / pos_query_proj
(share_att_key false), relative positions up to max_relative_positions 16 without buckets, the lm_predictions
MLM layout (legacy false; untied, as transformers 4.57 needs to run that layout). V3: DeBERTa-v3's: no absolute
positions, share_att_key, log buckets (position_buckets 8 of max_relative_positions 16, so that parity's inputs
reach past the buckets' linear range), norm_rel_ebd layer_norm, the cls.predictions layout (legacy). Both have
pos_att_type p2c|c2p, hidden 32, 2 layers, 4 heads, vocabulary 100. Nothing is downloaded.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

BASE = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=64, relative_attention=True, max_relative_positions=16, hidden_act="gelu",
            pad_token_id=0)
STYLES = {
    "v2": dict(BASE, position_buckets=0, pos_att_type="p2c|c2p", share_att_key=False, position_biased_input=True,
               type_vocab_size=2, conv_kernel_size=3, conv_act="gelu", norm_rel_ebd="none", legacy=False,
               tie_word_embeddings=False),
    "v3": dict(BASE, position_buckets=8, pos_att_type=["p2c", "c2p"], share_att_key=True, norm_rel_ebd="layer_norm",
               position_biased_input=False, type_vocab_size=0, legacy=True),
}
CLASSES = ("DebertaV2Model", "DebertaV2ForMaskedLM", "DebertaV2ForSequenceClassification",
           "DebertaV2ForTokenClassification", "DebertaV2ForQuestionAnswering", "DebertaV2ForMultipleChoice")


def tiny_hf(class_name: str, style: str = "v3", seed: int = 0, **overrides):
    """A random transformers DeBERTa-v2 (eval mode). LayerNorm weights and every bias are perturbed, and the
    projections scaled up (x8), so that a misplaced norm, a dropped bias or a wrong relative index shows: at the
    init's scale (0.02) the attention is near uniform and the relative terms would move the outputs by less than
    the tolerance."""
    import torch
    import transformers
    kwargs = dict(STYLES[style], num_labels=2 if class_name.endswith("QuestionAnswering") else 3, **overrides)
    config = transformers.DebertaV2Config(**kwargs)
    torch.manual_seed(seed)
    model = getattr(transformers, class_name)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn_like(p))
            if "proj" in name:
                p.mul_(8.0)
    return model


_ROOT: list = []  # the session's folder of saved models, made on first use


def saved_model(class_name: str, style: str = "v3") -> Path:
    """The folder of a tiny model of this class and style, saved on first use and shared by every test of the
    session (one folder per process, removed at exit)."""
    if not _ROOT:
        _ROOT.append(Path(tempfile.mkdtemp(prefix="deberta-models-")))
        atexit.register(shutil.rmtree, _ROOT[0], True)
    folder = _ROOT[0] / f"{style}-{class_name}"
    if not folder.exists():
        tiny_hf(class_name, style, seed=5).save_pretrained(folder)
    return folder


def relative_terms_case(buckets: int, max_rel: int, terms: str):
    """(config, rng, scale, pos_key, pos_query) of the relative-terms tests: a one-layer, two-head DeBERTa-v2 config
    with these buckets / max_relative_positions / pos_att_type, and float64 projected tables [2 span, 2, 4] (call it
    inside jax.enable_x64); rng draws the queries and keys."""
    import jax.numpy as jnp
    import numpy as np
    from jaxbert.model.deberta_v2.config import DebertaV2Config
    config = DebertaV2Config(hidden_size=8, num_attention_heads=2, intermediate_size=16, num_hidden_layers=1,
                             vocab_size=10, relative_attention=True, position_buckets=buckets,
                             max_relative_positions=max_rel, pos_att_type=terms, position_biased_input=False)
    span = config.att_span
    rng = np.random.default_rng(buckets + max_rel + len(terms))
    scale = jnp.asarray(np.sqrt(12.0))
    pos_key, pos_query = (jnp.asarray(rng.normal(size=(2 * span, 2, 4))) for _ in range(2))
    return config, rng, scale, pos_key, pos_query


def padded_ids(length: int, real: int, seed: int):
    """(input_ids, attention_mask) [2, length] for the tiny models (vocabulary 100): random ids from 5 on, the
    second row padded (id 0, mask 0) from position `real`."""
    import jax.numpy as jnp
    import numpy as np
    rng = np.random.RandomState(seed)
    ids = rng.randint(5, 100, (2, length))
    mask = np.ones_like(ids)
    mask[1, real:] = 0
    return jnp.asarray(np.where(mask == 1, ids, 0)), jnp.asarray(mask)
