"""The key table between transformers' DeBERTa-v2 state dict and jaxbert's param tree: its modules as rows
(jaxbert.model.row_table). With scan_layers, ``encoder.layer.{i}`` becomes ``encoder/layer`` with a leading axis
(layer i at index i), as BERT's. The conv's weight [H, H / groups, K] is the kernel [K, H / groups, H] reversed
(a "linear" row of three dims: its transform reverses every axis). The MLM decoder is tied to word_embeddings in
both layouts; transformers 4.57's legacy head also lists ``cls.predictions.decoder.bias`` (its bias, shared):
both are aliases.
"""

from __future__ import annotations

from jaxbert.model.contract import LayerStack
from jaxbert.model.deberta_v2.config import CLASS_NAMES, RTD_CLASS, DebertaV2Config
from jaxbert.model.row_table import Layout, RowTable

PREFIX = "deberta"
MLM = "DebertaV2ForMaskedLM"
STACK = LayerStack("layer")


def layout(c: DebertaV2Config) -> Layout:
    decoder = "cls.predictions.decoder" if c.legacy else "lm_predictions.lm_head.decoder"
    return Layout(prefix=PREFIX, base_class="DebertaV2Model", mlm_class=MLM, mlm_decoder=decoder,
                  embedding="embeddings.word_embeddings", base_modules=("embeddings.", "encoder."), stack=STACK)


def encoder_rows(c: DebertaV2Config) -> list:
    """(module path, kind, dims, layer index or None) of the bare encoder."""
    H, I, E = c.hidden_size, c.intermediate_size, c.embed_size
    rows = [("embeddings.word_embeddings", "embed", (c.vocab_size, E), None)]
    if c.position_biased_input:
        rows.append(("embeddings.position_embeddings", "embed", (c.max_position_embeddings, E), None))
    if c.type_vocab_size > 0:
        rows.append(("embeddings.token_type_embeddings", "embed", (c.type_vocab_size, E), None))
    if E != H:
        rows.append(("embeddings.embed_proj", "linear_nobias", (E, H), None))
    rows.append(("embeddings.LayerNorm", "norm", (H,), None))
    projections = ["query_proj", "key_proj", "value_proj"]
    if c.relative_attention and not c.share_att_key:
        projections += [name for term, name in (("c2p", "pos_key_proj"), ("p2c", "pos_query_proj"))
                        if term in c.att_terms]
    layer = [(f"attention.self.{p}", "linear", (H, H)) for p in projections]
    layer += [("attention.output.dense", "linear", (H, H)), ("attention.output.LayerNorm", "norm", (H,)),
              ("intermediate.dense", "linear", (H, I)), ("output.dense", "linear", (I, H)),
              ("output.LayerNorm", "norm", (H,))]
    rows += [(f"encoder.layer.{i}.{m}", k, d, i) for i in range(c.num_hidden_layers) for m, k, d in layer]
    if c.relative_attention:
        rows.append(("encoder.rel_embeddings", "embed", (2 * c.att_span, H), None))
        if c.norm_rel:
            rows.append(("encoder.LayerNorm", "norm", (H,), None))
    if c.conv_kernel_size > 0:
        rows += [("encoder.conv.conv", "linear", (c.conv_kernel_size, H // c.conv_groups, H), None),
                 ("encoder.conv.LayerNorm", "norm", (H,), None)]
    return rows


def head_rows(c: DebertaV2Config, class_name: str) -> list:
    """The rows of a class's head (not the encoder)."""
    H = c.hidden_size
    if class_name == MLM:
        if c.legacy:
            return [("cls.predictions.transform.dense", "linear", (H, c.embed_size), None),
                    ("cls.predictions.transform.LayerNorm", "norm", (c.embed_size,), None),
                    ("cls.predictions", "bias", (c.vocab_size,), None)]
        return [("lm_predictions.lm_head.dense", "linear", (H, H), None),
                ("lm_predictions.lm_head.LayerNorm", "norm", (H,), None),
                ("lm_predictions.lm_head", "bias", (c.vocab_size,), None)]
    pooler = [("pooler.dense", "linear", (H, c.pooler_size), None)]
    if class_name == "DebertaV2ForSequenceClassification":
        return pooler + [("classifier", "linear", (c.pooler_size, c.num_labels), None)]
    if class_name == "DebertaV2ForMultipleChoice":
        return pooler + [("classifier", "linear", (c.pooler_size, 1), None)]
    if class_name == "DebertaV2ForTokenClassification":
        return [("classifier", "linear", (H, c.num_labels), None)]
    if class_name == "DebertaV2ForQuestionAnswering":
        return [("qa_outputs", "linear", (H, c.num_labels), None)]
    if class_name == RTD_CLASS:  # jaxbert's own discriminator, the original DeBERTa code's names
        return [("mask_predictions.LayerNorm", "norm", (H,), None),
                ("mask_predictions.dense", "linear", (H, H), None),
                ("mask_predictions.classifier", "linear", (H, 1), None)]
    return []


class Table(RowTable):
    """Every tensor of one DeBERTa-v2 class under one config and layout (entries, by_key, aliases, leaf_shapes,
    prefix, spec); aliases: the legacy head's decoder weight (word_embeddings) and bias (cls.predictions.bias)."""

    def __init__(self, config: DebertaV2Config, model_class: str, scan_layers: bool = False,
                 add_pooling_layer=None):
        config.class_name(model_class)
        super().__init__(layout(config), config, model_class, encoder_rows(config), head_rows(config, model_class),
                         scan_layers)
        if model_class == MLM and config.legacy:
            self.aliases["cls.predictions.decoder.bias"] = "cls.predictions.bias"
        elif model_class == MLM:  # the lm_head multiplies by the table itself: no decoder key to alias
            self.aliases.clear()


def is_scanned(params) -> bool:
    """Whether a DeBERTa-v2 param tree holds the scanned layout."""
    tree = params.get("params", params)
    encoder = tree.get(PREFIX, tree).get("encoder", {})
    return STACK.is_scanned(encoder.get("layer", {}))


def param_count(config: DebertaV2Config, class_name: str) -> int:
    """The number of parameters of a class, from the table (no array is made)."""
    return Table(config, class_name).param_count()


def mlm_rows(config) -> list:
    """The MLM head's param rows (its family entry's mlm_rows)."""
    return head_rows(config, MLM)


def family_table(config, model_class, scan_layers=False, add_pooling_layer=None) -> Table:
    """The key table as the family registry calls it (DeBERTa-v2 has no pooler to add)."""
    return Table(config, model_class, scan_layers)


__all__ = ["CLASS_NAMES", "Table", "encoder_rows", "family_table", "head_rows", "is_scanned", "mlm_rows",
           "param_count"]
