"""`jaxbert plot WORKDIR [--out PNG]`: loss and MLM accuracy curves of a training run."""

from __future__ import annotations

import io
from pathlib import Path


from jaxbert import fs
from jaxbert.errors import require
from jaxbert.fs import atomic_write_bytes
from jaxbert.engine.metrics_log import read_metrics
from jaxbert.workdir import CURVES, read_recipe
from jaxbert.workdir import path as workdir_path


def _mask_rates(workdir: Path) -> tuple[float | None, float | None]:
    """(train, held-out) masking rates from the run's recipe.yaml; None where unknown."""
    recipe = read_recipe(workdir)
    if recipe is None:
        return None, None
    data = recipe.get("data", {})
    train = data.get("mask_rate")
    return train, data.get("eval_mask_rate") if data.get("eval_mask_rate") is not None else train


def _rate(rate: float | None) -> str:
    return f", {rate:.0%} masked" if rate is not None else ""


def plot_workdir(workdir: str | Path, out: str | Path | None = None) -> Path:
    """Writes train and held-out (eval_*) loss and accuracy against step; returns the PNG path."""
    workdir = fs.as_path(workdir)  # a URL stays a URL (pathlib would collapse gs:// to gs:/)
    out = fs.as_path(out) if out else workdir_path(workdir, CURVES)
    fig = figure(workdir)
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110, bbox_inches="tight")  # every label inside the picture
    import matplotlib.pyplot as plt
    plt.close(fig)
    return atomic_write_bytes(out, png.getvalue())


def figure(workdir):
    """The curves of a workdir's metrics as a matplotlib figure (two panels: loss, accuracy)."""
    matplotlib = require("matplotlib", "plot", "plotting curves")
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    workdir = fs.as_path(workdir)
    rows = read_metrics(workdir)
    train_rate, eval_rate = _mask_rates(workdir)

    def series(key):
        pts = [(r["step"], r[key]) for r in rows if key in r]
        return [p[0] for p in pts], [p[1] for p in pts]

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4.4))
    panels = ((ax_loss, "mlm_loss", "MLM loss (nats)", "cross-entropy at the masked tokens"),
              (ax_acc, "mlm_accuracy", "MLM accuracy", "masked tokens predicted exactly"))
    for ax, key, ylabel, what in panels:
        xs, ys = series(key)
        if xs:
            ax.plot(xs, ys, "-", color="tab:blue", label=f"train (mean of each log window{_rate(train_rate)})")
        xs, ys = series("eval_" + key)
        if xs:
            ax.plot(xs, ys, "o--", color="tab:orange", markersize=6,
                    label=f"held-out documents (each evaluation{_rate(eval_rate)})")
            ax.annotate(f"{ys[-1]:.4f}", (xs[-1], ys[-1]), textcoords="offset points", xytext=(-10, 8),
                        ha="right", color="tab:orange")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(ylabel)
        ax.set_title(what, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    title = workdir.name
    if train_rate is not None and eval_rate is not None and train_rate != eval_rate:
        title += (f": evaluation masks {eval_rate:.0%} of the tokens and training {train_rate:.0%}; "
                  f"fewer masks leave more context, so held-out accuracy can exceed train accuracy")
    fig.suptitle(title, fontsize=9, wrap=True)
    fig.tight_layout()
    return fig
