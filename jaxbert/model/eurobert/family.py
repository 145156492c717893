"""EuroBERT's family entry: a family with modules, config and key table of its own (jaxbert.model.eurobert),
reached by the rest of jaxbert through this entry. Its members that reach model code import it when
called, so that the entry (and reading a config) loads no jax."""


from __future__ import annotations

import types

from jaxbert.model.contract import Family, LayerStack, OwnFolder
from jaxbert.model.eurobert.config import CLASS_NAMES, MODEL_TYPE, EuroBertConfig

_LOGITS = (("logits", "logits"),)
# What parity and the converter read of each class (the fields of jaxbert.model.registry.Head).
CLASS_SPECS = {
    "EuroBertModel": dict(pooler=False, base=True, main=("last_hidden_state",)),
    "EuroBertForMaskedLM": dict(pooler=False, mlm=True, stages=(("mlm logits", "logits"),)),
    "EuroBertForSequenceClassification": dict(pooler=False, stages=_LOGITS),
    "EuroBertForTokenClassification": dict(pooler=False, stages=_LOGITS),
}


def float64_reference(model) -> None:
    """transformers' EuroBertRMSNorm takes its mean square in float32 and casts back, whatever the model's
    dtype: in a float64 model every norm is float32-exact only (1e-8 on the outputs). Parity's float64
    reference gets norms that stay in its dtype, as jaxbert's RMSNorm does in float64."""

    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * (variance + self.variance_epsilon).rsqrt())

    for module in model.modules():
        if type(module).__name__ == "EuroBertRMSNorm":
            module.forward = types.MethodType(forward, module)


# Its classes, builder, key table and checkpoint-class reader, read in this folder when first called.
FOLDER = OwnFolder("jaxbert.model.eurobert", "EuroBERT", EuroBertConfig, MODEL_TYPE, CLASS_NAMES,
                   ((("lm_head",), "EuroBertForMaskedLM"), (("classifier", "dense"), "EuroBertForSequenceClassification"),
     (("classifier",), "EuroBertForTokenClassification")), "EuroBertModel")
build, infer_class = FOLDER.build, FOLDER.infer_class


def non_embedding_params(config: EuroBertConfig) -> int:
    """Matmul weights of the layers, for the FLOP count: q_proj and o_proj (2 H N D), k_proj and v_proj
    (2 H K D) and SwiGLU's three (3 H I)."""
    H, I, D = config.hidden_size, config.intermediate_size, config.head_dim
    N, K = config.num_attention_heads, config.num_key_value_heads
    return config.num_hidden_layers * (2 * H * N * D + 2 * H * K * D + 3 * H * I)


def attended_positions(config: EuroBertConfig, seq_len: int) -> int:
    """Keys a query attends, summed over the layers: every key on every layer (the FLOP count's
    attention-score term)."""
    return config.num_hidden_layers * seq_len


FAMILY = EUROBERT = Family(
    name="eurobert", model_types=("eurobert",), class_prefixes={"eurobert": "EuroBert"},
    prefix="model",
    heads=tuple(name[len("EuroBert"):] for name in CLASS_SPECS),
    mlm_rows=FOLDER.mlm_rows, mlm_decoder="lm_head", mlm_bias="lm_head.bias",
    pretraining_classes=("EuroBertForMaskedLM",),
    config_class=EuroBertConfig, model_classes=FOLDER.model_classes,
    build=FOLDER.build, table=FOLDER.table,
    infer_class=FOLDER.infer_class, non_embedding_params=non_embedding_params,
    attended_positions=attended_positions,
    position_limit=lambda config: config.max_position_embeddings,  # rotary: no position table to run out of
    describe_init=lambda config, class_name: f"{class_name}'s init: normal({config.initializer_range}), zero biases",
    class_specs=CLASS_SPECS, final_norm="norm",
    # transformers' eager path takes its softmax in float32 even in a float64 model; sdpa stays float64
    reference_attention="sdpa", float64_reference=float64_reference,
    segment_ids=True,  # packed documents: per-document masks and RoPE positions
    token_types=False,  # no token-type table: transformers' tokenizer gives input_ids, attention_mask
    embedding_path="embed_tokens/embedding",
    layer_stack=LayerStack("layers"),  # scanned: ``layers`` itself holds the [L, ..] leaves, as BERT's encoder/layer
    # the Llama-3 tokenizer's specials (it has no unknown token: byte-level BPE)
    special_tokens={"pad": "<|end_of_text|>", "unk": "<|end_of_text|>", "cls": "<|begin_of_text|>",
                    "sep": "<|end_of_text|>", "mask": "<|mask|>"},
    also="EuroBERT-210m, -610m, -2.1B",
    differences="its own modules (`jaxbert/model/eurobert/`; transformers 5): Llama-style pre-norm layers with "
                "RMSNorm, grouped-query attention (`num_key_value_heads`; k and v repeated to the query heads on the "
                "`blocked`, `splash` and `auto` paths), rotary positions of one theta (`rope_parameters`, or the "
                "released checkpoints' `rope_theta`), SwiGLU, an untied `lm_head`, `classifier_pooling` `bos` / "
                "`mean` / `late`, no token types; a `rope_type` other than `default` refused by name")
