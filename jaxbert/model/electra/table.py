"""The key table between transformers' ELECTRA state dict and jaxbert's param tree, as module rows
(jaxbert.model.row_table): BERT's layer names under ``electra.encoder.layer.{i}`` (scanned: ``encoder/layer`` with a
leading axis, as BERT's), embeddings ``embedding_size`` wide, ``embeddings_project`` where the widths differ, and
each head's modules. ``generator_lm_head.weight`` is an alias of the word embeddings when the config ties them.
"""

from __future__ import annotations

from jaxbert.model.contract import LayerStack
from jaxbert.model.electra.config import ElectraConfig
from jaxbert.model.row_table import Layout, RowTable, holds_scanned

PREFIX = "electra"  # the encoder's name in the head classes
MLM = "ElectraForMaskedLM"
LAYOUT = Layout(prefix=PREFIX, base_class="ElectraModel", mlm_class=MLM, mlm_decoder="generator_lm_head",
                embedding="embeddings.word_embeddings", base_modules=("embeddings.", "embeddings_project.", "encoder."),
                stack=LayerStack("layer"))
# One BERT layer's modules: (module path under encoder.layer.{i}, kind, dims of (H, I)).
_LAYER = (("attention.self.query", "linear", "HH"), ("attention.self.key", "linear", "HH"),
          ("attention.self.value", "linear", "HH"), ("attention.output.dense", "linear", "HH"),
          ("attention.output.LayerNorm", "norm", "H"), ("intermediate.dense", "linear", "HI"),
          ("output.dense", "linear", "IH"), ("output.LayerNorm", "norm", "H"))


def encoder_rows(c: ElectraConfig) -> list:
    """(module path, kind, dims, layer index or None) of the bare encoder."""
    E, H = c.embedding_size, c.hidden_size
    size = {"H": H, "I": c.intermediate_size}
    rows = [("embeddings.word_embeddings", "embed", (c.vocab_size, E), None),
            ("embeddings.position_embeddings", "embed", (c.max_position_embeddings, E), None),
            ("embeddings.token_type_embeddings", "embed", (c.type_vocab_size, E), None),
            ("embeddings.LayerNorm", "norm", (E,), None)]
    if c.projects_embeddings:
        rows.append(("embeddings_project", "linear", (E, H), None))
    return rows + [(f"encoder.layer.{i}.{m}", kind, tuple(size[d] for d in dims), i)
                   for i in range(c.num_hidden_layers) for m, kind, dims in _LAYER]


def head_rows(c: ElectraConfig, class_name: str) -> list:
    """The rows of a class's head (not the encoder)."""
    E, H = c.embedding_size, c.hidden_size
    rows = {
        "ElectraForPreTraining": [("discriminator_predictions.dense", "linear", (H, H)),
                                  ("discriminator_predictions.dense_prediction", "linear", (H, 1))],
        MLM: [("generator_predictions.dense", "linear", (H, E)), ("generator_predictions.LayerNorm", "norm", (E,)),
              ("generator_lm_head", "bias", (c.vocab_size,)) if c.tie_word_embeddings
              else ("generator_lm_head", "linear", (E, c.vocab_size))],
        "ElectraForSequenceClassification": [("classifier.dense", "linear", (H, H)),
                                             ("classifier.out_proj", "linear", (H, c.num_labels))],
        "ElectraForTokenClassification": [("classifier", "linear", (H, c.num_labels))],
        "ElectraForQuestionAnswering": [("qa_outputs", "linear", (H, c.num_labels))],
        "ElectraForMultipleChoice": ([("sequence_summary.summary", "linear", (H, c.summary_size))]
                                     if c.summary_use_proj else [])
        + [("classifier", "linear", (H, 1))],
    }.get(class_name, [])
    return [(m, kind, dims, None) for m, kind, dims in rows]


class Table(RowTable):
    """Every tensor of one ELECTRA class under one config and layout (entries, by_key, aliases, leaf_shapes,
    prefix, spec); aliases: generator_lm_head.weight when the config ties it to the word embeddings."""

    def __init__(self, config: ElectraConfig, model_class: str, scan_layers: bool = False, add_pooling_layer=None):
        config.class_name(model_class)
        super().__init__(LAYOUT, config, model_class, encoder_rows(config), head_rows(config, model_class), scan_layers)


def is_scanned(params) -> bool:
    """Whether an ELECTRA param tree holds the scanned layout (``encoder/layer`` holds leaves, not layers 0, 1, ...)."""
    tree = params.get("params", params)
    return holds_scanned(LAYOUT, {"params": tree.get(PREFIX, tree).get("encoder", {})})


def mlm_rows(config) -> list:
    """The MLM head's param rows (its family entry's mlm_rows)."""
    return [row[:3] for row in head_rows(config, MLM)]


def family_table(config, model_class, scan_layers=False, add_pooling_layer=None) -> Table:
    """The key table as the family registry calls it (ELECTRA has no pooler to add)."""
    return Table(config, model_class, scan_layers)
