"""Report files and argument checks: `plan --json`,
`parity --json` and `plot --out` refuse an existing file before any work (with --overwrite only
for a report the verb wrote), `predict --out` into a missing folder is refused before work,
`finetune-demo` refuses nonsense sizes and a kept --workdir holding files before writing, `plan`
refuses --recipe with --preset, and `export` of a fine-tuning workdir points at its best/."""

from __future__ import annotations

import json

import pytest

from jaxbert.cli.main import main

NOTE = b"my own notes, not a report\n\x00\x01 kept byte for byte\n"


def _one_error(capsys, verb: str) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"jaxbert {verb}: error: "), captured
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


@pytest.mark.parametrize("verb, argv", [
    # each would fail later on a bad value (--hbm, a missing model): the --json refusal must come first
    ("plan", ["plan", "--preset", "bert-tiny", "--seq-len", "16", "--hbm", "-1"]),
    ("parity", ["parity", "{tmp}/no-model"]),
])
def test_json_reports_refuse_an_existing_file_before_any_work(tmp_path, capsys, verb, argv):
    note = tmp_path / "notes.json"
    note.write_bytes(NOTE)
    argv = [a.format(tmp=tmp_path) for a in argv] + ["--json", str(note)]
    assert main(argv) == 2
    err = _one_error(capsys, verb)
    assert f"--json {note}" in err and "exists" in err, err
    assert note.read_bytes() == NOTE
    # --overwrite does not make a user's file ours
    assert main(argv + ["--overwrite"]) == 2
    err = _one_error(capsys, verb)
    assert str(note) in err and "not a file this verb wrote" in err, err
    assert note.read_bytes() == NOTE


def test_overwrite_lets_through_only_an_earlier_report_of_the_verb(tmp_path, capsys):
    earlier = tmp_path / "plan.json"
    earlier.write_text(json.dumps({"recipe": "r", "target": "local", "budget_bytes": 1, "candidates": [],
                                   "recommended": None}))
    parity = tmp_path / "parity.json"
    parity.write_text(json.dumps({"dtype": "float32", "ok": True, "env": {}, "rows": []}))
    # plan: its own earlier report passes the --json check; the run then stops on --hbm (nothing written)
    assert main(["plan", "--preset", "bert-tiny", "--seq-len", "16", "--hbm", "-1", "--json", str(earlier),
                 "--overwrite"]) == 2
    assert "--hbm" in _one_error(capsys, "plan")
    # another verb's report is not plan's
    before = parity.read_bytes()
    assert main(["plan", "--preset", "bert-tiny", "--seq-len", "16", "--json", str(parity), "--overwrite"]) == 2
    assert "not a file this verb wrote" in _one_error(capsys, "plan")
    assert parity.read_bytes() == before
    # parity's earlier report passes parity's check (the missing model is named next)
    assert main(["parity", str(tmp_path / "no-model"), "--json", str(parity), "--overwrite"]) == 2
    assert "no-model" in _one_error(capsys, "parity")


@pytest.fixture
def plotted(tmp_path):
    pytest.importorskip("matplotlib")
    workdir = tmp_path / "run"
    workdir.mkdir()
    rows = [{"step": s, "mlm_loss": 5.0 - s / 10, "mlm_accuracy": s / 100} for s in range(1, 6)]
    (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return workdir


def test_plot_out_refuses_an_existing_file_and_overwrites_only_its_own_png(plotted, tmp_path, capsys):
    note = tmp_path / "notes.txt"
    note.write_bytes(NOTE)
    assert main(["plot", str(plotted), "--out", str(note)]) == 2
    assert f"--out {note}" in _one_error(capsys, "plot")
    assert note.read_bytes() == NOTE
    assert main(["plot", str(plotted), "--out", str(note), "--overwrite"]) == 2
    assert "not a file this verb wrote" in _one_error(capsys, "plot")
    assert note.read_bytes() == NOTE
    # a PNG jaxbert did not write (no "jaxbert plot" in it) is not replaced either
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    theirs = tmp_path / "theirs.png"
    fig = plt.figure()
    fig.savefig(theirs)
    plt.close(fig)
    before = theirs.read_bytes()
    assert main(["plot", str(plotted), "--out", str(theirs), "--overwrite"]) == 2
    assert theirs.read_bytes() == before
    capsys.readouterr()
    # a PNG plot wrote: refused without --overwrite, replaced with it
    ours = tmp_path / "curves-copy.png"
    assert main(["plot", str(plotted), "--out", str(ours)]) == 0
    first = ours.read_bytes()
    capsys.readouterr()
    assert main(["plot", str(plotted), "--out", str(ours)]) == 2
    assert "--overwrite" in _one_error(capsys, "plot")
    assert main(["plot", str(plotted), "--out", str(ours), "--overwrite"]) == 0
    assert ours.read_bytes().startswith(b"\x89PNG") and len(first) > 0
    # the workdir's own curves.png (the default) is the run's: replaced as before
    assert main(["plot", str(plotted)]) == 0 and main(["plot", str(plotted)]) == 0


def test_predict_out_in_a_missing_folder_is_refused_before_the_work(tmp_path, capsys):
    out = tmp_path / "nodir" / "pred.jsonl"
    # the model does not exist either: the --out folder must be named first, before anything is read
    assert main(["predict", str(tmp_path / "no-model"), str(tmp_path / "rows.jsonl"), "--out", str(out)]) == 2
    err = _one_error(capsys, "predict")
    assert f"--out {out}" in err and str(tmp_path / "nodir") in err and "does not exist" in err, err
    assert not (tmp_path / "nodir").exists()


@pytest.mark.parametrize("sizes", [["5", "-1"], ["0", "3"]])
def test_finetune_demo_refuses_sizes_below_one(tmp_path, capsys, sizes):
    assert main(["finetune-demo", "--per-kind", *sizes, "--tiny-demo", str(tmp_path / "none")]) == 2
    err = _one_error(capsys, "finetune-demo")
    assert f"--per-kind {' '.join(sizes)}" in err and "at least 1" in err, err


def test_finetune_demo_refuses_a_kept_workdir_holding_its_files_before_anything(tmp_path, capsys):
    workdir = tmp_path / "keep"
    (workdir / "data").mkdir(parents=True)
    mine = {workdir / "data" / "train.jsonl": b'{"text": "my own training rows"}\n',
            workdir / "data" / "heldout.jsonl": NOTE}
    for path, data in mine.items():
        path.write_bytes(data)
    # no tiny-demo here: the --workdir check must come first (nothing read, nothing written)
    assert main(["finetune-demo", "--workdir", str(workdir), "--tiny-demo", str(tmp_path / "none")]) == 2
    err = _one_error(capsys, "finetune-demo")
    assert str(workdir / "data" / "train.jsonl") in err and "new --workdir" in err, err
    assert all(path.read_bytes() == data for path, data in mine.items())
    assert sorted(p.name for p in workdir.rglob("*")) == ["data", "heldout.jsonl", "train.jsonl"]


def test_plan_refuses_a_recipe_with_a_preset(tmp_path, capsys):
    assert main(["plan", "--recipe", "tiny-demo", "--preset", "bert-base-uncased", "--hbm", "1"]) == 2
    err = _one_error(capsys, "plan")
    assert "--preset bert-base-uncased" in err and "--recipe" in err, err
