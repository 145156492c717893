"""`jaxbert fill-mask MODEL "text with [MASK]"`: the top-k tokens for each [MASK] (RoBERTa: <mask>).

MODEL is anything from_pretrained reads that has a tokenizer beside it (an
exported Hugging Face directory, for instance), or a training workdir.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from jaxbert import fs
from jaxbert.convert import from_pretrained, tokenizer_path
from jaxbert.convert.pretrained import family_class
from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.errors import InputError
from jaxbert.model.families import family_of, special_spellings


MASK_TOKENS = special_spellings("mask")  # as the families spell it: BERT's [MASK], RoBERTa's <mask>


def load_for_fill_mask(model: str | Path):
    """(module, params, tokenizer) for a model directory or a training workdir."""
    if not fs.is_url(model) and not Path(model).exists():
        raise InputError(f"{model}: does not exist (relative to {Path.cwd()})")
    tok_dir = tokenizer_path(model)
    if tok_dir is None:
        raise InputError(f"{model}: no tokenizer beside it (tokenizer.json, vocab.txt or spm.model), "
                         "or a run trained on synthetic data")
    # the family's masked LM (BertForMaskedLM, RobertaForMaskedLM, ModernBertForMaskedLM) reads the
    # MLM head of any of its classes that has one
    module, params = from_pretrained(model, model_class=family_class(model, "ForMaskedLM", "fill-mask"))
    return module, params, load_tokenizer(tok_dir)


def mask_probabilities(module, params, tokenizer, text: str) -> np.ndarray:
    """float32 [M, V]: the predicted distribution at each mask token ([MASK], or RoBERTa's <mask>), in order."""
    # the model's family's spelling first, then every registered family's
    spellings = tuple(dict.fromkeys((family_of(module.config).special_tokens["mask"],) + special_spellings("mask")))
    mask_id = next((i for i in map(tokenizer.token_to_id, spellings) if i is not None), None)
    if mask_id is None:
        raise InputError(f"the tokenizer has no mask token (looked for {' and '.join(spellings)})")
    enc = tokenizer.encode(text)
    limit = module.config.max_position_embeddings
    if len(enc.ids) > limit:  # truncating could drop the very [MASK] asked about
        raise InputError(f"{text[:40]!r}...: {len(enc.ids)} tokens exceed the model's max_position_embeddings "
                         f"{limit}; shorten the text")
    ids = np.asarray(enc.ids, np.int32)[None]  # [1, L]
    positions = np.flatnonzero(ids[0] == mask_id).astype(np.int32)[None]  # [1, M]
    if positions.size == 0:
        raise InputError(f"no {tokenizer.id_to_token(mask_id)} token in {text!r}")
    logits = module.apply({"params": params}, ids, np.asarray(enc.type_ids, np.int32)[None],
                          attention_mask=np.ones_like(ids), masked_positions=positions).logits
    return np.asarray(jax.nn.softmax(logits[0].astype(np.float32), -1))


def fill_mask(module, params, tokenizer, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For each [MASK] in text, in order: top_k (token, probability) pairs."""
    out = []
    for row in mask_probabilities(module, params, tokenizer, text):
        best = np.argsort(-row)[:top_k]
        out.append([(shown_token(tokenizer, int(i)), float(row[i])) for i in best])
    return out


def _byte_level(tokenizer) -> bool:
    """Whether the tokenizer splits bytes (RoBERTa's, ModernBERT's): its tokens spell a leading space `Ġ`."""
    return type(getattr(tokenizer, "pre_tokenizer", None)).__name__ == "ByteLevel"


def shown_token(tokenizer, token_id: int) -> str:
    """A token as a person reads it: WordPiece's own spelling (`##ing` stays a continuation);
    a byte-level token (`Ġthe`, `Ċ`) decoded to its text, stripped of its leading space, and
    quoted when it is only white space."""
    if not _byte_level(tokenizer):
        return tokenizer.id_to_token(token_id)
    text = tokenizer.decode([token_id], skip_special_tokens=False)
    return text.strip() or repr(text)


def answer_rank(probs: np.ndarray, tokenizer, answer: str) -> int | None:
    """1-based rank of `answer` in one [MASK]'s distribution [V]; None when it is not one token.

    With a byte-level tokenizer (RoBERTa's, ModernBERT's) a word after a space is its space-led token
    (`Ġimport`), which is looked up first."""
    i = None
    if _byte_level(tokenizer):
        ids = tokenizer.encode(" " + answer, add_special_tokens=False).ids
        i = ids[0] if len(ids) == 1 else None
    if i is None:
        i = tokenizer.token_to_id(answer)
    return None if i is None else int(np.sum(probs > probs[i])) + 1


def format_predictions(text: str, preds: list) -> str:
    lines = [text]
    for i, options in enumerate(preds):
        shown = ", ".join(f"{tok} {p:.3f}" for tok, p in options)
        lines.append(f"  [MASK] {i + 1}: {shown}")
    return "\n".join(lines)
