"""ModernBERT's family entry: a family with modules, config and key table of its own (jaxbert.model.modernbert),
reached by the rest of jaxbert through this entry. Its members that reach model code import it when
called, so that the entry (and reading a config) loads no jax."""


from __future__ import annotations

from jaxbert.model.contract import Family, LayerStack, OwnFolder
from jaxbert.model.modernbert.config import CLASS_NAMES, FULL, MODEL_TYPE, SLIDING, ModernBertConfig

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
    if all(kind == "full_attention" for kind in config.layer_kinds):
        return None
    return min(config.local_attention + 8, config.max_position_embeddings)


# Its classes, builder, key table and checkpoint-class reader, read in this folder when first called.
FOLDER = OwnFolder("jaxbert.model.modernbert", "ModernBERT", ModernBertConfig, MODEL_TYPE, CLASS_NAMES,
                   ((("decoder",), "ModernBertForMaskedLM"), (("classifier",), "ModernBertForSequenceClassification")), "ModernBertModel")
build, infer_class = FOLDER.build, FOLDER.infer_class


def non_embedding_params(config: ModernBertConfig) -> int:
    """Matmul weights of the layers, for the FLOP count: Wqkv + Wo (4 H^2) and GeGLU's Wi + Wo (3 H I)."""
    H, I = config.hidden_size, config.intermediate_size
    return config.num_hidden_layers * (4 * H * H + 3 * H * I)


def attended_positions(config: ModernBertConfig, seq_len: int) -> int:
    """Keys a query attends, summed over the layers: T on a global layer, at most the window's
    2 * half_window + 1 on a sliding one (the FLOP count's attention-score term)."""
    local = min(seq_len, 2 * config.half_window + 1) if SLIDING in config.layer_kinds else seq_len
    return sum(seq_len if kind == FULL else local for kind in config.layer_kinds)


FAMILY = MODERNBERT = Family(
    name="modernbert", model_types=("modernbert",), class_prefixes={"modernbert": "ModernBert"},
    prefix="model",
    heads=tuple(name[len("ModernBert"):] for name in CLASS_SPECS),
    mlm_rows=FOLDER.mlm_rows, mlm_decoder="decoder", mlm_bias="decoder.bias",
    pretraining_classes=("ModernBertForMaskedLM",),
    config_class=ModernBertConfig, model_classes=FOLDER.model_classes,
    build=FOLDER.build, table=FOLDER.table,
    infer_class=FOLDER.infer_class, non_embedding_params=non_embedding_params,
    attended_positions=attended_positions,
    position_limit=lambda config: config.max_position_embeddings,  # rotary: no position table to run out of
    class_specs=CLASS_SPECS, final_norm="final_norm",
    # transformers' eager path takes its softmax in float32 even in a float64 model; sdpa stays float64
    reference_attention="sdpa", parity_length=_parity_length,
    segment_ids=True,  # packed documents: per-document masks (global and sliding) and RoPE positions
    token_types=False,  # no token-type table: transformers' tokenizer gives input_ids, attention_mask
    fused_outputs={"Wqkv": 3, "Wi": 2},  # q, k, v side by side; GeGLU's input and gate halves
    embedding_path="embeddings/tok_embeddings/embedding",
    # layer 0 stands alone (its attention norm is the identity); 1 .. L-1 are one scanned stack
    layer_stack=LayerStack("layers", "scan", first=1),
    also="and mmBERT, the Ettin encoders: the same classes",
    differences="its own modules (`jaxbert/model/modernbert/`): pre-norm layers, one `Wqkv`, rotary positions with a "
                "global and a local theta, local layers attending within `local_attention // 2` on each side "
                "(banded mask; `local_window_size` on the `dot_product` path; only the window's blocks with "
                "`attention_impl: blocked`, `splash` or `auto`), GeGLU, no token types; config "
                "fields in 4.x and 5.x spellings; fields jaxbert cannot honour (an unknown `layer_types` entry, an "
                "odd window) refused by name")
