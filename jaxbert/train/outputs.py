"""What a finished run leaves beside its checkpoints (recipe section `outputs`):
the curves PNG, a Hugging Face export with its tokenizer, fill-mask examples."""

from __future__ import annotations

from pathlib import Path

from jaxbert import fs
from jaxbert.train.recipe import Recipe


def finish(recipe: Recipe, workdir: str | Path, model, params, tokenizer_dir, log=print) -> dict:
    """params: host params of the final state. Returns the paths written."""
    out, o, workdir = {}, recipe.outputs, fs.as_path(workdir)
    if o.plot:
        from jaxbert.train.plot import plot_workdir
        out["plot"] = str(plot_workdir(workdir))
        log(f"curves: {out['plot']}")
    if o.export:
        from jaxbert.train.export import export_params
        out["export"] = str(export_params(workdir / "hf", model.config, recipe.model.model_class,
                                          params, tokenizer_dir))
        log(f"Hugging Face export: {out['export']}")
    if o.fill_mask and tokenizer_dir is not None:
        from jaxbert.train.fill_mask import fill_mask, format_predictions
        from jaxbert.model.heads import BertForMaskedLM
        from jaxbert.data.tokenizer import load_tokenizer
        tok = load_tokenizer(tokenizer_dir)
        mlm = BertForMaskedLM(model.config, scan_layers=recipe.model.scan_layers)
        lines = [format_predictions(t, fill_mask(mlm, params, tok, t)) for t in o.fill_mask]
        fs.atomic_write_text(workdir / "fill_mask.txt", "\n".join(lines) + "\n")
        log("fill-mask:\n" + "\n".join(lines))
    return out
