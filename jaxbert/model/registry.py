"""Every model class, described once: what it carries and how its params are named.

The converter (the key table), the parity tool and the tests read this
registry; nothing else lists the classes or their heads.

A ``Family`` (jaxbert.model.families) says how one model family names its modules
in a transformers state dict (the encoder's prefix, its MLM head); a ``Head`` says
what one class carries on top of the encoder. A head's param rows are
``(module path, module kind, dims)``: the kind names the tensors the module
holds ("dense", "dense_nobias", "norm", "embed", "bias"), and the dims size them.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from jaxbert.model.config import bert_class_name
from jaxbert.model.families import BY_MODEL_TYPE, Family, family_of_class
from jaxbert.model.families.bert import BERT
from jaxbert.model.families.spec import Head

__all__ = ["HEADS", "Family", "Head", "for_config", "head", "main_output", "spec_of"]


def _classifier(features: Callable) -> Callable:
    return lambda c: [("classifier", "dense", (c.hidden_size, features(c)))]


_MLM_STAGES = (("mlm logits", "logits"),)
HEADS = {h.name: h for h in (
    Head("BertModel", BERT, pooler=True, cross_attention=True, base=True, main=("last_hidden_state",)),
    Head("BertForMaskedLM", BERT, pooler=False, mlm=True, cross_attention=True, stages=_MLM_STAGES),
    Head("BertForPreTraining", BERT, pooler=True, mlm=True, nsp=True,
         stages=(("mlm logits", "prediction_logits"), ("nsp logits", "seq_relationship_logits")),
         main=("prediction_logits",)),
    Head("BertForNextSentencePrediction", BERT, pooler=True, nsp=True, stages=(("nsp logits", "logits"),)),
    Head("BertForSequenceClassification", BERT, pooler=True, extra_rows=_classifier(lambda c: c.num_labels),
         stages=(("logits", "logits"),)),
    Head("BertForTokenClassification", BERT, pooler=False, extra_rows=_classifier(lambda c: c.num_labels),
         stages=(("logits", "logits"),)),
    Head("BertForQuestionAnswering", BERT, pooler=False,
         extra_rows=lambda c: [("qa_outputs", "dense", (c.hidden_size, c.num_labels))],
         stages=(("start logits", "start_logits"), ("end logits", "end_logits")),
         main=("start_logits", "end_logits")),
    Head("BertForMultipleChoice", BERT, pooler=True, choices=True, extra_rows=_classifier(lambda c: 1),
         stages=(("logits", "logits"),)),
    Head("BertLMHeadModel", BERT, pooler=False, mlm=True, cross_attention=True, decoder=True,
         stages=_MLM_STAGES),
)}


def head(name: str) -> Head:
    """The registry entry of a class name; KeyError naming the known ones."""
    if name not in HEADS:
        raise KeyError(f"unknown model class {name!r}; expected one of {sorted(HEADS)}")
    return HEADS[name]


def main_output(spec: Head, out, stack: Callable):
    """The head's main output from either framework's output object (``stack`` is
    np.stack, jnp.stack or torch.stack, used when it is several arrays)."""
    values = [getattr(out, attr) for attr in spec.main]
    return values[0] if len(values) == 1 else stack(values, -1)


def for_config(spec: Head, config) -> Head:
    """The class as the config's family names it (a Bert* class takes its family from the config)."""
    family = BY_MODEL_TYPE[config.model_type]
    if family is spec.family:
        return spec
    changes = {"family": family}
    if spec.name == "BertForSequenceClassification" and family.seq_classifier_rows is not None:
        # the family's own classifier on the first token, with no pooler (RoBERTa's dense -> tanh -> out_proj)
        changes.update(pooler=False, extra_rows=family.seq_classifier_rows)
    return dataclasses.replace(spec, **changes)


def spec_of(name: str, config=None) -> Head:
    """The registry entry of any family's class name: a family with classes of its own lists them
    (``Family.class_specs``); a BERT-built class is its BERT class's entry, under the config's family."""
    family = family_of_class(name)
    if family is not None and not family.builds_on_bert:
        return Head(name, family, **family.class_specs[name])
    spec = head(bert_class_name(name))
    return spec if config is None else for_config(spec, config)
