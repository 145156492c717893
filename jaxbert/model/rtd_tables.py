"""The embedding tables a replaced-token-detection run's two models share, over its joint param tree
{"generator": ..., "discriminator": ...}: ``model_params`` gives each model's own params (the training step's
view), ``export_params`` the two whole models as they are exported and read (a workdir's discriminator:
jaxbert.workdir.read_run). jaxbert.train.rtd builds the joint tree and trains it."""

from __future__ import annotations

import jax
from flax import traverse_util

SHARINGS = ("tied", "gdes", "none")
# The tables shared under `tied` and `gdes`: a path holding "embeddings" then one of these names.
SHARED_TABLES = ("word_embeddings", "position_embeddings", "token_type_embeddings")


def _table_suffix(path: tuple) -> tuple | None:
    """("embeddings", TABLE, ...) of a flattened param path that is a shared table, else None."""
    for i in range(len(path) - 1):
        if path[i] == "embeddings" and path[i + 1] in SHARED_TABLES:
            return path[i:]
    return None


def shared_tables(params) -> dict:
    """{("embeddings", TABLE, leaf): full path} of the shared tables in a model's params."""
    out = {}
    for path in traverse_util.flatten_dict(params):
        suffix = _table_suffix(path)
        if suffix is not None:
            out[suffix] = path
    return out


def _by_suffix(params) -> dict:
    return {suffix: path for suffix, path in shared_tables(params).items()}


def model_params(joint: dict, sharing: str, export: bool = False) -> tuple[dict, dict]:
    """(generator params, discriminator params) each model's apply takes, from the joint tree.

    tied: the discriminator's tables put into the generator's tree (one array: both gradients reach it).
    gdes: the discriminator's tables are stop_gradient(E_G) + E_delta (export: E_G + E_delta, the same values).
    """
    gen, disc = joint["generator"], joint["discriminator"]
    if sharing == "none":
        return gen, disc
    flat_g, flat_d = traverse_util.flatten_dict(gen), traverse_util.flatten_dict(disc)
    if sharing == "tied":
        for suffix, d in _by_suffix(disc).items():
            prefix = _generator_prefix(flat_g, d, suffix)
            flat_g[prefix + suffix] = flat_d[d]
        return traverse_util.unflatten_dict(flat_g), disc
    stop = (lambda x: x) if export else jax.lax.stop_gradient
    g_tables = _by_suffix(gen)
    for suffix, d in _by_suffix(disc).items():
        if suffix in g_tables:
            flat_d[d] = stop(flat_g[g_tables[suffix]]) + flat_d[d]
    return gen, traverse_util.unflatten_dict(flat_d)


def _generator_prefix(flat_gen: dict, disc_path: tuple, suffix: tuple) -> tuple:
    """Where the generator keeps its embeddings: the prefix of its other "embeddings" params (its encoder's
    name), else the discriminator's."""
    for path in flat_gen:
        if "embeddings" in path:
            return path[:path.index("embeddings")]
    return disc_path[:len(disc_path) - len(suffix)]


def export_params(joint: dict, sharing: str) -> tuple[dict, dict]:
    """(generator, discriminator) params as whole models, for export: the shared tables in both, the
    discriminator's GDES tables E_G + E_delta."""
    return model_params(joint, sharing, export=True)
