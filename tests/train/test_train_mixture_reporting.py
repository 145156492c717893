"""What a mixture's per-source reporting costs a run (#50.28): the figures are counted where the loader
reads, so they never rebuild a schedule block the loader built (the loader runs one batch ahead of the
steps; counting behind it, a block had to be rebuilt whenever a batch spanned more than a block), and the
mixture's folders are checked once per run, not three times."""

from __future__ import annotations

import json

import pytest

from jaxbert.cli.main import main
from jaxbert.data import mixture
from jaxbert.data.mixture import Schedule, shares
from jaxbert.train import sources
from tests.helpers.mixture import prepare_sources
from tests.helpers.runs import write_recipe

STEPS, BATCH, BLOCK = 6, 16, 10  # a schedule block smaller than a batch: each batch spans two or three


def test_a_mixture_run_builds_each_schedule_block_once_and_checks_its_folders_once(tmp_path, monkeypatch, capsys):
    root = tmp_path / "data"
    root.mkdir()
    prepare_sources(root, {"early": 60, "late": 20}, validation_fraction=0.3)
    recipe = write_recipe(tmp_path / "mix.yaml", data={
        "source": "prepared", "seq_len": 16, "mask_rate": 0.25,
        "sources": [{"dir": str(root / "early"), "weight": 3}, {"dir": str(root / "late"), "weight": 1}]},
        train={"steps": STEPS, "per_device_batch_size": BATCH, "log_every": 1, "eval_every": 0, "eval_batches": 1},
        checkpoint={"every_steps": STEPS, "keep": 1})
    monkeypatch.setattr(mixture, "BLOCK", BLOCK)
    built, checks = [], []
    block = Schedule._block

    def counting_block(self, b):
        if b not in self._blocks:
            built.append((id(self), b))
        return block(self, b)
    monkeypatch.setattr(Schedule, "_block", counting_block)
    check = sources.check_data
    monkeypatch.setattr(sources, "check_data", lambda *a, **k: (checks.append(a), check(*a, **k))[1])

    assert main(["train", "--config", str(recipe), "--workdir", str(tmp_path / "wd")]) == 0, capsys.readouterr().err
    rebuilt = [key for k, key in enumerate(built) if key in built[:k]]
    assert rebuilt == [], f"blocks built again: {rebuilt} of {len(built)} built"
    assert len(checks) == 1
    # the figures are the schedule's own counts after each step (a fresh schedule, the run's seed 0)
    schedule = Schedule(shares([3, 1]), seed=0, block=BLOCK)
    rows = [r for r in map(json.loads, (tmp_path / "wd" / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    for r in rows:
        early, late = schedule.consumed(r["step"] * BATCH)
        assert (r["tokens/early"], r["tokens/late"]) == (early * 16, late * 16)
        assert early + late == r["step"] * BATCH and early > 2 * late
