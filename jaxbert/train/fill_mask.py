"""`jaxbert fill-mask MODEL "text with [MASK]"`: the top-k tokens for each [MASK].

MODEL is anything from_pretrained reads that has a tokenizer beside it (an
exported Hugging Face directory, for instance), or a training workdir.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from jaxbert import fs


def load_for_fill_mask(model: str | Path):
    """(module, params, tokenizer) for a model directory or a training workdir."""
    from jaxbert.data.tokenizer import load_tokenizer
    path = fs.as_path(model)
    if (path / "checkpoints").is_dir():
        from jaxbert.model.heads import BertForMaskedLM
        from jaxbert.train.checkpoint import restore_params
        from jaxbert.train.export import tokenizer_dir_of
        from jaxbert.train.recipe import from_dict
        params, meta = restore_params(path)
        recipe = from_dict(meta["recipe"])
        cfg = recipe.bert_config(params["bert"]["embeddings"]["word_embeddings"]["embedding"].shape[0])
        tok_dir = tokenizer_dir_of(recipe, path)
        if tok_dir is None:
            raise ValueError(f"{path} was trained on synthetic data: it has no tokenizer")
        module = BertForMaskedLM(cfg, scan_layers=recipe.model.scan_layers)
        return module, params, load_tokenizer(tok_dir)
    import jaxbert
    module, params = jaxbert.from_pretrained(str(path), model_class="BertForMaskedLM")
    return module, params, load_tokenizer(path)


def fill_mask(module, params, tokenizer, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For each [MASK] in text, in order: top_k (token, probability) pairs."""
    from jaxbert.data.tokenizer import special_token_ids
    mask_id = special_token_ids(tokenizer)["mask"]
    enc = tokenizer.encode(text)
    ids = np.asarray(enc.ids, np.int32)[None]  # [1, L]
    positions = np.flatnonzero(ids[0] == mask_id).astype(np.int32)[None]  # [1, M]
    if positions.size == 0:
        raise ValueError(f"no {tokenizer.id_to_token(mask_id)} token in {text!r}")
    logits = module.apply({"params": params}, ids, np.asarray(enc.type_ids, np.int32)[None],
                          attention_mask=np.ones_like(ids), masked_positions=positions).logits
    probs = np.asarray(jax.nn.softmax(logits[0].astype(np.float32), -1))  # [M, V]
    out = []
    for row in probs:
        best = np.argsort(-row)[:top_k]
        out.append([(tokenizer.id_to_token(int(i)), float(row[i])) for i in best])
    return out


def format_predictions(text: str, preds: list) -> str:
    lines = [text]
    for i, options in enumerate(preds):
        shown = ", ".join(f"{tok} {p:.3f}" for tok, p in options)
        lines.append(f"  [MASK] {i + 1}: {shown}")
    return "\n".join(lines)
