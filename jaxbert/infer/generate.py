"""Autoregressive generation with a BertLMHeadModel and a fixed-size key/value cache.

The whole generation (prefill plus every new token) is one jitted function:
the cache is sized prompt + max_new_tokens up front and the token loop is a
lax.scan, so nothing recompiles per token.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxbert.errors import InputError


def init_cache(model, batch: int, max_length: int, encoder_hidden_states=None):
    """Zeroed 'cache' collection for the model with options.decode set, sized [batch, max_length]."""
    decoder = model.clone(options=model.options.replace(decode=True))
    ids = jnp.zeros((batch, max_length), jnp.int32)
    shapes = jax.eval_shape(
        lambda: decoder.init(jax.random.key(0), ids, encoder_hidden_states=encoder_hidden_states)["cache"])
    return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def _pick(logits, key, temperature, greedy: bool, top_k: int):
    """Next token [B] from logits [B, V]: argmax, or a sample at temperature from the top k."""
    if greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logits = logits.astype(jnp.float32) / temperature
    if top_k:
        kth = jax.lax.top_k(logits, top_k)[0][:, -1:]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    return jax.random.categorical(key, logits).astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("model", "max_new_tokens", "greedy", "top_k"))
def _generate(model, variables, input_ids, attention_mask, encoder_hidden_states,
              encoder_attention_mask, rng, temperature, eos_token_id, pad_token_id, *,
              max_new_tokens: int, greedy: bool, top_k: int):
    B, P = input_ids.shape
    decoder = model.clone(options=model.options.replace(decode=True))
    cache = init_cache(model, B, P + max_new_tokens, encoder_hidden_states)
    full_mask = jnp.concatenate([attention_mask, jnp.ones((B, max_new_tokens), attention_mask.dtype)], 1)
    # Left-padded prompts: positions count real tokens only.
    positions = jnp.maximum(jnp.cumsum(full_mask, axis=1) - 1, 0).astype(jnp.int32)

    def run(cache, ids, pos, enc):
        out, mutated = decoder.apply(
            {**variables, "cache": cache}, ids, attention_mask=full_mask, position_ids=pos,
            encoder_hidden_states=enc, encoder_attention_mask=encoder_attention_mask, mutable=["cache"])
        return mutated["cache"], out.logits[:, -1]

    cache, logits = run(cache, input_ids, positions[:, :P], encoder_hidden_states)

    def step(carry, i):
        cache, logits, done = carry
        token = _pick(logits, jax.random.fold_in(rng, i), temperature, greedy, top_k)
        token = jnp.where(done, pad_token_id, token)
        done = done | (token == eos_token_id)
        pos = jax.lax.dynamic_slice_in_dim(positions, P + i, 1, axis=1)
        cache, logits = run(cache, token[:, None], pos, None)
        return (cache, logits, done), token

    _, tokens = jax.lax.scan(step, (cache, logits, jnp.zeros((B,), bool)), jnp.arange(max_new_tokens))
    return jnp.concatenate([input_ids, tokens.T], axis=1)


def generate(model, variables, input_ids, attention_mask=None, *, max_new_tokens: int = 20,
             temperature: float = 0.0, top_k: int = 0, rng=None, eos_token_id: int = -1,
             pad_token_id: int | None = None, encoder_hidden_states=None, encoder_attention_mask=None):
    """Greedy (temperature 0) or sampled continuation of input_ids [B, P] -> [B, P + max_new_tokens].

    Prompts of different lengths are left-padded, with attention_mask [B, P] marking
    the real tokens. After eos_token_id a row continues with pad_token_id.
    """
    if not model.config.is_decoder:
        raise InputError("generate needs a decoder: config.is_decoder=True (BertLMHeadModel)")
    input_ids = jnp.asarray(input_ids, jnp.int32)
    if input_ids.shape[1] + max_new_tokens > model.config.max_position_embeddings:
        raise InputError(f"prompt length {input_ids.shape[1]} + max_new_tokens {max_new_tokens} exceeds the "
                         f"model's max_position_embeddings {model.config.max_position_embeddings}")
    if temperature < 0:
        raise InputError(f"temperature must be >= 0, got {temperature}")
    if attention_mask is None:
        attention_mask = jnp.ones_like(input_ids)
    if "params" not in variables:
        variables = {"params": variables}
    pad = model.config.pad_token_id if pad_token_id is None else pad_token_id
    return _generate(model, variables, input_ids, jnp.asarray(attention_mask, jnp.int32),
                     encoder_hidden_states, encoder_attention_mask,
                     jax.random.key(0) if rng is None else rng, jnp.float32(max(temperature, 1e-6)),
                     eos_token_id, pad, max_new_tokens=max_new_tokens, greedy=temperature == 0,
                     top_k=top_k)
