"""End to end through jaxbert.cli.main.main: train a 1-layer model, then plot, export and fill-mask.

The first test runs on synthetic data; the second prepares a small real corpus with
its own WordPiece tokenizer (the path tiny-demo takes, on a corpus of a few KB) and
continues pretraining from a Hugging Face BertModel directory that has no MLM head.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from tests.helpers.tfevents import scalars
from tests.helpers.runs import checkpoint_steps, metric_rows, write_recipe
from jaxbert.cli.main import main


def test_jaxbert_train_end_to_end_then_plot_and_export(tmp_path, capsys):
    recipe = write_recipe(tmp_path / "tiny.yaml", train={"steps": 12, "eval_every": 6, "log_every": 3},
                          outputs={"plot": True})
    wd = tmp_path / "run"
    assert main(["train", "--config", str(recipe), "--workdir", str(wd), "--set", "optim.warmup_steps=3"]) == 0
    out = capsys.readouterr().out
    assert "finished at step 12" in out and "held-out MLM accuracy" in out
    # piped output: one compact line per log step (no mlm_loss beside loss), the summary block at the end
    step_lines = [line for line in out.splitlines() if line.startswith("step 6/12: ")]
    assert len(step_lines) == 2 and "mlm_loss" not in step_lines[0] and " lr " in step_lines[0]
    assert "steps/s" in step_lines[0] and "left" in step_lines[0] and "tokens/s" in step_lines[0]
    assert "held-out MLM loss" in step_lines[1]
    assert out.index("compiling the train step") < out.index("step 3/12: ")  # the wait before step 1 is named
    assert "(step 12, 25% of the tokens masked)" in out and f"tensorboard --logdir {wd / 'tensorboard'}" in out
    assert "curves.png" in out and "checkpoints/" in out
    # a second run of a finished workdir trains nothing and says so
    rows_before = metric_rows(wd)
    assert main(["train", "--config", str(recipe), "--workdir", str(wd), "--set", "optim.warmup_steps=3"]) == 0
    again = capsys.readouterr().out
    assert f"{wd} is finished at step 12; --workdir NEW for a fresh run" in again
    assert "step 3/12" not in again and "resumed" not in again and "(step 12, 25% of the tokens masked)" in again
    assert checkpoint_steps(wd) == [4, 8, 12] and metric_rows(wd) == rows_before
    effective = yaml.safe_load((wd / "recipe.yaml").read_text())
    assert effective["optim"]["warmup_steps"] == 3 and effective["train"]["steps"] == 12
    rows = metric_rows(wd)
    train = [r for r in rows if "loss" in r]
    evals = [r for r in rows if "eval_mlm_accuracy" in r]
    assert [r["step"] for r in train] == [3, 6, 9, 12] and [r["step"] for r in evals] == [6, 12]
    assert train[-1]["loss"] < train[0]["loss"] - 0.2  # it learns the synthetic task
    for key in ("mlm_accuracy", "grad_norm", "param_norm", "update_norm", "learning_rate"):
        assert np.isfinite(train[-1][key])
    assert train[-1]["tokens_per_s"] > 0 and train[-1]["gflops_per_s"] > 0
    assert checkpoint_steps(wd) == [4, 8, 12]
    assert (wd / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    events = list((wd / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    _, values = scalars(events[0])  # every numeric metric of every row, as TensorBoard reads it
    assert values == {(r["step"], k): pytest.approx(v, rel=1e-6) for r in rows for k, v in r.items()
                      if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}

    assert main(["plot", str(wd), "--out", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").stat().st_size > 1000
    hf = tmp_path / "hf"
    assert main(["export", str(wd), str(hf)]) == 0
    import torch
    import transformers
    from jaxbert.workdir import read_params as restore_params
    from jaxbert.model.classes import build_model
    from jaxbert.train.recipe import from_dict
    pt = transformers.BertForMaskedLM.from_pretrained(hf).eval()
    params, meta = restore_params(wd)
    r = from_dict(meta["recipe"])
    model = build_model(r.model.model_class, r.model_config(), r.model.options())
    ids = np.array([[2, 7, 9, 11, 4, 13, 3]], np.int32)
    ours = np.asarray(model.apply({"params": params}, ids, np.zeros_like(ids)).logits)
    with torch.no_grad():
        theirs = pt(torch.tensor(ids, dtype=torch.long)).logits.numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-4)
    # trained on past the planned end: one line says the schedule follows the new step count
    capsys.readouterr()
    assert main(["train", "--config", str(recipe), "--workdir", str(wd), "--set", "optim.warmup_steps=3",
                 "--set", "train.steps=14"]) == 0
    note = [line for line in capsys.readouterr().out.splitlines() if "schedule follows the new step count" in line]
    assert len(note) == 1 and "saved planning 12 steps and now trains to 14" in note[0]


def test_the_curves_keep_every_label_inside_the_picture(tmp_path):
    """The y-labels are short (their explanations are the panels' titles), and the picture is cut around
    everything drawn: no label sticks out of it."""
    pytest.importorskip("matplotlib")
    from jaxbert.train import plot
    wd = tmp_path / "run"
    wd.mkdir()
    (wd / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in (
        {"step": 10, "mlm_loss": 7.0, "mlm_accuracy": 0.05}, {"step": 20, "mlm_loss": 6.0, "mlm_accuracy": 0.1},
        {"step": 20, "eval_mlm_loss": 6.1, "eval_mlm_accuracy": 0.09})) + "\n")
    fig = plot.figure(wd)
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        label = ax.yaxis.label.get_window_extent(renderer)
        box = ax.get_window_extent(renderer)
        assert label.height <= box.height, ax.get_ylabel()  # a label longer than its axis was cut off


CORPUS = ("The return statement leaves the current function call with the expression list. "
          "A for loop iterates over the items of any sequence, such as a list or a string, in order. "
          "The break statement terminates the nearest enclosing loop, skipping the optional else clause. "
          "A dictionary maps keys to values; the keys must be hashable objects such as strings. ")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("real")
    text = root / "corpus.txt"
    text.write_text("\n\n".join(CORPUS * 3 for _ in range(40)))
    from jaxbert.data.prepare import prepare
    from jaxbert.data.tokenizer import train_tokenizer
    train_tokenizer([str(text)], 200, root / "tok")
    prepare([str(text)], str(root / "tok"), str(root / "data"), max_length=32, validation_fraction=0.1,
            progress=False)
    return root


def test_prepared_data_continued_from_a_headless_checkpoint_then_fill_mask(prepared, tmp_path, capsys):
    import jax
    import jax.numpy as jnp
    from jaxbert import BertConfig, BertModel, save_pretrained
    cfg = BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=32)
    base = BertModel(cfg)
    ids = jnp.zeros((1, 8), jnp.int32)
    base_params = base.init(jax.random.PRNGKey(7), ids, ids)["params"]
    save_pretrained(tmp_path / "base", base, base_params, format="hf")  # an encoder, no MLM head

    # no data.tokenizer: the run finds the one the data was prepared with (for the export)
    recipe = write_recipe(tmp_path / "real.yaml", data={"source": "prepared", "dir": str(prepared / "data"),
                                                        "seq_len": 32},
                          model={"preset": str(tmp_path / "base"), "config": {}, "init_from": str(tmp_path / "base")},
                          train={"steps": 6, "eval_every": 0, "eval_batches": 0, "per_device_batch_size": 4},
                          optim={"warmup_steps": 0},
                          outputs={"plot": False, "export": True,
                                   "fill_mask": ["a for [MASK] iterates", {"text": "the [MASK] statement", "answer": "break"}]})
    wd = tmp_path / "run"
    assert main(["train", "--config", str(recipe), "--workdir", str(wd), "--set", "train.steps=1"]) == 0
    log = capsys.readouterr().out
    assert "freshly initialised" in log and "cls/predictions" in log  # the head the base lacks
    from jaxbert.workdir import read_params as restore_params
    after_one, _ = restore_params(wd)
    q = after_one["bert"]["encoder"]["layer"]["0"]["attention"]["self"]["query"]["kernel"]
    q0 = np.asarray(base_params["encoder"]["layer"]["0"]["attention"]["self"]["query"]["kernel"])
    assert 0 < np.abs(q - q0).max() < 0.05  # started from the base encoder, moved by one step

    assert main(["train", "--config", str(recipe), "--workdir", str(wd)]) == 0  # resumes to 6
    out = capsys.readouterr().out
    assert "resumed from" in out and "[MASK] 1:" in out
    rank = int(out.split("right word 'break' ranks ")[1].split()[0])
    assert 1 <= rank <= 200
    assert (rank <= 5) == ("ranks %d (top 5)" % rank in out)
    assert checkpoint_steps(wd)[-1] == 6
    hf = wd / "hf"
    assert json.loads((hf / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(hf)
    assert tok("a for loop")["input_ids"][0] == tok.cls_token_id
    pt = transformers.BertForMaskedLM.from_pretrained(hf)
    assert pt.config.vocab_size == 200
    # the tokenizer truncates where the model's 32 positions end, so a longer text runs through both
    assert tok.model_max_length == pt.config.max_position_embeddings == 32
    import torch
    long_text = " ".join(CORPUS.split()[:60])
    enc = tok(long_text, truncation=True, return_tensors="pt")
    assert enc["input_ids"].shape == (1, 32) and len(tok(long_text)["input_ids"]) > 32
    with torch.no_grad():
        assert pt(**enc).logits.shape == (1, 32, 200)
    fill = transformers.pipeline("fill-mask", model=pt, tokenizer=tok)
    assert len(fill(long_text.replace("return", "[MASK]", 1), tokenizer_kwargs={"truncation": True})) == 5
    assert main(["export", str(wd), str(tmp_path / "hf2")]) == 0
    printed = capsys.readouterr().out
    assert f"BertForMaskedLM.from_pretrained('{tmp_path / 'hf2'}')" in printed and "pip install torch==2.13.0 '.[torch]'" in printed

    assert main(["fill-mask", str(hf), "the break [MASK] terminates", "--top-k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "the break [MASK] terminates" and lines[1].startswith("  [MASK] 1: ")
    assert len(lines[1].split(",")) == 3
    # The workdir itself is a source: same predictions as its export, params as checkpointed.
    assert main(["fill-mask", str(wd), "the break [MASK] terminates", "--top-k", "3"]) == 0
    assert capsys.readouterr().out.splitlines() == lines
    import jaxbert
    from jaxbert.workdir import read_params
    assert jaxbert.convert.tokenizer_path(wd) == prepared / "tok"
    module, params = jaxbert.from_pretrained(wd)
    saved, _ = read_params(wd)
    assert type(module).__name__ == "BertForMaskedLM" and module.config.vocab_size == 200
    leaves = {p: np.asarray(v) for p, v in jaxbert.model.params.flatten(params).items()}
    assert leaves.keys() == jaxbert.model.params.flatten(saved).keys()
    assert all(np.array_equal(v, jaxbert.model.params.flatten(saved)[p]) for p, v in leaves.items())


def test_a_model_that_does_not_fit_the_data_is_refused_by_name(prepared, tmp_path, capsys):
    recipe = write_recipe(tmp_path / "bad.yaml", data={"source": "prepared", "dir": str(prepared / "data"),
                                                       "tokenizer": str(prepared / "tok"), "seq_len": 32})
    rc = main(["train", "--config", str(recipe), "--workdir", str(tmp_path / "run"),
               "--set", "model.config.vocab_size=300"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "200-token vocabulary" in err and "vocab_size 300" in err
    rc = main(["train", "--config", str(recipe), "--workdir", str(tmp_path / "run"), "--set", "data.seq_len=16",
               "--set", "model.config.vocab_size=200"])
    assert rc == 2 and "rows of 32 tokens, not 16" in capsys.readouterr().err
