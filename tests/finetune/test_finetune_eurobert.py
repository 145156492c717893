"""jaxbert finetune and fill-mask from a EuroBERT source: the task model is the family's head class
(EuroBertForSequenceClassification with the source's classifier_pooling, EuroBertForTokenClassification), the
encoder comes from the source and the head is fresh; classification and token tagging learn their planted
pattern, and the export loads in transformers 5 and gives the logits `jaxbert predict` computes."""

from __future__ import annotations

import json
import random

import jax
import numpy as np
import pytest

pytest.importorskip("transformers.models.eurobert", reason="EuroBERT is in transformers >= 5 (README's test command installs it)")

from jaxbert.bench.e2e import save_with_tokenizer  # noqa: E402
from jaxbert.cli.main import main  # noqa: E402
from jaxbert.data.tokenizer import load_tokenizer, train_tokenizer  # noqa: E402
from jaxbert.finetune import loop as loop_lib  # noqa: E402
from jaxbert.finetune.predict import _featurize, load_finetuned, read_examples, run_model  # noqa: E402
from jaxbert.finetune.recipe import load  # noqa: E402
from jaxbert.finetune.task_data import parse_task  # noqa: E402
from jaxbert.model.eurobert import EuroBertConfig, build  # noqa: E402
from tests.helpers.finetune_data import WORDS, write_kind  # noqa: E402

QUIET = lambda m: None  # noqa: E731


def make_eurobert_source(root, pooling: str):
    """A EuroBertForMaskedLM (random weights, jaxbert's init; 2 layers, 4 heads on 2 key/value heads) with a
    made WordPiece tokenizer, saved as a Hugging Face directory; its [PAD] / [CLS] / [SEP] / [MASK] ids in the
    config, classifier_pooling `pooling`."""
    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.txt").write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(400)))
    tok_dir = train_tokenizer([str(root / "corpus.txt")], 200, root / "tok", overwrite=True)
    tok = load_tokenizer(tok_dir)
    ids = {t: tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]")}
    cfg = EuroBertConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=ids["[PAD]"], bos_token_id=ids["[CLS]"], eos_token_id=ids["[SEP]"],
                         mask_token_id=ids["[MASK]"], classifier_pooling=pooling,
                         rope_parameters={"rope_type": "default", "rope_theta": 250000.0})
    model = build("EuroBertForMaskedLM", cfg)
    x = jax.numpy.zeros((1, 8), jax.numpy.int32)
    src = save_with_tokenizer(root / "src", model, model.init(jax.random.PRNGKey(0), x)["params"], tok_dir)
    tc = json.loads((src / "tokenizer_config.json").read_text())
    tc["model_input_names"] = ["input_ids", "attention_mask"]  # EuroBERT has no token types
    (src / "tokenizer_config.json").write_text(json.dumps(tc, indent=2) + "\n")
    return src


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return {p: make_eurobert_source(tmp_path_factory.mktemp(f"eb-{p}"), p) for p in ("late", "bos")}


def _check_export(best, kind, class_name, dev, pooling):
    """best/ is the EuroBert class of the kind with the source's pooling; transformers' logits equal ours."""
    import torch
    import transformers
    config = json.loads((best / "config.json").read_text())
    assert config["model_type"] == "eurobert" and config["architectures"] == [class_name]
    assert config["classifier_pooling"] == pooling
    m = load_finetuned(best)
    assert m.kind == kind and type(m.module).__name__ == class_name
    features, _ = _featurize(m, read_examples(m, dev, labelled=False)[:12])
    ours = run_model(m, features)["logits"]
    model = getattr(transformers, class_name).from_pretrained(str(best)).eval()
    with torch.no_grad():
        theirs = model(**{k: torch.tensor(features.arrays[k], dtype=torch.long)
                          for k in ("input_ids", "attention_mask")}).logits.numpy()
    if kind == "tokens":
        mask = features.arrays["attention_mask"].astype(bool)
        ours, theirs = ours[mask], theirs[mask]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind,pooling,class_name,metric,least", [
    ("classification", "late", "EuroBertForSequenceClassification", "accuracy", 0.85),
    ("classification", "bos", "EuroBertForSequenceClassification", "accuracy", 0.85),
    ("tokens", "late", "EuroBertForTokenClassification", "entity_f1", 0.8),
])
def test_a_eurobert_head_fine_tunes_and_its_export_loads_in_transformers(sources, tmp_path, kind, pooling,
                                                                         class_name, metric, least):
    train, dev = write_kind(tmp_path / "data", kind, n_train=192, n_eval=48)
    recipe = load("finetune-tiny", ["train.epochs=3"])
    summary = loop_lib.finetune(recipe, parse_task(kind, train, [dev]), sources[pooling], tmp_path / "run", log=QUIET)
    assert summary["status"] == "finished"
    assert summary["best"]["evals"]["dev"][metric] >= least, summary["history"]
    _check_export(tmp_path / "run" / "best", kind, class_name, dev, pooling)


def test_fill_mask_reads_the_lm_head(sources, capsys):
    """fill-mask on the source (its tokenizer spells [MASK]; EuroBERT's own is <|mask|>, looked for first)."""
    assert main(["fill-mask", str(sources["late"]), "the cat sat on the [MASK] ."]) == 0
    out = capsys.readouterr().out
    assert "[MASK] 1:" in out and len(out.splitlines()[1].split(",")) == 5
