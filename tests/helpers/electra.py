"""Random tiny transformers ELECTRAs (embedding_size 16 projected to hidden_size 32, 2 layers, vocabulary 99), saved
once per class for the session, and padded inputs. Nothing is downloaded.

Every LayerNorm weight and every bias is perturbed so that a misplaced norm or a dropped bias shows in the outputs
(transformers' init makes them ones and zeros)."""

from __future__ import annotations

import numpy as np
import pytest

TINY = dict(vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=64, type_vocab_size=2, pad_token_id=0)
CLASSES = ("ElectraModel", "ElectraForPreTraining", "ElectraForMaskedLM", "ElectraForSequenceClassification",
           "ElectraForTokenClassification", "ElectraForQuestionAnswering", "ElectraForMultipleChoice")
LENGTH = 12
_SAVED: dict = {}  # (class name, overrides) -> folder, for the whole session


def tiny_hf(class_name: str, seed: int = 0, **overrides):
    """A random transformers ELECTRA of the class (eval mode, float32); QA has 2 labels, the others 3."""
    import torch
    import transformers
    kwargs = dict(TINY, num_labels=2 if class_name == "ElectraForQuestionAnswering" else 3, **overrides)
    torch.manual_seed(seed)
    model = getattr(transformers, class_name)(transformers.ElectraConfig(**kwargs)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.fixture(scope="session")
def electra_dirs(tmp_path_factory):
    """class name (and config overrides) -> a folder holding that tiny model as transformers saves it, made once
    for the session (the parity and converter tests read the same folders)."""

    def get(class_name: str, **overrides):
        key = (class_name, tuple(sorted(overrides.items())))
        if key not in _SAVED:
            folder = tmp_path_factory.mktemp(class_name)
            tiny_hf(class_name, seed=len(_SAVED) + 1, **overrides).save_pretrained(folder)
            _SAVED[key] = folder
        return _SAVED[key]
    return get


def padded_inputs(batch: int = 3, length: int = LENGTH, seed: int = 0, choices: int = 0):
    """(input_ids, token_type_ids, attention_mask) int64 [B, L] ([B, C, L] with choices): row 0 full, the others
    padded at their end (3 and 6 tokens), token type 1 on the second half of the real tokens."""
    rng = np.random.RandomState(seed)
    mask = np.ones((batch, length), np.int64)
    for row, n in ((1, 3), (2, 6)):
        if row < batch:
            mask[row, length - n:] = 0
    ids = np.where(mask == 1, rng.randint(1, TINY["vocab_size"], (batch, length)), TINY["pad_token_id"])
    types = (np.arange(length)[None, :] >= mask.sum(1, keepdims=True) // 2).astype(np.int64) * mask
    if choices:
        tile = lambda a: np.stack([np.roll(a, c, axis=0) for c in range(choices)], axis=1)
        return tile(ids), tile(types), tile(mask)
    return ids, types, mask


def make_electra_source(root, class_name: str = "ElectraForPreTraining"):
    """An ELECTRA of the class (random weights, jaxbert's init; embedding_size 16, hidden 32, 2 layers, dropout 0.1)
    with a made WordPiece tokenizer, saved as a Hugging Face directory: the discriminator a fine-tuning starts
    from, or the generator fill-mask reads."""
    import random

    import jax

    from jaxbert.bench.e2e import save_with_tokenizer
    from jaxbert.data.tokenizer import load_tokenizer, train_tokenizer
    from jaxbert.model.electra.config import ElectraConfig
    from jaxbert.model.electra.family import build
    from tests.helpers.finetune_data import WORDS

    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.txt").write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(400)))
    tok_dir = train_tokenizer([str(root / "corpus.txt")], 200, root / "tok", overwrite=True)
    tok = load_tokenizer(tok_dir)
    cfg = ElectraConfig(vocab_size=tok.get_vocab_size(), embedding_size=16, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                        pad_token_id=tok.token_to_id("[PAD]"))
    model = build(class_name, cfg)
    x = jax.numpy.zeros((1, 8), jax.numpy.int32)
    return save_with_tokenizer(root / "src", model, model.init(jax.random.PRNGKey(0), x)["params"], tok_dir)
