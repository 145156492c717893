"""A run stopped between two log rows and resumed writes the metrics.jsonl an uninterrupted run writes.

The steps after the last log row live only in the metric window; the checkpoint at the stop carries
their sums, so the first row after the resume covers them (not only the steps run after the resume).
"""

from __future__ import annotations

import json

from jaxbert.cli.main import main
from tests.helpers.runs import metric_rows, untimed_rows, write_recipe


def test_stop_between_log_rows_then_resume_writes_the_uninterrupted_rows(tmp_path, capsys, compile_cache):
    recipe = write_recipe(tmp_path / "tiny.yaml", train={"steps": 15, "log_every": 5},
                          checkpoint={"every_steps": 4, "keep": 5})
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    assert main(["train", "--config", str(recipe), "--workdir", str(straight)]) == 0
    assert main(["train", "--config", str(recipe), "--workdir", str(stopped), "--stop-after", "13"]) == 0
    assert [r["step"] for r in metric_rows(stopped)] == [5, 10]  # steps 11-13 are not logged yet
    assert main(["train", "--config", str(recipe), "--workdir", str(stopped)]) == 0
    assert "resumed from" in capsys.readouterr().out
    want = untimed_rows(straight)
    assert [r["step"] for r in want if "loss" in r] == [5, 10, 15]
    # the step-15 row averages steps 11-15, as the uninterrupted run's does, to the last digit
    assert untimed_rows(stopped) == want
    # the carried sums are in the checkpoint's meta, as JSON a reader can see
    meta = json.loads((stopped / "checkpoints" / "13" / "meta" / "metadata").read_text())
    assert meta["metric_window"]["n"] == 3
