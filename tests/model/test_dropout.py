"""HashDropout: the counter-hash dropout the training recipes use (model.dropout_impl: hash)."""

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxbert.model.options import ModelOptions
from jaxbert import BertConfig, BertForMaskedLM
from jaxbert.model.dropout import HashDropout, apply_hash_dropout, hash_bits, hash_keep_mask, keep_threshold
from jaxbert.train import recipe as recipes
from tests.helpers.runs import child_result

SHAPE = (16, 12, 128, 128)  # an attention-probability tensor: [B, N, T, S], 3.1M elements


def _z_corr(a, b):
    """Pearson correlation of two 0/1 arrays in units of its standard error under independence."""
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return np.corrcoef(a, b)[0, 1] * np.sqrt(a.size)


def test_keep_rate_is_the_asked_probability():
    for keep in (0.9, 0.5, 0.1):
        m = np.asarray(hash_keep_mask(jax.random.key(3), SHAPE, keep))
        sigma = np.sqrt(keep * (1 - keep) / m.size)
        assert abs(m.mean() - keep) < 5 * sigma, (keep, m.mean())
    assert keep_threshold(0.9) == 3865470566  # round(0.9 * 2**32)
    assert keep_threshold(1.0) == 2**32 - 1


def test_every_bit_is_balanced():
    bits = np.asarray(hash_bits(jax.random.key(0), SHAPE))
    ones = np.unpackbits(bits.view(np.uint8)).reshape(-1, 32).mean(0)
    # a bit that is always 0 or copies the counter would sit hundreds of sigma away
    assert np.abs(ones - 0.5).max() < 5 * 0.5 / np.sqrt(bits.size), ones


def test_neighbours_rows_and_keys_are_uncorrelated():
    m = np.asarray(hash_keep_mask(jax.random.key(0), SHAPE, 0.9))
    for axis in range(m.ndim):  # each element against the next one along every axis
        a = np.moveaxis(m, axis, -1)
        assert abs(_z_corr(a[..., :-1], a[..., 1:])) < 5, axis
    # two steps (keys) of the same layer, and two layers of one step (split keys)
    other = np.asarray(hash_keep_mask(jax.random.key(1), SHAPE, 0.9))
    assert abs(_z_corr(m, other)) < 5
    k1, k2 = jax.random.split(jax.random.key(0))
    assert abs(_z_corr(np.asarray(hash_keep_mask(k1, SHAPE, 0.9)),
                       np.asarray(hash_keep_mask(k2, SHAPE, 0.9)))) < 5
    # the same key gives the same mask
    np.testing.assert_array_equal(m, np.asarray(hash_keep_mask(jax.random.key(0), SHAPE, 0.9)))


def test_module_scales_kept_elements_and_zeroes_the_rest():
    x = jnp.arange(1, 1 + 4 * 8 * 32, dtype=jnp.float32).reshape(4, 8, 32)
    y = HashDropout(0.25).apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(7)})
    y, x = np.asarray(y), np.asarray(x)
    kept = y != 0
    assert 0.6 < kept.mean() < 0.9
    np.testing.assert_allclose(y[kept], x[kept] / 0.75, rtol=1e-6)
    # deterministic and rate 0 are the identity; the gradient is the mask / keep_prob
    assert HashDropout(0.25).apply({}, x, deterministic=True) is x
    assert HashDropout(0.0).apply({}, x, deterministic=False) is x
    g = jax.grad(lambda v: HashDropout(0.25).apply(
        {}, v, deterministic=False, rngs={"dropout": jax.random.key(7)}).sum())(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(g), kept / 0.75, rtol=1e-6)


def _grads(dropout_impl, remat_policy, deterministic=False):
    cfg = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=32)
    model = BertForMaskedLM(cfg, ModelOptions(dropout_impl=dropout_impl, remat_policy=remat_policy))
    ids = jax.random.randint(jax.random.key(1), (2, 16), 1, 64)
    params = model.init(jax.random.key(0), ids)["params"]

    def loss(p):
        out = model.apply({"params": p}, ids, deterministic=deterministic, rngs={"dropout": jax.random.key(5)})
        return jnp.mean(out.logits ** 2)
    return jax.grad(loss)(params)


def test_remat_recomputes_the_same_masks():
    # Full remat recomputes each layer's forward pass, dropout included, for the backward pass:
    # with masks that are a function of (key, position) the gradients are those without remat.
    # (threefry passes this too; it guards the hash path, which is the one the recipes train with.)
    plain = _grads("hash", "none")
    for policy in ("full", "offload"):
        remat = _grads("hash", policy)
        for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(remat)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7, err_msg=policy)
    # and dropout is really on: the deterministic gradients differ
    other = _grads("hash", "none", deterministic=True)
    diff = max(float(jnp.abs(a - b).max()) for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(other)))
    assert diff > 1e-4


SHARDED = textwrap.dedent("""
    import json, math, re
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from jaxbert.model.dropout import hash_keep_mask
    mesh = Mesh(np.array(jax.devices()), ("data",))
    key = jax.random.key(11)
    whole = np.asarray(jax.jit(lambda k: hash_keep_mask(k, (16, 4, 32, 32), 0.9))(key))
    f = jax.jit(lambda k: hash_keep_mask(k, (16, 4, 32, 32), 0.9),
                out_shardings=NamedSharding(mesh, P("data")))
    split = f(key)
    hlo = f.lower(key).compile().as_text()  # the per-device program
    largest = max(math.prod(int(d) for d in dims.split(",") if d) for dims in re.findall(r"u32\[([0-9,]*)\]", hlo))
    print("RESULT " + json.dumps({"devices": len(jax.devices()), "equal": bool((np.asarray(split) == whole).all()),
                                  "largest_u32": largest}))
""")


