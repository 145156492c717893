"""ELECTRA's registry entry: a family whose classes are its own (jaxbert.model.electra: config, modules on BERT's
encoder, heads, key table), reached by the rest of jaxbert through this entry. Its members that reach model code
import it inside the function, so that the entry, and so reading a config, loads no jax."""

from __future__ import annotations

from jaxbert.model.electra.config import CLASS_NAMES, MODEL_TYPE, ElectraConfig
from jaxbert.model.contract import Family

_LOGITS = (("logits", "logits"),)
# What parity and the converter read of each class (the fields of jaxbert.model.registry.Head).
CLASS_SPECS = {
    "ElectraModel": dict(pooler=False, base=True, main=("last_hidden_state",)),
    "ElectraForPreTraining": dict(pooler=False, stages=(("discriminator logits", "logits"),)),
    "ElectraForMaskedLM": dict(pooler=False, mlm=True, stages=(("mlm logits", "logits"),)),
    "ElectraForSequenceClassification": dict(pooler=False, stages=_LOGITS),
    "ElectraForTokenClassification": dict(pooler=False, stages=_LOGITS),
    "ElectraForQuestionAnswering": dict(pooler=False, stages=(("start logits", "start_logits"),
                                                              ("end logits", "end_logits")),
                                        main=("start_logits", "end_logits")),
    "ElectraForMultipleChoice": dict(pooler=False, choices=True, stages=_LOGITS),
}
assert tuple(CLASS_SPECS) == CLASS_NAMES  # noqa: S101 (one list of classes)


def model_classes(family) -> dict:
    from jaxbert.model.electra.heads import MODEL_CLASSES
    return dict(MODEL_CLASSES)


def build(class_name: str, config: ElectraConfig, options=None, **kwargs):
    """The module of an ELECTRA class name for this config and these options (its classes take no other
    keywords: no pooler); options it cannot honour (decode) are refused by name."""
    from jaxbert.model.electra.heads import MODEL_CLASSES
    from jaxbert.model.options import ModelOptions
    from jaxbert.model.own_classes import build_class
    options = ModelOptions() if options is None else options
    return build_class("ELECTRA", MODEL_CLASSES, ElectraConfig, MODEL_TYPE, class_name, config, options, kwargs)


def table(config, model_class: str, scan_layers: bool = False, add_pooling_layer=None):
    """The converter's key table (jaxbert.model.electra.table)."""
    from jaxbert.model.electra.table import family_table
    return family_table(config, model_class, scan_layers, add_pooling_layer)


def mlm_rows(config) -> list:
    from jaxbert.model.electra.table import mlm_rows as rows
    return rows(config)


def infer_class(config: ElectraConfig, keys: list) -> str | None:
    """An ELECTRA checkpoint's class: its architectures entry, else what its head keys say; None when
    architectures names only classes jaxbert's ELECTRA does not have (ElectraForCausalLM)."""
    from jaxbert.model.own_classes import class_of_checkpoint
    return class_of_checkpoint(config, keys, CLASS_NAMES, (
        (("discriminator_predictions.dense_prediction",), "ElectraForPreTraining"),
        (("generator_predictions.dense",), "ElectraForMaskedLM"),
        (("classifier.out_proj",), "ElectraForSequenceClassification"),
        (("sequence_summary.summary",), "ElectraForMultipleChoice"),
        (("qa_outputs",), "ElectraForQuestionAnswering"),
        (("classifier",), "ElectraForTokenClassification")), "ElectraModel")


def non_embedding_params(config: ElectraConfig) -> int:
    """Matmul weights of the layers, for the FLOP count: Q, K, V, O (4 H^2) and the MLP (2 H I) per layer, and
    embeddings_project (E H) where the widths differ."""
    H, I = config.hidden_size, config.intermediate_size
    project = config.embedding_size * H if config.projects_embeddings else 0
    return config.num_hidden_layers * (4 * H * H + 2 * H * I) + project


def attended_positions(config: ElectraConfig, seq_len: int) -> int:
    """Keys a query attends summed over the layers: every layer attends all T."""
    return config.num_hidden_layers * seq_len


FAMILY = ELECTRA = Family(
    name="electra", model_types=(MODEL_TYPE,), class_prefixes={MODEL_TYPE: "Electra"}, prefix="electra",
    heads=tuple(name[len("Electra"):] for name in CLASS_SPECS),
    config_class=ElectraConfig, model_classes=model_classes, build=build, table=table, infer_class=infer_class,
    mlm_rows=mlm_rows, mlm_decoder="generator_lm_head", mlm_bias="generator_lm_head.bias",
    non_embedding_params=non_embedding_params, attended_positions=attended_positions,
    position_limit=lambda config: config.max_position_embeddings,
    class_specs=CLASS_SPECS, pretraining_classes=("ElectraForMaskedLM",),
    describe_init=lambda config, class_name: f"normal(std={config.initializer_range}) kernels, zero biases",
    also="ELECTRA's discriminators and generators (Google's TF checkpoints too)",
    differences="its own folder (`jaxbert/model/electra/`) on BERT's encoder: embeddings `embedding_size` wide "
                "and `embeddings_project` to `hidden_size` where they differ; no pooler; `electra.` prefix; heads "
                "`discriminator_predictions` (one logit per token), `generator_predictions` + `generator_lm_head` "
                "(tied to the `embedding_size` table), `classifier.{dense,out_proj}` with GELU, `sequence_summary`")
