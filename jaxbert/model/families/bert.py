"""BERT: the family every other encoder here builds on (its modules are jaxbert.model's own)."""

from __future__ import annotations

from jaxbert.model.families.spec import Family


def _mlm_rows(c) -> list:
    H = c.hidden_size
    rows = [("cls.predictions.transform.dense", "dense", (H, H)),
            ("cls.predictions.transform.LayerNorm", "norm", (H,)),
            ("cls.predictions", "bias", (c.vocab_size,))]
    if not c.tie_word_embeddings:
        rows.append(("cls.predictions.decoder", "dense_nobias", (H, c.vocab_size)))
    return rows


BERT = Family(
    name="bert", model_types=("bert",), class_prefixes={"bert": "Bert"}, prefix="bert",
    heads=("Model", "ForMaskedLM", "ForPreTraining", "ForNextSentencePrediction", "ForSequenceClassification",
           "ForTokenClassification", "ForQuestionAnswering", "ForMultipleChoice", "LMHeadModel"),
    mlm_rows=_mlm_rows, mlm_decoder="cls.predictions.decoder", mlm_bias="cls.predictions.bias",
    nsp_module="cls.seq_relationship", pretraining_classes=("BertForMaskedLM", "BertForPreTraining"))