def test_mask_does_not_depend_on_how_the_array_is_split():
    out = child_result(SHARDED)
    assert out["devices"] == 8
    # each device computes the bits of its own 2 rows, never the whole array's (as a generator that
    # GSPMD cannot split, e.g. threefry with jax_threefry_partitionable off or rbg, would) ...
    # (threefry with jax_threefry_partitionable off holds a u32[65536] here: 4x the whole array's bits)
    assert out["largest_u32"] == 2 * 4 * 32 * 32, out
    assert out["equal"]  # ... and they are the rows of the unsplit mask


def test_recipe_names_a_bad_dropout_impl():
    assert recipes.load("tiny-demo").model.dropout_impl == "hash"
    with pytest.raises(recipes.RecipeError, match="model.dropout_impl"):
        recipes.load("tiny-demo", ["model.dropout_impl=philox"])
    with pytest.raises(ValueError, match="dropout_impl"):
        BertForMaskedLM(BertConfig(), ModelOptions(dropout_impl="philox")).init(
            jax.random.key(0), jnp.ones((1, 4), jnp.int32))


def _block_model(position="absolute", dropout_impl="hash", **options):
    """A 2-layer model for the block options (attention_chunks, ffn_chunks, ...)."""
    cfg = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=32, position_embedding_type=position)
    return BertForMaskedLM(cfg, ModelOptions(dropout_impl=dropout_impl, **options))


@pytest.mark.parametrize("position", ["absolute", "relative_key"])
def test_attention_in_query_blocks_gives_the_whole_attention_dropout_included(position):
    ids = jax.random.randint(jax.random.key(1), (2, 16), 1, 64)
    attention_mask = jnp.ones((2, 16), jnp.int32).at[1, 11:].set(0)  # padding in the second row
    whole, blocks = _block_model(position, attention_chunks=1), _block_model(position, attention_chunks=4)
    params = whole.init(jax.random.key(0), ids)["params"]

    def run(model, p, deterministic):
        out = model.apply({"params": p}, ids, attention_mask=attention_mask, deterministic=deterministic,
                          rngs={"dropout": jax.random.key(5)})
        return out.logits

    for deterministic in (True, False):  # with dropout on, the blocks' masks are slices of the whole one
        a, b = run(whole, params, deterministic), run(blocks, params, deterministic)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    ga = jax.grad(lambda p: jnp.sum(run(whole, p, False) ** 2))(params)
    gb = jax.grad(lambda p: jnp.sum(run(blocks, p, False) ** 2))(params)
    for x, y in zip(jax.tree.leaves(ga), jax.tree.leaves(gb)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-6)
    # the hashed bits of a block are that block of the whole array's bits
    whole_bits = np.asarray(hash_bits(jax.random.key(2), (2, 4, 16, 16)))
    block = np.asarray(hash_bits(jax.random.key(2), (2, 4, 4, 16), whole=(2, 4, 16, 16), start=(0, 0, 8, 0)))
    np.testing.assert_array_equal(block, whole_bits[:, :, 8:12])


@pytest.mark.parametrize("option,what", [("attention_chunks", "attention"), ("ffn_chunks", "hidden")])
def test_blocks_with_threefry_dropout_are_refused_by_name(option, what):
    ids = jnp.ones((1, 8), jnp.int32)
    model = _block_model(dropout_impl="threefry", **{option: 2})
    params = model.init(jax.random.key(0), ids)["params"]
    with pytest.raises(ValueError, match=f"{option}=2 with {what} dropout needs dropout_impl 'hash'"):
        model.apply({"params": params}, ids, deterministic=False, rngs={"dropout": jax.random.key(1)})
    with pytest.raises(recipes.RecipeError, match=f"model.{option}"):
        recipes.load("tiny-demo", [f"model.{option}=0"])
    with pytest.raises(ValueError, match=f"{option} must be a positive integer"):
        _block_model(**{option: 1.5}).init(jax.random.key(0), ids)


@pytest.mark.parametrize("scan,remat", [(False, "none"), (True, "offload")])
def test_feed_forward_in_token_blocks_gives_the_whole_block(scan, remat):
    ids = jax.random.randint(jax.random.key(1), (2, 16), 1, 64)
    models = {c: _block_model(ffn_chunks=c, scan_layers=scan, remat_policy=remat) for c in (1, 2, 4)}
    params = models[1].init(jax.random.key(0), ids)["params"]

    def loss(p, c, deterministic):
        out = models[c].apply({"params": p}, ids, deterministic=deterministic, rngs={"dropout": jax.random.key(5)})
        return jnp.mean(out.logits ** 2)

    def close(x, y):
        for a, b in zip(jax.tree.leaves(x), jax.tree.leaves(y)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)

    # blocks of 8 or 4 tokens give the whole block's loss and gradients, with dropout on too: the mask is
    # drawn once for [B, T, H] and each block applies its slice (a block at the wrong offset breaks this)
    for deterministic in (True, False):
        whole = jax.value_and_grad(loss)(params, 1, deterministic)
        close(whole, jax.value_and_grad(loss)(params, 2, deterministic))
        close(whole, jax.value_and_grad(loss)(params, 4, deterministic))
    assert abs(float(whole[0]) - float(loss(params, 1, True))) > 1e-6  # dropout was really on


def test_dropping_everything_gives_zeros_and_a_zero_gradient():
    x = jnp.arange(12.0).reshape(3, 4)
    g = jax.grad(lambda v: jnp.sum(apply_hash_dropout(v, jax.random.key(0), 1.0)))(x)
    assert not np.any(np.asarray(apply_hash_dropout(x, jax.random.key(0), 1.0)))
    assert np.all(np.asarray(g) == 0.0)  # x / 0 made it NaN

