"""ELECTRA's task classes, with transformers' class and parameter names (4.57 and 5.x; ElectraForCausalLM aside).

Every head class holds the encoder as ``electra``:

  ElectraForPreTraining (the discriminator): discriminator_predictions dense -> hidden_act -> dense_prediction,
    one logit per token, logits [B, L] (> 0: replaced).
  ElectraForMaskedLM (the generator): generator_predictions dense (H -> E) -> GELU -> LayerNorm, then
    generator_lm_head onto the vocabulary: the word-embedding table [V, E] (tied) or a kernel of its own, and a bias.
  ElectraForSequenceClassification: classifier on the first token: dropout -> dense -> GELU -> dropout -> out_proj.
  ElectraForTokenClassification: dropout -> classifier at every token.
  ElectraForQuestionAnswering: qa_outputs at every token -> start_logits, end_logits.
  ElectraForMultipleChoice: inputs [B, C, L]; sequence_summary (the summary_* fields: first, last or mean token ->
    first dropout -> summary Linear -> summary_activation -> last dropout) -> classifier -> logits [B, C].
"""

from __future__ import annotations

import flax.linen as nn

from jaxbert.errors import ConfigError
from jaxbert.model.activations import ACT_FNS
from jaxbert.model.base import ModelOutput
from jaxbert.model.electra.modules import ElectraModel, ElectraModule
from jaxbert.model.layers.vocab import gather_positions, vocab_decoder

_GELU = ACT_FNS["gelu"]  # transformers' get_activation("gelu"): the erf form, whatever hidden_act says


class ElectraPreTrainedModel(ElectraModule):
    """Base of the head classes: the encoder under ``electra``, then the class's ``head``.

    A head that reads only the first token's final state says so (reads_first_token); with
    ModelOptions.first_token_only its encoder then runs the last layer at that token alone."""

    reads_first_token = False

    def encode(self, input_ids, token_type_ids, attention_mask, position_ids, head_mask, deterministic,
               output_hidden_states, output_attentions, segment_ids=None) -> ModelOutput:
        return ElectraModel(self.config, self.options, name="electra")(
            input_ids, token_type_ids, attention_mask, position_ids, head_mask, deterministic=deterministic,
            output_hidden_states=output_hidden_states, output_attentions=output_attentions, segment_ids=segment_ids,
            first_token_only=self.reads_first_token and self.options.first_token_only)

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, head_mask=None,
                 deterministic: bool = True, output_hidden_states: bool = False, output_attentions: bool = False,
                 segment_ids=None):
        out = self.encode(input_ids, token_type_ids, attention_mask, position_ids, head_mask, deterministic,
                          output_hidden_states, output_attentions, segment_ids)
        return self.head(out, deterministic)

    def head(self, out: ModelOutput, deterministic: bool) -> ModelOutput:
        raise NotImplementedError


class _DiscriminatorPredictions(ElectraModule):
    """[B, L, H] -> one logit per token [B, L]."""

    @nn.compact
    def __call__(self, hidden_states):
        x = ACT_FNS[self.config.hidden_act](self.dense(self.config.hidden_size, ("embed", None), "dense")(hidden_states))
        return self.dense(1, ("embed", None), "dense_prediction")(x)[..., 0]


class _GeneratorPredictions(ElectraModule):
    """[B, M, H] -> [B, M, E]: dense -> GELU -> LayerNorm."""

    @nn.compact
    def __call__(self, hidden_states):
        x = self.dense(self.config.embedding_size, ("embed", None), "dense")(hidden_states)
        return self.layer_norm()(_GELU(x))


class ElectraForPreTraining(ElectraPreTrainedModel):
    """The discriminator: logits [B, L], one per token (replaced-token detection)."""

    def head(self, out, deterministic):
        logits = _DiscriminatorPredictions(self.config, self.options, name="discriminator_predictions")(
            out.last_hidden_state)
        return out.replace(logits=logits)


class ElectraForMaskedLM(ElectraPreTrainedModel):
    """The generator: logits [B, L, V], or [B, M, V] at masked_positions [B, M] only."""

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, head_mask=None,
                 masked_positions=None, deterministic: bool = True, output_hidden_states: bool = False,
                 output_attentions: bool = False, segment_ids=None):
        out = self.encode(input_ids, token_type_ids, attention_mask, position_ids, head_mask, deterministic,
                          output_hidden_states, output_attentions, segment_ids)
        hidden = out.last_hidden_state
        if masked_positions is not None:
            hidden = gather_positions(hidden, masked_positions)
        x = _GeneratorPredictions(self.config, self.options, name="generator_predictions")(hidden)
        return out.replace(logits=self.lm_head(x))

    def lm_head(self, x):
        """x [B, M, E] -> [B, M, V]: generator_lm_head's weight (the word-embedding table when tied) and bias.
        Inside the MLM step's deferred_vocab_logits, where options.vocab_loss_chunk chooses the chunked loss for
        this vocabulary, a VocabProjection of x, that weight and bias instead (jaxbert.model.vocab_loss)."""
        cfg, opts = self.config, self.options
        table = None
        if cfg.tie_word_embeddings:
            words = self.get_variable("params", "electra")["embeddings"]["word_embeddings"]["embedding"]
            table = nn.meta.unbox(words).astype(opts.dtype)
        return vocab_decoder(x, table, name="generator_lm_head", vocab_size=cfg.vocab_size, use_bias=True,
                             init=nn.initializers.normal(cfg.initializer_range), options=opts)


