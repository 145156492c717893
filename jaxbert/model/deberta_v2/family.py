"""DeBERTa-v2's family entry (DeBERTa-v2 and -v3 checkpoints: model_type ``deberta-v2``): a family with modules,
config and key table of its own (jaxbert.model.deberta_v2), reached by the rest of jaxbert through this entry.
Its members that reach model code import it when called, so that the entry (and reading a config) loads no jax."""

from __future__ import annotations

from jaxbert.model.contract import Family, LayerStack, OwnFolder
from jaxbert.model.deberta_v2.config import CLASS_NAMES, MODEL_TYPE, DebertaV2Config

_LOGITS = (("logits", "logits"),)
# What parity and the converter read of each class (the fields of jaxbert.model.registry.Head).
CLASS_SPECS = {
    "DebertaV2Model": dict(pooler=False, base=True, main=("last_hidden_state",)),
    "DebertaV2ForMaskedLM": dict(pooler=False, mlm=True, stages=(("mlm logits", "logits"),)),
    "DebertaV2ForSequenceClassification": dict(pooler=False, stages=_LOGITS),
    "DebertaV2ForTokenClassification": dict(pooler=False, stages=_LOGITS),
    "DebertaV2ForQuestionAnswering": dict(pooler=False, stages=(("start logits", "start_logits"),
                                                                ("end logits", "end_logits")),
                                          main=("start_logits", "end_logits")),
    "DebertaV2ForMultipleChoice": dict(pooler=False, choices=True, stages=_LOGITS),
    # jaxbert's own: DeBERTa-v3's replaced-token-detection discriminator (transformers has no such class)
    "DebertaV2ForReplacedTokenDetection": dict(pooler=False, stages=(("rtd logits", "logits"),)),
}
assert tuple(CLASS_SPECS) == CLASS_NAMES  # one list of classes


# Its classes, builder, key table and checkpoint-class reader, read in this folder when first called. Without
# architectures: either MLM layout; a pooler with a classifier is sequence classification (transformers' multiple-
# choice checkpoints always name their class); qa_outputs question answering; a classifier alone token
# classification.
FOLDER = OwnFolder("jaxbert.model.deberta_v2", "DeBERTa-v2", DebertaV2Config, MODEL_TYPE, CLASS_NAMES, (
    (("mask_predictions.classifier",), "DebertaV2ForReplacedTokenDetection"),
    (("cls.predictions",), "DebertaV2ForMaskedLM"), (("lm_predictions.lm_head",), "DebertaV2ForMaskedLM"),
    (("pooler.dense", "classifier"), "DebertaV2ForSequenceClassification"),
    (("qa_outputs",), "DebertaV2ForQuestionAnswering"),
    (("classifier",), "DebertaV2ForTokenClassification")), "DebertaV2Model")
infer_class = FOLDER.infer_class
SCAN_CONV = ("scan_layers with conv_kernel_size > 0 is not supported: the conv sits between layer 1 and layer 2, "
             "which one scan over every layer cannot hold (use scan_layers: false)")


def build(class_name: str, config: DebertaV2Config, options=None, **kwargs):
    """The module of a DeBERTa-v2 class name for this config and these options (FOLDER.build), after what this
    family cannot honour, refused by name: scan_layers with a conv layer, an attention_impl other than einsum or
    auto (the relative terms are a score bias no fused kernel takes: jaxbert.model.deberta_v2.attention); auto
    runs einsum."""
    if options is not None and options.scan_layers and getattr(config, "conv_kernel_size", 0) > 0:
        raise ValueError(SCAN_CONV)
    if options is not None and options.attention_impl == "auto":  # "the best path it can run": einsum, its only one
        options = options.replace(attention_impl="einsum")
    if options is not None and options.attention_impl != "einsum":
        raise ValueError(f"attention_impl {options.attention_impl!r}: DeBERTa-v2's relative terms (c2p, p2c) are a "
                         "score bias that only the 'einsum' path takes (docs/attention.md); use einsum or auto")
    return FOLDER.build(class_name, config, options, **kwargs)


def non_embedding_params(config: DebertaV2Config) -> int:
    """Matmul weights of the layers, for the FLOP count: query, key, value and output (4 H^2) and the MLP
    (2 H I). The relative projections act on the 2 span rows of the relative table once per layer, not per token."""
    H, I = config.hidden_size, config.intermediate_size
    return config.num_hidden_layers * (4 * H * H + 2 * H * I)


def attended_positions(config: DebertaV2Config, seq_len: int) -> int:
    """Keys a query attends, summed over the layers, for the FLOP count's attention-score term: every key, plus
    per relative term (c2p, p2c) one product of the query (or key) with each of the 2 span relative embeddings,
    a score matmul without its value product: span keys' worth."""
    terms = len(config.att_terms) if config.relative_attention else 0
    return config.num_hidden_layers * (seq_len + terms * config.att_span)


def _position_limit(config: DebertaV2Config) -> int:
    return config.max_position_embeddings


def _parity_length(config: DebertaV2Config) -> int | None:
    """Inputs reach past the relative span (by 8 tokens), so parity sees the clamped and bucketed distances."""
    if not config.relative_attention:
        return None
    return min(2 * config.att_span + 8, config.max_position_embeddings)


FAMILY = DEBERTA_V2 = Family(
    name="deberta-v2", model_types=(MODEL_TYPE,), class_prefixes={MODEL_TYPE: "DebertaV2"},
    prefix="deberta",
    heads=tuple(name[len("DebertaV2"):] for name in CLASS_SPECS),
    mlm_rows=FOLDER.mlm_rows, mlm_decoder="cls.predictions.decoder", mlm_bias="cls.predictions.bias",
    pretraining_classes=("DebertaV2ForMaskedLM",),
    config_class=DebertaV2Config, model_classes=FOLDER.model_classes,
    build=build, table=FOLDER.table,
    infer_class=infer_class, non_embedding_params=non_embedding_params,
    attended_positions=attended_positions, position_limit=_position_limit,
    describe_init=lambda config, class_name: f"{class_name}'s init: normal({config.initializer_range}), zero biases",
    class_specs=CLASS_SPECS,
    reference_attention="eager", parity_length=_parity_length,  # transformers' DeBERTa-v2 has only its own (eager) attention
    segment_ids=False,  # no packed documents: the conv and the relative positions run across a row
    token_types=True,  # read where type_vocab_size > 0 (v3 has none: its tokenizer's token_type_ids are ignored)
    layer_stack=LayerStack("layer"),  # encoder/layer, as BERT's
    also="and DeBERTa-v3, whose checkpoints are `deberta-v2` configs; a v3 directory's `spm.model` read as its tokenizer",
    differences="its own modules (`jaxbert/model/deberta_v2/`): disentangled attention (`pos_att_type` `c2p` / "
                "`p2c`, scores divided by sqrt(head_dim x (1 + terms))), log-bucketed relative positions "
                "(`position_buckets`, `max_relative_positions`), `share_att_key`, `norm_rel_ebd`, "
                "`position_biased_input`, v2's convolution layer (`conv_kernel_size`), the MLM head in both layouts "
                "(`legacy`: `cls.predictions` / `lm_predictions.lm_head`), the ContextPooler; "
                "`DebertaV2ForReplacedTokenDetection`, jaxbert's own (DeBERTa-v3's RTD discriminator, "
                "`mask_predictions`; transformers has none); only the `einsum` "
                "attention path (`auto` runs it; `dot_product`, `blocked`, `splash` refused by name), and on a TPU v5 "
                "or later the whole disentangled attention in one Pallas kernel (`model.relative_impl`); no packed "
                "documents")
