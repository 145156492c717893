"""What a model family is to jaxbert: a small typed contract every family answers, and optional extras.

A ``Family`` is data plus functions; every place that used to branch on the family (config checks,
position ids, the MLM and classifier heads, the converter's key names, the tokenizer check, the
recipe's class list) asks the config's family instead (``jaxbert.model.families.family_of``).

A family's entry lives in its own folder (``jaxbert/model/NAME/family.py``, ``FAMILY``); its members
are plain values and functions. Those that reach model code (classes, builders, key tables) import it
inside the function, so that the entry, and so reading a config, loads no jax. Nothing is imported on
attribute access: ``dataclasses.replace(family, name=..., model_types=...)`` is an ordinary copy.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Callable, Optional


def model_code(module: str):
    """A module of a family's model code (flax), imported when a member that needs it is called: a family's
    entry names its config and functions, and reading a config loads no jax."""
    return importlib.import_module(module)


@dataclasses.dataclass(frozen=True)
class LayerStack:
    """Where an encoder keeps its layers in the param tree.

    Per layer they are ``container/0``, ``container/1``, ...; scanned (nn.scan), the layers from
    ``first`` on are one stack with a leading layer axis: ``container`` itself when ``stack`` is
    empty (BERT's ``encoder/layer``), else ``container/stack`` beside the layers before ``first``
    (ModernBERT's ``layers/0`` and ``layers/scan``).
    """

    container: str
    stack: str = ""
    first: int = 0

    def is_scanned(self, layers) -> bool:
        """Whether a ``container`` dict holds the scanned stack."""
        if self.stack:
            return self.stack in layers
        return bool(layers) and not all(str(k).isdigit() for k in layers)


@dataclasses.dataclass(frozen=True)
class OwnFolder:
    """The members of a family whose classes are its own (ModernBERT, EuroBERT) that its folder answers, read
    there when first called: ``PACKAGE.heads.MODEL_CLASSES``, ``PACKAGE.table.family_table`` and ``mlm_rows``,
    and jaxbert.model.own_classes' builder and checkpoint-class reader. A family entry names its bound methods
    (``build=folder.build``, ...).

    Attributes: package ("jaxbert.model.modernbert"); label (the family as refusals name it, "ModernBERT");
    config_class; model_type; class_names; by_module ((state-dict modules, class) pairs a checkpoint without
    ``architectures`` is read by, first match wins); base_class (the bare encoder, where none matches).
    """

    package: str
    label: str
    config_class: type
    model_type: str
    class_names: tuple
    by_module: tuple
    base_class: str

    def model_classes(self, family) -> dict:
        return dict(model_code(f"{self.package}.heads").MODEL_CLASSES)

    def build(self, class_name: str, config, options=None, **kwargs):
        """The module of one of its class names for this config and these options (its classes take no other
        keywords); what it cannot honour is refused by name (jaxbert.model.own_classes.build_class)."""
        own, options_module = model_code("jaxbert.model.own_classes"), model_code("jaxbert.model.options")
        options = options_module.ModelOptions() if options is None else options
        return own.build_class(self.label, model_code(f"{self.package}.heads").MODEL_CLASSES, self.config_class,
                               self.model_type, class_name, config, options, kwargs)

    def infer_class(self, config, keys: list) -> str | None:
        """A checkpoint's class: its architectures entry, else what its head keys say; None when architectures
        names only classes the family does not have."""
        return model_code("jaxbert.model.own_classes").class_of_checkpoint(
            config, keys, self.class_names, self.by_module, self.base_class)

    def table(self, config, model_class: str, scan_layers: bool = False, add_pooling_layer=None):
        """The converter's key table (PACKAGE.table.family_table)."""
        return model_code(f"{self.package}.table").family_table(config, model_class, scan_layers, add_pooling_layer)

    def mlm_rows(self, config) -> list:
        return model_code(f"{self.package}.table").mlm_rows(config)


BERT_SPECIALS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}


def _no_check(config) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family: the contract (the fields without a default, which every family answers), then
    the optional extras (defaults that suit a family without the feature).

    The contract:
      name: the family ("bert").
      model_types: config ``model_type`` values of the family.
      class_prefixes: model_type -> how transformers spells its class names ("Bert", "XLMRoberta").
      prefix: the encoder's name in the param tree and state dict of the head classes ("bert").
      heads: class-name suffixes the family has ("Model", "ForMaskedLM", ...); a family that builds
        on another has a subset of that one's.
      config_class: its config class (``from_dict``, ``from_json_file``, ``to_dict``; a config module
        imports no model code).
      model_classes: family -> {class name: flax module class} under the family's names (called with the
        family itself, so that a copy under other names, as ``dataclasses.replace`` makes, gets classes
        under its own names; read them through ``Family.classes()``).
      build: (class name, config, options, **kwargs) -> module.
      table: (config, class name, scan_layers, add_pooling_layer) -> its key table for the converter
        (entries, by_key, aliases, leaf_shapes, prefix, spec: BERT's ``jaxbert.model.bert.table.Table``,
        which the families on BERT's modules name too, or a ``jaxbert.model.row_table.RowTable``).
      infer_class: (config, state-dict keys) -> the class a checkpoint was saved from (its config's
        ``architectures``, else its keys), or None where ``architectures`` names no class it can load.
      mlm_rows: config -> the MLM head's param rows (module path, kind, dims), for the converter.
      mlm_decoder: the MLM decoder's module path; transformers ties its bias to ``mlm_bias``
        always, and its weight to the word embeddings unless the config unties them.
      mlm_bias: the MLM output bias's state-dict key.
      non_embedding_params: config -> matmul weights of the encoder layers (for the FLOP count).
      attended_positions: (config, T) -> the keys a query attends summed over the layers (for the
        FLOP count of attention scores).
      position_limit: config -> the longest sequence it takes.

    The extras of a family on another's modules (RoBERTa on BERT's):
      builds_on: the family whose modules, class registry and key table its classes reuse ("bert"
        for RoBERTa); empty for a family whose classes are its own (BERT, ModernBERT).
      nsp_module: the next-sentence head's module path ("" where the family has none).
      position_offset: config -> how many rows of the position table come before the first
        position (RoBERTa counts from pad_token_id + 1).
      position_ids: (input_ids [B, L], config) -> position ids [B, L], or None for 0 .. L-1.
      zero_position_pad: the position table's pad_token_id row is zero at init (RoBERTa).
      check_config: config -> None; raises ConfigError naming what the family cannot take.
      pad_is_position_origin: its pad token must be the tokenizer's (positions count from it).
      mlm_head: (config, options, **module kwargs) -> the MLM head module that BERT's masked-LM classes
        carry for it (BERT's BertOnlyMLMHead, RoBERTa's RobertaLMHead); None for a family whose classes
        are its own.
      mlm_head_name: its name in the param tree ("cls").
      seq_classifier: (config, options, **module kwargs) -> the sequence classifier on the first token
        (no pooler), or None for BERT's (pooler -> dropout -> classifier).
      seq_classifier_rows: config -> param rows of that classifier (replacing BERT's).

    The extras of a family whose classes are its own, and of every family:
      class_specs: class name -> the fields of its ``Head`` (pooler, mlm, choices, base, stages,
        main, ...), for a family whose classes are its own (jaxbert.model.registry reads them).
      pretraining_classes: the classes an MLM pretraining recipe may train.
      describe_init: (config, class name) -> how its fresh head params start, as fine-tuning reports them.
      special_tokens: role ("pad", "cls", "sep", "mask", "unk") -> how its tokenizers spell it.
      also: what else loads through it, for README's family table ("and mmBERT, ...").
      differences: what jaxbert handles of it unlike BERT, for README's family table (markdown).
      final_norm: the base model's norm after its last layer (transformers' module name, "final_norm"),
        whose output is ``last_hidden_state`` and not the last of ``hidden_states``; "" where none.
      reference_attention: transformers' attention implementation parity compares against.
      float64_reference: torch model -> None: makes float64 the places where transformers' float64 model of
        the family still computes in float32 (beyond RoPE's tables, which parity widens for every family:
        jaxbert.parity.grad.float64_rotary); None where there are none.
      parity_length: config -> the length the longest parity input should reach (past a local
        attention window), or None.
      segment_ids: its models take ``segment_ids=`` (packed documents, data.packing documents / none).
      token_types: its models read token_type_ids (BERT's segment embeddings); where not (ModernBERT)
        they are ignored, and an exported tokenizer's model_input_names leaves them out, so that
        transformers' tokenizer and pipelines do not feed them.
      fused_outputs: param module name -> how many equal blocks its output axis joins (ModernBERT's
        Wqkv: 3), so that centre tiling (jaxbert.train.tiling) fills each block from its own.
      embedding_path: the word-embedding table's path under the encoder's params.
      layer_stack: the encoder's layers in the param tree, per layer and scanned (LayerStack).
      tf_names: (TF variable names, class name) -> {name: (state-dict key or None, transpose?, why skipped)}
        for an original TensorFlow checkpoint of the family (ELECTRA's bundle holds two models); a name left
        out maps to nothing and is refused. None: BERT's names (jaxbert.model.bert.tf_names.tf_name_to_key).
    """

    # the contract
    name: str
    model_types: tuple
    class_prefixes: dict
    prefix: str
    heads: tuple
    config_class: type
    model_classes: Callable[["Family"], dict]
    build: Callable
    table: Callable
    infer_class: Callable
    mlm_rows: Callable
    mlm_decoder: str
    mlm_bias: str
    non_embedding_params: Callable
    attended_positions: Callable
    position_limit: Callable
    # extras: a family on another's modules
    builds_on: str = ""
    nsp_module: str = ""
    position_offset: Callable = lambda config: 0
    position_ids: Optional[Callable] = None
    zero_position_pad: bool = False
    check_config: Callable = _no_check
    pad_is_position_origin: bool = False
    mlm_head: Optional[Callable] = None
    mlm_head_name: str = "cls"
    seq_classifier: Optional[Callable] = None
    seq_classifier_rows: Optional[Callable] = None
    # extras: every family
    class_specs: Optional[dict] = None
    pretraining_classes: tuple = ()
    describe_init: Callable = lambda config, class_name: f"{class_name}'s init, zero biases"
    also: str = ""
    differences: str = ""
    special_tokens: dict = dataclasses.field(default_factory=lambda: dict(BERT_SPECIALS))
    final_norm: str = ""
    reference_attention: str = "eager"
    float64_reference: Optional[Callable] = None
    parity_length: Optional[Callable] = None
    segment_ids: bool = True
    token_types: bool = True
    fused_outputs: dict = dataclasses.field(default_factory=dict)
    embedding_path: str = "embeddings/word_embeddings/embedding"
    layer_stack: LayerStack = LayerStack("layer")
    tf_names: Optional[Callable] = None

    def __post_init__(self):
        unsaid = [f.name for f in dataclasses.fields(self) if f.default is dataclasses.MISSING
                  and f.default_factory is dataclasses.MISSING and getattr(self, f.name) is None]
        if unsaid:
            raise TypeError(f"family {self.name!r} does not say its {', '.join(unsaid)}")
        if not self.builds_on and self.class_specs is None:
            raise TypeError(f"family {self.name!r} builds on no other family and lists no class_specs")
        if self.builds_on and self.mlm_head is None:
            raise TypeError(f"family {self.name!r} builds on {self.builds_on!r} and names no mlm_head")

    def classes(self) -> dict:
        """Its classes by name, under its own spellings (imports its model code)."""
        return self.model_classes(self)

    def class_prefix(self, model_type: str) -> str:
        return self.class_prefixes[model_type]

    def needs(self) -> str:
        """The model types it takes, as a message says them: "'roberta' or 'xlm-roberta'"."""
        return " or ".join(repr(t) for t in self.model_types)

    def class_of(self, model_type: str, suffix: str) -> str | None:
        """Its class with a head suffix ("ForMaskedLM") under a model type's spelling; None where it has no such head."""
        return self.class_prefix(model_type) + suffix if suffix in self.heads else None

    def mlm_class(self, model_type: str) -> str:
        """The masked-LM class (BertForMaskedLM, RobertaForMaskedLM, ModernBertForMaskedLM): fill-mask,
        pretraining's showcase and trajectory parity read the MLM head of any class through it."""
        return self.class_of(model_type, "ForMaskedLM")

    def decoder_class(self, model_type: str) -> str | None:
        """The causal-LM class `generate` runs (BertLMHeadModel), or None where the family has none."""
        return self.class_of(model_type, "LMHeadModel")

    def word_embeddings(self, params):
        """The word-embedding table [V, H] of a param tree of any of its classes (bare encoder or head class)."""
        node = params.get(self.prefix, params)
        for name in self.embedding_path.split("/"):
            node = node[name]
        return node

    def class_names(self) -> tuple:
        """Every class name of the family, under each of its spellings."""
        prefixes = dict.fromkeys(self.class_prefixes.values())
        return tuple(p + suffix for p in prefixes for suffix in self.heads)


@dataclasses.dataclass(frozen=True)
class Head:
    """One model class.

    Attributes:
      name: the class name, as in transformers.
      family: its Family.
      base: the bare encoder (no prefix on its params, add_pooling_layer option).
      pooler: whether it builds the pooler.
      mlm / nsp: whether it carries the MLM / next-sentence head.
      cross_attention: whether it can take encoder_hidden_states (and so holds
        crossattention params when config.add_cross_attention is set).
      decoder: needs config.is_decoder.
      choices: inputs are [B, C, L] (multiple choice).
      sequence_classifier: the first-token classifier, which a family may replace with its own
        (``Family.seq_classifier``; RoBERTa's has no pooler).
      extra_rows: config -> param rows of its head besides the MLM and NSP heads.
      stages: (stage name, output attribute) of the head's outputs, named alike
        in jaxbert's and transformers' output objects.
      main: the output attribute(s) that make the head's main output (several
        are stacked on a last axis).
    """

    name: str
    family: Family
    pooler: bool
    mlm: bool = False
    nsp: bool = False
    cross_attention: bool = False
    decoder: bool = False
    choices: bool = False
    sequence_classifier: bool = False
    base: bool = False
    extra_rows: Callable = lambda c: []
    stages: tuple = ()
    main: tuple = ("logits",)

    @property
    def prefix(self) -> str:
        """The state-dict prefix of the encoder's params: "" for the base class."""
        return "" if self.base else self.family.prefix + "."

    def rows(self, config) -> list:
        """Param rows of the head (not the encoder), full state-dict module paths."""
        rows = list(self.family.mlm_rows(config)) if self.mlm else []
        if self.nsp:
            rows.append((self.family.nsp_module, "dense", (config.hidden_size, 2)))
        return rows + list(self.extra_rows(config))

    def ties(self, config) -> dict:
        """Tied state-dict keys -> the key whose tensor they must equal."""
        if not self.mlm:
            return {}
        out = {f"{self.family.mlm_decoder}.bias": self.family.mlm_bias}
        if config.tie_word_embeddings:
            out[f"{self.family.mlm_decoder}.weight"] = f"{self.prefix}embeddings.word_embeddings.weight"
        return out
