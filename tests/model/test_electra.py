"""ELECTRA's config and modules: transformers' config.json read and written back as it came, what jaxbert cannot
build refused by name in one line, the registry's answers, the param tree's widths (embedding_size tables,
embeddings_project only where the widths differ), and packed documents computing as separate rows."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import transformers

import jaxbert
from jaxbert.errors import ConfigError
from jaxbert.model.electra.config import ElectraConfig
from jaxbert.model.electra.family import FAMILY, build
from jaxbert.model.families import family_of
from jaxbert.model.options import ModelOptions
from tests.helpers.electra import TINY


def test_transformers_config_json_round_trips_and_the_registry_reads_it(tmp_path):
    transformers.ElectraConfig(**TINY, num_labels=4, architectures=["ElectraForPreTraining"]).save_pretrained(tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    config = jaxbert.model.configs.read_config(tmp_path) if hasattr(jaxbert.model, "configs") else None
    config = config or ElectraConfig.from_json_file(tmp_path / "config.json")
    assert type(config) is ElectraConfig and family_of(config) is FAMILY
    assert (config.embedding_size, config.hidden_size, config.num_labels) == (16, 32, 4)
    assert config.projects_embeddings and config.architectures == ("ElectraForPreTraining",)
    back = config.to_dict()
    assert {k: back[k] for k in written} == written  # every key as it came (num_labels through id2label)
    assert "summary_first_dropout" not in back and "summary_proj_to_labels" not in back


@pytest.mark.parametrize("change,message", [
    ({"position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key' is not supported for ELECTRA"),
    ({"is_decoder": True}, "is_decoder / add_cross_attention: jaxbert builds ELECTRA as an encoder"),
    ({"summary_type": "attn"}, "summary_type 'attn' is not supported"),
    ({"architectures": ["ElectraForCausalLM"]}, "architectures names 'ElectraForCausalLM', not an ELECTRA class"),
    ({"embedding_size": 0}, "embedding_size must be a positive integer, got 0"),
    ({"embedding_size": "16"}, "embedding_size must be an integer, got '16'"),
    ({"summary_activation": "swishy"}, "summary_activation 'swishy' is unknown"),
])
def test_what_it_cannot_build_is_refused_by_name(change, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        ElectraConfig.from_dict(dict(TINY, model_type="electra", **change))
    assert "\n" not in str(info.value)


def test_a_multiple_choice_summary_transformers_cannot_run_is_refused():
    config = ElectraConfig(**dict(TINY, summary_proj_to_labels=True, num_labels=5))
    with pytest.raises(ConfigError, match=r"summary_proj_to_labels projects the summary to num_labels \(5\)"):
        build("ElectraForMultipleChoice", config).init(jax.random.PRNGKey(0), jnp.zeros((1, 2, 4), jnp.int32))
    with pytest.raises(ValueError, match="decode=True: ELECTRA is an encoder"):
        build("ElectraForPreTraining", config, ModelOptions(decode=True))


def test_the_registry_lists_its_classes_and_counts_its_flops():
    assert FAMILY.class_names() == ("ElectraModel", "ElectraForPreTraining", "ElectraForMaskedLM",
                                    "ElectraForSequenceClassification", "ElectraForTokenClassification",
                                    "ElectraForQuestionAnswering", "ElectraForMultipleChoice")
    assert FAMILY.mlm_class("electra") == "ElectraForMaskedLM" and "electra" in jaxbert.MODEL_TYPES
    config = ElectraConfig(**TINY)
    # 2 layers of 4 H^2 + 2 H I, and embeddings_project's E x H
    assert FAMILY.non_embedding_params(config) == 2 * (4 * 32 * 32 + 2 * 32 * 37) + 16 * 32
    shapes = jax.eval_shape(build("ElectraModel", config).init, jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))
    matmuls = sum(np.prod(leaf.shape) for path, leaf in jax.tree_util.tree_flatten_with_path(shapes)[0]
                  if path[-1].key == "kernel")
    assert matmuls == FAMILY.non_embedding_params(config)


def test_packed_documents_compute_as_separate_rows_and_scan_changes_nothing():
    """Two documents packed in one row (segment_ids 1, 2) give what each gives alone: attention stays within its
    document and its positions restart at 0; the scanned stack gives the same logits from the same weights."""
    config = ElectraConfig(**dict(TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    module = build("ElectraForPreTraining", config)
    rng = np.random.RandomState(0)
    a, b = rng.randint(1, 99, 5), rng.randint(1, 99, 7)
    params = module.init(jax.random.PRNGKey(1), jnp.zeros((1, 12), jnp.int32))["params"]
    apply = jax.jit(module.apply)
    packed = apply({"params": params}, jnp.asarray(np.concatenate([a, b])[None]),
                   segment_ids=jnp.asarray([[1] * 5 + [2] * 7])).logits[0]
    # each document alone, padded to the same length (one compile): its real tokens' logits
    alone_ids = np.zeros((2, 12), np.int64)
    alone_ids[0, :5], alone_ids[1, :7] = a, b
    alone = apply({"params": params}, jnp.asarray(alone_ids), attention_mask=jnp.asarray(alone_ids > 0)).logits
    alone = [alone[0, :5], alone[1, :7]]
    np.testing.assert_allclose(packed, np.concatenate(alone), atol=1e-5, rtol=0)
    from jaxbert.model.electra.table import Table
    from jaxbert.model.params import flatten, unflatten
    table = Table(config, "ElectraForPreTraining", scan_layers=True)
    flat, stacked = flatten(params), {}
    for e in Table(config, "ElectraForPreTraining").entries:
        target = table.by_key[e.key]
        if target.layer is None:
            stacked[target.path] = flat[e.path]
        else:
            stacked.setdefault(target.path, np.zeros(table.leaf_shapes[target.path], np.float32))[target.layer] = \
                flat[e.path]
    scanned = build("ElectraForPreTraining", config, ModelOptions(scan_layers=True))
    out = jax.jit(scanned.apply)({"params": unflatten(stacked)}, jnp.asarray(np.concatenate([a, b])[None]),
                                 segment_ids=jnp.asarray([[1] * 5 + [2] * 7])).logits[0]
    np.testing.assert_allclose(out, packed, atol=1e-6, rtol=0)
