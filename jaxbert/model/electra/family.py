"""ELECTRA's registry entry: a family whose classes are its own (jaxbert.model.electra: config, modules on BERT's
encoder, heads, key table), reached by the rest of jaxbert through this entry. Its members that reach model code
import it inside the function, so that the entry, and so reading a config, loads no jax."""

from __future__ import annotations

from jaxbert.model.contract import Family, OwnFolder
from jaxbert.model.electra.config import CLASS_NAMES, MODEL_TYPE, ElectraConfig
from jaxbert.model.electra.tf_names import tf_names

_LOGITS = (("logits", "logits"),)
# What parity and the converter read of each class (the fields of jaxbert.model.registry.Head).
CLASS_SPECS = {
    "ElectraModel": dict(pooler=False, base=True, main=("last_hidden_state",)),
    "ElectraForPreTraining": dict(pooler=False, stages=(("rtd logits", "logits"),)),  # replaced-token detection
    "ElectraForMaskedLM": dict(pooler=False, mlm=True, stages=(("mlm logits", "logits"),)),
    "ElectraForSequenceClassification": dict(pooler=False, stages=_LOGITS),
    "ElectraForTokenClassification": dict(pooler=False, stages=_LOGITS),
    "ElectraForQuestionAnswering": dict(pooler=False, stages=(("start logits", "start_logits"),
                                                              ("end logits", "end_logits")),
                                        main=("start_logits", "end_logits")),
    "ElectraForMultipleChoice": dict(pooler=False, choices=True, stages=_LOGITS),
}
assert tuple(CLASS_SPECS) == CLASS_NAMES  # one list of classes, in transformers' order


# Its classes, builder, key table and checkpoint-class reader, read in this folder when first called; a checkpoint
# without architectures is read by its head's modules (the first match wins), else as the bare encoder.
FOLDER = OwnFolder("jaxbert.model.electra", "ELECTRA", ElectraConfig, MODEL_TYPE, CLASS_NAMES, (
    (("discriminator_predictions.dense_prediction",), "ElectraForPreTraining"),
    (("generator_predictions.dense",), "ElectraForMaskedLM"),
    (("classifier.out_proj",), "ElectraForSequenceClassification"),
    (("sequence_summary.summary",), "ElectraForMultipleChoice"),
    (("qa_outputs",), "ElectraForQuestionAnswering"),
    (("classifier",), "ElectraForTokenClassification")), "ElectraModel")
build, infer_class = FOLDER.build, FOLDER.infer_class


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
    config_class=ElectraConfig, model_classes=FOLDER.model_classes, build=FOLDER.build, table=FOLDER.table,
    infer_class=FOLDER.infer_class, mlm_rows=FOLDER.mlm_rows, mlm_decoder="generator_lm_head",
    mlm_bias="generator_lm_head.bias",
    non_embedding_params=non_embedding_params, attended_positions=attended_positions,
    position_limit=lambda config: config.max_position_embeddings,
    class_specs=CLASS_SPECS, pretraining_classes=("ElectraForMaskedLM",),
    describe_init=lambda config, class_name: f"normal(std={config.initializer_range}) kernels, zero biases",
    tf_names=tf_names,  # Google's pretraining bundles: discriminator and generator in one
    also="the released discriminators and generators in transformers' layout",
    differences="its own folder (`jaxbert/model/electra/`) on BERT's encoder: embeddings `embedding_size` wide "
                "and `embeddings_project` to `hidden_size` where they differ; no pooler; `electra.` prefix; heads "
                "`discriminator_predictions` (one logit per token), `generator_predictions` + `generator_lm_head` "
                "(tied to the `embedding_size` table), `classifier.{dense,out_proj}` with GELU, `sequence_summary`")
