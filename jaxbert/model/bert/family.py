"""BERT's family entry: a family like the others, whose modules (jaxbert.model.bert: modules, encoder,
heads) other families build on (RoBERTa). The members that reach model code import it when called, so
that this entry (and reading a config) loads no jax."""

from __future__ import annotations

from jaxbert.model.bert.config import BertConfig
from jaxbert.model.contract import Family, model_code


def table(config, model_class: str, scan_layers: bool = False, add_pooling_layer=None):
    """The converter's key table of a class on BERT's modules (RoBERTa's too): jaxbert.model.bert.table.Table."""
    Table = model_code("jaxbert.model.bert.table").Table
    return Table(config, model_class, scan_layers, add_pooling_layer)


def infer_class(config, keys):
    """The class a checkpoint on BERT's modules was saved from (jaxbert.model.bert.table.infer_class)."""
    infer = model_code("jaxbert.model.bert.table").infer_class
    return infer(config, keys)


def build(model_class: str, config, options=None, **kwargs):
    """A class on BERT's modules, built (the build of every family on them)."""
    build_bert_class = model_code("jaxbert.model.bert.heads").build_bert_class
    return build_bert_class(model_class, config, *(() if options is None else (options,)), **kwargs)


def model_classes(family: Family) -> dict:
    """A family on BERT's modules' classes under its own names (jaxbert.model.bert.heads.named_classes)."""
    named_classes = model_code("jaxbert.model.bert.heads").named_classes
    return named_classes(family)


def mlm_head(config, options, **kwargs):
    BertOnlyMLMHead = model_code("jaxbert.model.bert.heads").BertOnlyMLMHead
    return BertOnlyMLMHead(config, options, **kwargs)


def _mlm_rows(c) -> list:
    H = c.hidden_size
    rows = [("cls.predictions.transform.dense", "dense", (H, H)),
            ("cls.predictions.transform.LayerNorm", "norm", (H,)),
            ("cls.predictions", "bias", (c.vocab_size,))]
    if not c.tie_word_embeddings:
        rows.append(("cls.predictions.decoder", "dense_nobias", (H, c.vocab_size)))
    return rows


def _classifier(features):
    return lambda c: [("classifier", "dense", (c.hidden_size, features(c)))]


def non_embedding_params(c) -> int:
    """Matmul weights of the layers, for the FLOP count: Q, K, V, O (4 H^2) and the MLP (2 H I)."""
    H, I = c.hidden_size, c.intermediate_size
    return c.num_hidden_layers * (4 * H * H + 2 * H * I)


def attended_positions(c, seq_len: int) -> int:
    """Keys a query attends summed over the layers: every layer attends all T."""
    return c.num_hidden_layers * seq_len


_MLM_STAGES = (("mlm logits", "logits"),)
# What parity and the converter read of each class (the fields of jaxbert.model.registry.Head).
CLASS_SPECS = {
    "BertModel": dict(pooler=True, cross_attention=True, base=True, main=("last_hidden_state",)),
    "BertForMaskedLM": dict(pooler=False, mlm=True, cross_attention=True, stages=_MLM_STAGES),
    "BertForPreTraining": dict(pooler=True, mlm=True, nsp=True,
                               stages=(("mlm logits", "prediction_logits"), ("nsp logits", "seq_relationship_logits")),
                               main=("prediction_logits",)),
    "BertForNextSentencePrediction": dict(pooler=True, nsp=True, stages=(("nsp logits", "logits"),)),
    "BertForSequenceClassification": dict(pooler=True, sequence_classifier=True, extra_rows=_classifier(lambda c: c.num_labels),
                                          stages=(("logits", "logits"),)),
    "BertForTokenClassification": dict(pooler=False, extra_rows=_classifier(lambda c: c.num_labels),
                                       stages=(("logits", "logits"),)),
    "BertForQuestionAnswering": dict(pooler=False,
                                     extra_rows=lambda c: [("qa_outputs", "dense", (c.hidden_size, c.num_labels))],
                                     stages=(("start logits", "start_logits"), ("end logits", "end_logits")),
                                     main=("start_logits", "end_logits")),
    "BertForMultipleChoice": dict(pooler=True, choices=True, extra_rows=_classifier(lambda c: 1),
                                  stages=(("logits", "logits"),)),
    "BertLMHeadModel": dict(pooler=False, mlm=True, cross_attention=True, decoder=True, stages=_MLM_STAGES),
}

FAMILY = BERT = Family(
    name="bert", model_types=("bert",), class_prefixes={"bert": "Bert"}, prefix="bert",
    heads=tuple(name[len("Bert"):] for name in CLASS_SPECS),
    mlm_rows=_mlm_rows, mlm_decoder="cls.predictions.decoder", mlm_bias="cls.predictions.bias",
    nsp_module="cls.seq_relationship", pretraining_classes=("BertForMaskedLM", "BertForPreTraining"),
    mlm_head=mlm_head, config_class=BertConfig, model_classes=model_classes, build=build,
    class_specs=CLASS_SPECS, table=table, infer_class=infer_class,
    non_embedding_params=non_embedding_params, attended_positions=attended_positions,
    position_limit=lambda c: c.max_position_embeddings,
    describe_init=lambda c, class_name: f"normal(std={c.initializer_range}) kernels, zero biases",
    also="also a `bert_config.json` with no `model_type`", differences="—")
