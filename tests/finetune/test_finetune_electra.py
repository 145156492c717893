"""jaxbert finetune and fill-mask from ELECTRA sources: fine-tuning starts from the discriminator
(ElectraForPreTraining, as ELECTRA is fine-tuned), its encoder read and each kind's ELECTRA head fresh;
classification, token tagging, extractive QA and multiple choice learn their planted patterns, and the exports load
in transformers and give the outputs `jaxbert predict` computes. fill-mask reads the generator's head."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

from jaxbert.cli.main import main
from jaxbert.finetune import loop as loop_lib
from jaxbert.finetune.predict import _featurize, load_finetuned, read_examples, run_model
from jaxbert.finetune.recipe import load
from jaxbert.finetune.task_data import parse_task
from tests.helpers.electra import make_electra_source
from tests.helpers.finetune_data import write_kind

QUIET = lambda m: None
# kind -> (ELECTRA class, metric of the dev set, the least it must reach), as tests/finetune/test_finetune_run.py's
KINDS = {"classification": ("ElectraForSequenceClassification", "accuracy", 0.9),
         "tokens": ("ElectraForTokenClassification", "entity_f1", 0.9),
         "qa": ("ElectraForQuestionAnswering", "f1", 0.6),
         "choice": ("ElectraForMultipleChoice", "accuracy", 0.6)}


@pytest.fixture(scope="module")
def discriminator(tmp_path_factory):
    return make_electra_source(tmp_path_factory.mktemp("electra-disc"))


def _torch_outputs(best, class_name, features):
    model = getattr(transformers, class_name).from_pretrained(str(best)).eval()
    with torch.no_grad():
        return model(**{k: torch.tensor(features.arrays[k], dtype=torch.long)
                        for k in ("input_ids", "token_type_ids", "attention_mask")})


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_fine_tunes_the_discriminator_and_its_export_loads_in_transformers(discriminator, tmp_path, kind):
    class_name, metric, least = KINDS[kind]
    train, dev = write_kind(tmp_path / "data", kind, n_train=192, n_eval=64)
    summary = loop_lib.finetune(load("finetune-tiny", []), parse_task(kind, train, [dev]), discriminator,
                                tmp_path / "run", log=QUIET)
    assert summary["status"] == "finished"
    assert summary["best"]["evals"]["dev"][metric] >= least, summary["history"]
    best = tmp_path / "run" / "best"
    config = json.loads((best / "config.json").read_text())
    assert config["model_type"] == "electra" and config["architectures"] == [class_name]
    assert config["embedding_size"] == 16
    m = load_finetuned(best)
    assert m.kind == kind and type(m.module).__name__ == class_name
    features, _ = _featurize(m, read_examples(m, dev, labelled=False)[:12])
    ours, theirs = run_model(m, features), _torch_outputs(best, class_name, features)
    mask = features.arrays["attention_mask"].astype(bool)
    for key in (("start_logits", "end_logits") if kind == "qa" else ("logits",)):
        a, b = ours[key], getattr(theirs, key).numpy()
        if kind in ("qa", "tokens"):
            a, b = a[mask], b[mask]
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_fill_mask_reads_the_generator(tmp_path, capsys):
    generator = make_electra_source(tmp_path / "gen", "ElectraForMaskedLM")
    assert main(["fill-mask", str(generator), "the cat sat on the [MASK] ."]) == 0
    out = capsys.readouterr().out
    assert "[MASK] 1:" in out and len(out.splitlines()[1].split(",")) == 5
    # the scores are the generator's: transformers' ElectraForMaskedLM ranks the same first token
    from jaxbert.data.tokenizer import load_tokenizer
    tok = load_tokenizer(generator)
    ids = tok.encode("the cat sat on the [MASK] .").ids
    with torch.no_grad():
        logits = transformers.ElectraForMaskedLM.from_pretrained(str(generator)).eval()(
            torch.tensor([ids])).logits[0, ids.index(tok.token_to_id("[MASK]"))]
    assert tok.id_to_token(int(logits.argmax())) in out.splitlines()[1].split(",")[0]
