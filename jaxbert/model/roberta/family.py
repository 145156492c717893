"""RoBERTa's family entry (and XLM-RoBERTa's): BERT's encoder under "roberta.", positions counted from the
padding index, an MLM head named lm_head, a classifier with its own dense layer, no NSP head.

Its modules (the heads, the position ids) are in jaxbert.model.roberta.modules, imported when called.
A family on RoBERTa's modules is a copy of this entry under its own names
(``dataclasses.replace(FAMILY, name=..., model_types=..., class_prefixes=...)``)."""

from __future__ import annotations

from jaxbert.errors import ConfigError
from jaxbert.model.bert import family as bert
from jaxbert.model.bert.config import BertConfig
from jaxbert.model.contract import Family, model_code


def _mlm_rows(c) -> list:
    H = c.hidden_size
    rows = [("lm_head.dense", "dense", (H, H)), ("lm_head.layer_norm", "norm", (H,)),
            ("lm_head", "bias", (c.vocab_size,))]
    if not c.tie_word_embeddings:
        rows.append(("lm_head.decoder", "dense_nobias", (H, c.vocab_size)))
    return rows


def _offset(config) -> int:
    """Rows of the position table before the first position: pad_token_id + 1."""
    return (config.pad_token_id or 0) + 1


def _check(config) -> None:
    from_pad = isinstance(config.pad_token_id, int) and not isinstance(config.pad_token_id, bool)
    if not from_pad:
        raise ConfigError(f"pad_token_id must be an integer for model_type {config.model_type!r} (its positions "
                           f"start at pad_token_id + 1), got {config.pad_token_id!r}")
    if config.max_position_embeddings <= config.pad_token_id + 1:
        raise ConfigError(f"max_position_embeddings ({config.max_position_embeddings}) leaves no room for "
                           f"{config.model_type} positions, which start at pad_token_id + 1")


def _position_ids(input_ids, config):
    position_ids = model_code("jaxbert.model.roberta.modules").position_ids
    return position_ids(input_ids, config)


def _classes(family) -> dict:
    """Its classes under its names: RoBERTa's and XLM-RoBERTa's own (jaxbert.model.roberta.modules); a copy
    of this entry under other names gets BERT's classes subclassed under those."""
    named_classes = model_code("jaxbert.model.bert.heads").named_classes
    MODEL_CLASSES = model_code("jaxbert.model.roberta.modules").MODEL_CLASSES
    return named_classes(family, MODEL_CLASSES)


def _mlm_head(config, options, **kwargs):
    RobertaLMHead = model_code("jaxbert.model.roberta.modules").RobertaLMHead
    return RobertaLMHead(config, options, **kwargs)


def _classifier(config, options, **kwargs):
    RobertaClassificationHead = model_code("jaxbert.model.roberta.modules").RobertaClassificationHead
    return RobertaClassificationHead(config, options, **kwargs)


FAMILY = ROBERTA = Family(
    name="roberta", model_types=("roberta", "xlm-roberta"),
    class_prefixes={"roberta": "Roberta", "xlm-roberta": "XLMRoberta"}, prefix="roberta",
    heads=("Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering",
           "ForMultipleChoice"),
    mlm_rows=_mlm_rows, mlm_decoder="lm_head.decoder", mlm_bias="lm_head.bias",
    position_offset=_offset, position_ids=_position_ids,
    zero_position_pad=True, check_config=_check, pad_is_position_origin=True,
    mlm_head=_mlm_head, mlm_head_name="lm_head", seq_classifier=_classifier,
    seq_classifier_rows=lambda c: [("classifier.dense", "dense", (c.hidden_size, c.hidden_size)),
                                   ("classifier.out_proj", "dense", (c.hidden_size, c.num_labels))],
    pretraining_classes=("RobertaForMaskedLM", "XLMRobertaForMaskedLM"),
    builds_on="bert", config_class=BertConfig, model_classes=_classes, build=bert.build,
    table=bert.table, infer_class=bert.infer_class,
    non_embedding_params=bert.non_embedding_params, attended_positions=bert.attended_positions,
    position_limit=lambda c: c.max_position_embeddings - _offset(c),
    special_tokens={"pad": "<pad>", "unk": "<unk>", "cls": "<s>", "sep": "</s>", "mask": "<mask>"},
    also="and models built on them: e5, bge-m3, multilingual-e5",
    differences="`roberta.` prefix; position ids from `pad_token_id + 1` following the padding; one token type; "
                "`lm_head.*`; `classifier.{dense,out_proj}` instead of a pooler")
