"""`jaxbert plot WORKDIR [--out PNG]`: loss and MLM accuracy curves of a training run."""

from __future__ import annotations

import io
from pathlib import Path

from jaxbert import fs

from jaxbert.train.metrics import read_metrics


def plot_workdir(workdir: str | Path, out: str | Path | None = None) -> Path:
    """Writes train and held-out (eval_*) loss and accuracy against step; returns the PNG path."""
    import matplotlib
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    rows = read_metrics(workdir)
    out = fs.as_path(out) if out else fs.as_path(workdir) / "curves.png"

    def series(key):
        pts = [(r["step"], r[key]) for r in rows if key in r]
        return [p[0] for p in pts], [p[1] for p in pts]

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, title in ((ax_loss, "loss", "loss"), (ax_acc, "mlm_accuracy", "MLM accuracy")):
        for prefix, style in (("", "-"), ("eval_", "o-")):
            xs, ys = series(prefix + key)
            if xs:
                ax.plot(xs, ys, style, label=("held-out" if prefix else "train"), markersize=3)
        ax.set_xlabel("step")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(fs.as_path(workdir).name)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return fs.atomic_write_bytes(out, buf.getvalue())
