"""eval_batches 0 on a mixture (#50.12): each source's held-out split is evaluated whole (every row once,
none repeated, none left out), reported per source (eval_*/NAME), and the mixture's figures are the
sources' weighed by their shares (3:1). Before, the held-out stream followed the mixture's schedule:
more rows of the smaller source than it holds (some twice) and fewer of the larger."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from jaxbert.cli.main import main
from jaxbert.data.loader import metadata
from jaxbert.engine import loop as engine
from tests.helpers.mixture import prepare_sources
from tests.helpers.runs import write_recipe

BATCH = 16


def _held_out_rows(folder) -> Counter:
    """The rows of a folder's validation split, read from its .npy shards."""
    meta = metadata(folder)
    return Counter(r.astype(np.int32).tobytes() for s in meta["splits"]["validation"]["shards"]
                   for r in np.load(folder / s["file"]))


def test_eval_batches_0_on_a_mixture_reads_each_held_out_split_whole_and_reports_each(tmp_path, monkeypatch):
    root = tmp_path / "data"
    root.mkdir()
    prepare_sources(root, {"early": 300, "late": 100}, validation_fraction=0.3)
    held = {name: _held_out_rows(root / name) for name in ("early", "late")}
    sizes = {name: sum(c.values()) for name, c in held.items()}
    assert sizes["early"] > 2 * sizes["late"] > 2 * BATCH and sizes["late"] % BATCH, sizes  # a partial last batch
    recipe = write_recipe(tmp_path / "mix.yaml", data={
        "source": "prepared", "seq_len": 16, "mask_rate": 0.25,
        "sources": [{"dir": str(root / "early"), "weight": 3}, {"dir": str(root / "late"), "weight": 1}]},
        train={"steps": 2, "per_device_batch_size": BATCH, "log_every": 1, "eval_every": 0, "eval_batches": 0},
        checkpoint={"every_steps": 2, "keep": 1})
    seen = []
    compile_eval = engine.compile_eval

    def recording(*args, **kwargs):
        fn = compile_eval(*args, **kwargs)

        def call(params, batch):
            seen.append({k: np.asarray(v) for k, v in batch.items()})
            return fn(params, batch)
        return call
    monkeypatch.setattr(engine, "compile_eval", recording)
    assert main(["train", "--config", str(recipe), "--workdir", str(tmp_path / "wd")]) == 0

    # the rows evaluated that weigh anything, unmasked: each held-out row of each source exactly once
    got = Counter()
    for b in seen:
        ids = b["input_ids"].copy()
        r, m = np.nonzero(b["masked_weights"])
        ids[r, b["masked_positions"][r, m]] = b["masked_labels"][r, m]
        got.update(row.tobytes() for row in ids[b["masked_weights"].sum(1) > 0])
    assert got == held["early"] + held["late"]
    rows = [json.loads(line) for line in (tmp_path / "wd" / "metrics.jsonl").read_text().splitlines()]
    ev = next(r for r in rows if "eval_mlm_loss" in r)
    for key in ("eval_mlm_loss", "eval_mlm_accuracy", "eval_loss"):
        each = [ev[f"{key}/{name}"] for name in ("early", "late")]
        assert ev[key] == pytest.approx(0.75 * each[0] + 0.25 * each[1], rel=1e-9), key
    assert ev["eval_mlm_loss/early"] != ev["eval_mlm_loss/late"]
