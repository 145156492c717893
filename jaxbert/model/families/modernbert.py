"""ModernBERT (and mmBERT, Ettin's encoders): a family with modules, config and key table of its own
(jaxbert.model.modernbert), reached by the rest of jaxbert through this entry."""

from __future__ import annotations

from jaxbert.model import modernbert
from jaxbert.model.families.spec import Family
from jaxbert.model.modernbert.table import head_rows

_LOGITS = (("logits", "logits"),)
# What parity and the converter read of each class (the fields of jaxbert.model.registry.Head).
CLASS_SPECS = {
    "ModernBertModel": dict(pooler=False, base=True, main=("last_hidden_state",)),
    "ModernBertForMaskedLM": dict(pooler=False, mlm=True, stages=(("mlm logits", "logits"),)),
    "ModernBertForSequenceClassification": dict(pooler=False, stages=_LOGITS),
    "ModernBertForTokenClassification": dict(pooler=False, stages=_LOGITS),
    "ModernBertForQuestionAnswering": dict(pooler=False, stages=(("start logits", "start_logits"),
                                                                 ("end logits", "end_logits")),
                                           main=("start_logits", "end_logits")),
    "ModernBertForMultipleChoice": dict(pooler=False, choices=True, stages=_LOGITS),
}


def _parity_length(config) -> int | None:
    """Inputs reach past a sliding layer's window (by 8 tokens), so parity sees the band's edge."""
    if modernbert.config.SLIDING not in config.layer_kinds:
        return None
    return min(config.local_attention + 8, config.max_position_embeddings)


MODERNBERT = Family(
    name="modernbert", model_types=(modernbert.MODEL_TYPE,), class_prefixes={modernbert.MODEL_TYPE: "ModernBert"},
    prefix=modernbert.table.PREFIX,
    heads=tuple(name[len("ModernBert"):] for name in modernbert.CLASS_NAMES),
    mlm_rows=lambda c: head_rows(c, "ModernBertForMaskedLM"), mlm_decoder="decoder", mlm_bias="decoder.bias",
    pretraining_classes=("ModernBertForMaskedLM",),
    config_class=modernbert.ModernBertConfig, model_classes=modernbert.MODEL_CLASSES, build=modernbert.build,
    table=lambda config, model_class, scan_layers=False, add_pooling_layer=None: modernbert.Table(
        config, model_class, scan_layers),
    params_scanned=modernbert.is_scanned, dummy_inputs=modernbert.dummy_inputs, infer_class=modernbert.infer_class,
    non_embedding_params=modernbert.non_embedding_params,
    attended_positions=modernbert.attended_positions,
    position_limit=lambda config: config.max_position_embeddings,  # rotary: no position table to run out of
    class_specs=CLASS_SPECS, final_norm="final_norm",
    # transformers' eager path takes its softmax in float32 even in a float64 model; sdpa stays float64
    reference_attention="sdpa", parity_length=_parity_length,
    segment_ids=True,  # packed documents: per-document masks (global and sliding) and RoPE positions
    token_types=False,
    fused_outputs={"Wqkv": 3, "Wi": 2})  # q, k, v side by side; GeGLU's input and gate halves  # no token-type table: transformers' tokenizer gives input_ids, attention_mask
