"""What a finished run leaves beside its checkpoints (recipe section `outputs`):
the curves PNG, a Hugging Face export with its tokenizer, fill-mask examples."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from jaxbert import fs
from jaxbert import workdir as workdir_lib
from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.fs import as_path, atomic_write_text
from jaxbert.model.families import family_of
from jaxbert.model.classes import build_model
from jaxbert.model.options import ModelOptions
from jaxbert.convert.export import export_params
from jaxbert.infer.fill_mask import answer_rank, fill_mask, format_predictions, mask_probabilities
from jaxbert.train.plot import plot_workdir
from jaxbert.train.recipe import Recipe, RecipeError


def finish(recipe: Recipe, workdir: str | Path, model, params, tokenizer_dir, log=print) -> dict:
    """params: host params of the final state. Returns the paths written."""
    out, o, workdir = {}, recipe.outputs, fs.as_path(workdir)
    if o.plot and importlib.util.find_spec("matplotlib") is None:  # the run's results matter more
        log(f"curves.png skipped: plotting needs matplotlib (pip install matplotlib, then "
            f"jaxbert plot {workdir})")
    elif o.plot:
        out["plot"] = str(plot_workdir(workdir))
        log(f"curves: {out['plot']}")
    if o.export:
        out["export"] = str(export_params(workdir_lib.path(workdir, workdir_lib.EXPORT), model.config, recipe.model.model_class,
                                          params, tokenizer_dir, overwrite=True))  # its own earlier export
        log(f"Hugging Face export: {out['export']}")
    if o.fill_mask and tokenizer_dir is not None:
        tok = load_tokenizer(tokenizer_dir)
        # the family's MLM class (BertForMaskedLM, ModernBertForMaskedLM) reads the MLM head of any pretraining class
        mlm_class = family_of(model.config).mlm_class(model.config.model_type)
        mlm = build_model(mlm_class, model.config, ModelOptions(scan_layers=recipe.model.scan_layers))
        lines = [_showcase(mlm, params, tok, item) for item in o.fill_mask]
        atomic_write_text(workdir_lib.path(workdir, workdir_lib.FILL_MASK), "\n".join(lines) + "\n")
        log("fill-mask:\n" + "\n".join(lines))
    return out


def _showcase(module, params, tok, item) -> str:
    """A recipe's fill-mask entry: "text with [MASK]", or {text: ..., answer: word} to rank the right word."""
    text, answer = (item.get("text"), item.get("answer")) if isinstance(item, dict) else (item, None)
    if not isinstance(text, str) or (answer is not None and not isinstance(answer, str)):
        raise RecipeError(f"outputs.fill_mask: {item!r} is neither a sentence nor {{text: ..., answer: ...}}")
    shown = format_predictions(text, fill_mask(module, params, tok, text))
    if answer is None:
        return shown
    rank = answer_rank(mask_probabilities(module, params, tok, text)[0], tok, answer)
    verdict = (f"{answer!r} is not one token of the vocabulary" if rank is None
               else f"{answer!r} ranks {rank}" + (" (top 5)" if rank <= 5 else ""))
    return f"{shown}\n  right word {verdict}"


def last_eval(workdir: str | Path) -> dict:
    """The last held-out (eval_*) metrics the run logged; {} when there are none."""
    path = workdir_lib.path(workdir, workdir_lib.METRICS)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    evals = [r for r in rows if "eval_mlm_accuracy" in r]
    return evals[-1] if evals else {}


def _source_lines(workdir: Path) -> list[str]:
    """A mixture's sources as the last logged row has them: tokens read and epochs (passes over the rows)."""
    path = workdir_lib.path(workdir, workdir_lib.METRICS)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    last = next((r for r in reversed(rows) if any(k.startswith("epochs/") for k in r)), {})
    return [f"source {key[len('epochs/'):]}: {last.get('tokens/' + key[len('epochs/'):], 0):,} tokens, "
            f"{value:.2f} epochs" for key, value in last.items() if key.startswith("epochs/")]


def summary_block(recipe: Recipe, workdir: str | Path, ev: dict) -> str:
    """What a run left and where, and its held-out score: the last lines `jaxbert train` prints."""
    wd = as_path(workdir)
    rate = recipe.data.eval_mask_rate if recipe.data.eval_mask_rate is not None else recipe.data.mask_rate
    lines = []
    if ev:
        lines.append(f"held-out MLM accuracy {ev['eval_mlm_accuracy']:.4f}, loss {ev['eval_mlm_loss']:.4f} "
                     f"(step {ev.get('step', '?')}, {rate:.0%} of the tokens masked)")
    lines += _source_lines(wd)
    lines.append(f"workdir {wd}")
    for name, what in workdir_lib.OUTPUTS.items():
        if (wd / name).exists():
            what = what.format(path=wd / name)
            lines.append(f"  {name + ('/' if (wd / name).is_dir() else ''):15s} {what}")
    return "\n".join(lines)