class ElectraForSequenceClassification(ElectraPreTrainedModel):
    """logits [B, num_labels] from the first token: dropout -> dense -> GELU -> dropout -> out_proj."""

    reads_first_token = True

    def head(self, out, deterministic):
        return out.replace(logits=_ClassificationHead(self.config, self.options, name="classifier")(
            out.last_hidden_state, deterministic))


class _ClassificationHead(ElectraModule):
    @nn.compact
    def __call__(self, hidden_states, deterministic):
        cfg = self.config
        x = self.dropout(hidden_states[:, 0], deterministic)
        x = self.dropout(_GELU(self.dense(cfg.hidden_size, ("embed", None), "dense")(x)), deterministic)
        return self.dense(cfg.num_labels, ("embed", None), "out_proj")(x)


class ElectraForTokenClassification(ElectraPreTrainedModel):
    """logits [B, L, num_labels]."""

    def head(self, out, deterministic):
        x = self.dropout(out.last_hidden_state, deterministic)
        return out.replace(logits=self.dense(self.config.num_labels, ("embed", None), "classifier")(x))


class ElectraForQuestionAnswering(ElectraPreTrainedModel):
    """Span extraction: start_logits, end_logits [B, L] (qa_outputs sized num_labels; columns 0 and 1 read)."""

    def head(self, out, deterministic):
        logits = self.dense(self.config.num_labels, ("embed", None), "qa_outputs")(out.last_hidden_state)
        return out.replace(logits=logits, start_logits=logits[..., 0], end_logits=logits[..., 1])


class _SequenceSummary(ElectraModule):
    """[B, L, H] -> [B, S]: the summary_type token (or the mean of all), summary_first_dropout, the summary
    Linear (summary_use_proj), summary_activation, summary_last_dropout."""

    @nn.compact
    def __call__(self, hidden_states, deterministic):
        cfg = self.config
        pick = {"first": lambda h: h[:, 0], "last": lambda h: h[:, -1], "mean": lambda h: h.mean(axis=1)}
        x = self.dropout(pick[cfg.summary_type](hidden_states), deterministic, cfg.summary_first_dropout)
        if cfg.summary_use_proj:
            x = self.dense(cfg.summary_size, ("embed", None), "summary")(x)
        if cfg.summary_activation is not None:
            x = ACT_FNS[cfg.summary_activation](x)
        return self.dropout(x, deterministic, cfg.summary_last_dropout)


class ElectraForMultipleChoice(ElectraPreTrainedModel):
    """Inputs [B, C, L] (C choices) -> logits [B, C]."""

    @nn.compact
    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None, head_mask=None,
                 deterministic: bool = True, output_hidden_states: bool = False, output_attentions: bool = False,
                 segment_ids=None):
        cfg = self.config
        if cfg.summary_size != cfg.hidden_size:
            raise ConfigError(f"ElectraForMultipleChoice: summary_proj_to_labels projects the summary to num_labels "
                              f"({cfg.num_labels}) features, but its classifier reads hidden_size ({cfg.hidden_size}), "
                              "as transformers builds it (its model cannot run either)")
        B, C, L = input_ids.shape
        flat = lambda a: None if a is None else a.reshape(B * C, L)  # [B, C, L] -> [B*C, L]
        out = self.encode(flat(input_ids), flat(token_type_ids), flat(attention_mask), flat(position_ids), head_mask,
                          deterministic, output_hidden_states, output_attentions, flat(segment_ids))
        x = _SequenceSummary(self.config, self.options, name="sequence_summary")(out.last_hidden_state, deterministic)
        logits = self.dense(1, ("embed", None), "classifier")(x).reshape(B, C)
        return out.replace(logits=logits)

    @property
    def reads_first_token(self) -> bool:
        return self.config.summary_type == "first"


MODEL_CLASSES = {cls.__name__: cls for cls in (
    ElectraModel, ElectraForPreTraining, ElectraForMaskedLM, ElectraForSequenceClassification,
    ElectraForTokenClassification, ElectraForQuestionAnswering, ElectraForMultipleChoice)}
