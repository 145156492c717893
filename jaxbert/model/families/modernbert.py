"""ModernBERT (and mmBERT, Ettin's encoders): a family with modules, config and key table of its own
(jaxbert.model.modernbert), reached by the rest of jaxbert through this entry."""

from __future__ import annotations

from jaxbert.model import modernbert
from jaxbert.model.families.spec import Family
from jaxbert.model.modernbert.table import head_rows

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
    position_limit=lambda config: config.max_position_embeddings)  # rotary: no position table to run out of
