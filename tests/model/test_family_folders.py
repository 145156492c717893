"""A folder per family (issue 49 item 2): BERT's modules in jaxbert/model/bert/, the 0.2.0 paths forwarding with a
DeprecationWarning, the registry as data about the folders, a family copied with dataclasses.replace; and the
issue-50 items on the same code: the refusal listing the registry's model types (#13), float64 by name (#15),
from_pretrained's fused default attention (#18), BERT's segment ids formed once (#29), live model-type and
pretraining-class lists (#30)."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxbert
from jaxbert.errors import ConfigError
from jaxbert.model.bert.config import BertConfig
from jaxbert.model.classes import build_model
from jaxbert.model.families import FAMILIES, family_of_params
from jaxbert.model.options import ModelOptions

REPO = Path(__file__).resolve().parents[2]
ENV = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
# 0.2.0's module paths that 0.3.0 moved: (old module, a name it had, the module that name lives in now)
MOVED = [("jaxbert.model.config", "BertConfig", "jaxbert.model.bert.config"),
         ("jaxbert.model.config", "read_config", "jaxbert.model.configs"),
         ("jaxbert.model.heads", "BertForMaskedLM", "jaxbert.model.bert.heads"),
         ("jaxbert.model.heads", "build_model", "jaxbert.model.classes"),
         ("jaxbert.model.encoder", "BertEncoder", "jaxbert.model.bert.encoder"),
         ("jaxbert.model.attention", "BertSelfAttention", "jaxbert.model.bert.attention"),
         ("jaxbert.model.table", "Table", "jaxbert.model.bert.table"),
         ("jaxbert.model.families.bert", "BERT", "jaxbert.model.bert.family"),
         ("jaxbert.model.families.roberta", "ROBERTA", "jaxbert.model.roberta.family"),
         ("jaxbert.model.families.modernbert", "MODERNBERT", "jaxbert.model.modernbert.family"),
         ("jaxbert.model.families.spec", "Family", "jaxbert.model.contract")]
SHIMS = {old for old, _, _ in MOVED}
OLD_IMPORT = re.compile(r"^\s*(from|import) (" + "|".join(re.escape(m) for m in sorted(SHIMS)) + r")\b", re.M)


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300, env=ENV)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_each_moved_path_forwards_to_its_new_home_with_a_deprecation_warning():
    code = f"""
import importlib, json, warnings
rows = []
for old, name, new in {MOVED!r}:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(importlib.import_module(old), name)
    same = value is getattr(importlib.import_module(new), name)
    rows.append([old, same, [str(w.message) for w in caught if w.category is DeprecationWarning]])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from jaxbert.model.bert import BertModel
from jaxbert.model.bert.modules import BertModel as new
rows.append(["jaxbert.model.bert.BertModel", BertModel is new, [str(w.message) for w in caught]])
print(json.dumps(rows))
"""
    rows = json.loads(_run(code).splitlines()[-1])
    homes, seen = {old: [] for old, _, _ in MOVED}, set()
    for old, _, new in MOVED:
        homes[old].append(new)
    for old, same, messages in rows:
        assert same, old
        if old in seen:  # warned at its first import
            assert messages == [], (old, messages)
            continue
        seen.add(old)
        assert len(messages) == 1 and "0.4.0" in messages[0], (old, messages)
        assert all(new in messages[0] for new in homes.get(old, ["jaxbert.model.bert.modules"])), (old, messages)


def test_jaxbert_tests_and_benchmarks_import_the_new_paths():
    """No module of the package, the tests or the benchmarks imports a forwarding module (this file names them)."""
    found = []
    for folder in ("jaxbert", "tests", "benchmarks"):
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            dotted = rel[:-3].replace("/", ".")
            if dotted in SHIMS or rel == "tests/model/test_family_folders.py":
                continue
            found += [f"{rel}: {m.group(0).strip()}" for m in OLD_IMPORT.finditer(path.read_text())]
    assert found == []
    assert OLD_IMPORT.search("from jaxbert.model.heads import build_model") and not OLD_IMPORT.search(
        "from jaxbert.model.bert.heads import BertForMaskedLM")


def test_importing_jaxbert_own_modules_raises_no_deprecation_warning_from_the_shims():
    code = f"""
import importlib, pkgutil, warnings, json
import jaxbert
shims = {sorted(SHIMS)!r}
moved, failed = [], []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for info in pkgutil.walk_packages(jaxbert.__path__, "jaxbert."):
        if info.name in shims:
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as e:  # an optional dependency this venv lacks
            failed.append(info.name)
moved = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning) and "moved to jaxbert" in str(w.message)]
print(json.dumps([moved, failed, len(list(pkgutil.walk_packages(jaxbert.__path__, "jaxbert.")))]))
"""
    moved, failed, count = json.loads(_run(code).splitlines()[-1])
    assert moved == []
    assert count > 100 and len(failed) < 10, failed  # the walk imported the package, not a corner of it


def test_a_copy_of_roberta_made_by_replace_registers_in_a_fresh_interpreter_and_loads_no_jax():
    """0.2.0's Family imported its Ref members on read, so dataclasses.replace(ROBERTA, ...) inside the package
    raised a circular ImportError; now the entry is plain data and functions."""
    code = """
import dataclasses, sys
from jaxbert.model.roberta.family import FAMILY
camembert = dataclasses.replace(FAMILY, name="camembert", model_types=("camembert",),
                                class_prefixes={"camembert": "Camembert"}, pretraining_classes=("CamembertForMaskedLM",))
from jaxbert.model import families
families.register(camembert)
from jaxbert import BertConfig
config = BertConfig(model_type="camembert", pad_token_id=1)
print(config.family.name, config.class_name("BertForMaskedLM"), "jax" in sys.modules, "flax" in sys.modules)
"""
    assert _run(code).split() == ["camembert", "CamembertForMaskedLM", "False", "False"]


@pytest.fixture
def camembert():
    """A CamemBERT-like family registered as a copy of RoBERTa's entry (no classes of its own), removed after."""
    from jaxbert.model import families
    family = families.register(dataclasses.replace(
        FAMILIES["roberta"], name="camembert", model_types=("camembert",), class_prefixes={"camembert": "Camembert"},
        heads=("Model", "ForMaskedLM", "ForSequenceClassification"), pretraining_classes=("CamembertForMaskedLM",),
        also="", differences=""))
    yield family
    families.unregister("camembert")


def test_a_family_registered_on_robertas_modules_round_trips_and_is_read_back_as_itself(camembert, tmp_path):
    import torch
    import transformers
    hf_config = transformers.CamembertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                             intermediate_size=24, max_position_embeddings=40, pad_token_id=1,
                                             type_vocab_size=1)
    torch.manual_seed(0)
    hf = transformers.CamembertForMaskedLM(hf_config).eval()
    hf.save_pretrained(tmp_path / "cam")
    module, params = jaxbert.from_pretrained(tmp_path / "cam")
    assert type(module).__name__ == "CamembertForMaskedLM" and module.config.family is camembert
    assert jaxbert.CamembertForMaskedLM is type(module)  # the public face lists the copy's classes
    ids = np.array([[0, 5, 9, 17, 2, 1, 1], [0, 33, 8, 2, 1, 1, 1]])
    mask = (ids != 1).astype(np.int64)
    ours = np.asarray(module.apply({"params": params}, ids, np.zeros_like(ids), attention_mask=mask).logits)
    with torch.no_grad():
        theirs = hf(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
    np.testing.assert_allclose(ours[mask == 1], theirs[mask == 1], atol=2e-5)
    # identified by its config or class, never by its parameter prefix (its tree is RoBERTa's: "roberta/...")
    assert "roberta" in params
    assert family_of_params(params, module.config) is camembert
    assert family_of_params(params, "CamembertForMaskedLM") is camembert
    assert family_of_params(params, "RobertaForMaskedLM") is FAMILIES["roberta"]
    with pytest.raises(KeyError, match="no modernbert encoder"):
        family_of_params(params, "ModernBertForMaskedLM")
    jaxbert.save_pretrained(tmp_path / "back", module, params, format="hf")
    assert json.loads((tmp_path / "back" / "config.json").read_text())["architectures"] == ["CamembertForMaskedLM"]
    back = transformers.CamembertForMaskedLM.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        again = back(torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
    np.testing.assert_allclose(again, theirs, atol=1e-6)


# ---- issue 50 -------------------------------------------------------------------------------------------------

def test_13_an_unsupported_model_type_is_refused_naming_the_registrys_types(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "funnel", "vocab_size": 10}))
    for read in (lambda: BertConfig.from_dict({"model_type": "funnel"}),
                 lambda: jaxbert.model.configs.read_config(tmp_path)):
        with pytest.raises(ConfigError) as e:
            read()
        assert "'funnel' is not supported" in str(e.value)
        for model_type in ("bert", "roberta", "xlm-roberta", "modernbert", "eurobert"):
            assert repr(model_type) in str(e.value)
    with pytest.raises(ConfigError, match="'modernbert' is read by ModernBertConfig, not BertConfig"):
        BertConfig.from_dict({"model_type": "modernbert"})


def test_30_a_family_registered_at_run_time_is_in_the_model_types_and_the_pretraining_classes(camembert):
    import jaxbert.model.bert.config as bert_config
    from jaxbert.train import recipe
    assert "camembert" in bert_config.MODEL_TYPES and "camembert" in jaxbert.MODEL_TYPES
    assert "CamembertForMaskedLM" in recipe.PRETRAINING_CLASSES
    recipe.ModelSection(model_class="CamembertForMaskedLM").check()  # a recipe may train it
    from jaxbert.model import families
    families.unregister("camembert")
    try:
        assert "camembert" not in bert_config.MODEL_TYPES
        assert "CamembertForMaskedLM" not in recipe.PRETRAINING_CLASSES
    finally:
        families.register(camembert)  # the fixture unregisters it


def _tiny_bert_dir(tmp_path, **overrides):
    import torch
    import transformers
    config = transformers.BertConfig(**{**dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                               intermediate_size=24, max_position_embeddings=64), **overrides})
    torch.manual_seed(0)
    transformers.BertForMaskedLM(config).eval().save_pretrained(tmp_path / "bert")
    return tmp_path / "bert"


def test_15_float64_is_a_dtype_name_from_pretrained_takes(tmp_path):
    path = _tiny_bert_dir(tmp_path)
    with jax.enable_x64(True):
        module, params = jaxbert.from_pretrained(path, dtype="float64")
        by_type, _ = jaxbert.from_pretrained(path, dtype=jnp.float64)
        leaves = jax.tree_util.tree_leaves(params)
        assert {leaf.dtype for leaf in leaves} == {jnp.dtype("float64")}
        assert module.options.param_dtype == jnp.float64 == by_type.options.param_dtype


def _temp_bytes(module, params, T: int) -> int:
    """XLA's temporary bytes for a forward and backward pass at [1, T] (compiled, not run)."""
    ids = jnp.ones((1, T), jnp.int32)
    loss = lambda p: module.apply({"params": p}, ids, attention_mask=jnp.ones((1, T), jnp.int32)).logits.sum()  # noqa: E731
    return jax.jit(jax.grad(loss)).lower(params).compile().memory_analysis().temp_size_in_bytes


def test_18_a_loaded_model_runs_the_fused_attention_by_default_and_gives_einsums_numbers(tmp_path, caplog):
    path = _tiny_bert_dir(tmp_path)
    with caplog.at_level(logging.INFO, logger="jaxbert"):
        module, params = jaxbert.from_pretrained(path)
    assert module.options.attention_impl == "auto"
    assert any("attention_impl 'auto'" in r.getMessage() and "einsum where the probabilities" in r.getMessage()
               for r in caplog.records)
    einsum, _ = jaxbert.from_pretrained(path, attention_impl="einsum")
    rng = np.random.default_rng(0)
    B, T = 2, 48
    ids = rng.integers(3, 64, (B, T))
    mask = np.ones((B, T), np.int64)
    mask[1, 30:] = 0
    run = lambda m: lambda p: m.apply({"params": p}, ids, attention_mask=mask).logits  # noqa: E731
    ours, reference = np.asarray(run(module)(params)), np.asarray(run(einsum)(params))
    np.testing.assert_allclose(ours[mask == 1], reference[mask == 1], atol=1e-5, rtol=0)
    # the memory: at T = 8192 einsum holds [1, N, T, T] scores (512 MiB for N = 2); the default, blocks of them
    long = _tiny_bert_dir(tmp_path / "long", max_position_embeddings=8192)
    default, long_params = jaxbert.from_pretrained(long)
    dense, _ = jaxbert.from_pretrained(long, attention_impl="einsum")
    fused_bytes, dense_bytes = _temp_bytes(default, long_params, 8192), _temp_bytes(dense, long_params, 8192)
    assert dense_bytes > 2 * 8192 * 8192 * 4 > 4 * fused_bytes, (dense_bytes, fused_bytes)
    # the probabilities asked for: the einsum fallback runs and returns them, equal to einsum's
    out = module.apply({"params": params}, ids, attention_mask=mask, output_attentions=True)
    ref = einsum.apply({"params": params}, ids, attention_mask=mask, output_attentions=True)
    np.testing.assert_allclose(np.asarray(out.attentions[0]), np.asarray(ref.attentions[0]), atol=1e-6)


def _bert(impl: str, T: int = 32) -> tuple:
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=24, max_position_embeddings=T)
    module = build_model("BertModel", config, ModelOptions(attention_impl=impl), add_pooling_layer=False)
    ids = jnp.asarray(np.random.default_rng(1).integers(3, 64, (2, T)))
    return module, module.init(jax.random.key(0), ids)["params"], ids


def test_29_berts_fused_path_takes_segment_ids_formed_once(monkeypatch):
    """0.2.0 formed the [B, 1, T, T] packed-documents mask and read segment ids back from it in every layer
    (fused.key_segments per layer); now BertModel forms them once, from attention_mask and segment_ids."""
    from jaxbert.model import fused
    calls = []
    derive = fused.key_segments
    monkeypatch.setattr(fused, "key_segments", lambda *a: calls.append(1) or derive(*a))
    blocked, params, ids = _bert("blocked")
    einsum = blocked.clone(options=blocked.options.replace(attention_impl="einsum"))
    segments = np.array([[1] * 12 + [2] * 14 + [0] * 6, [1] * 20 + [2] * 12])
    mask = (segments > 0).astype(np.int32)
    run = lambda m: m.apply({"params": params}, ids, attention_mask=mask,  # noqa: E731
                            segment_ids=segments).last_hidden_state
    ours, reference = np.asarray(run(blocked)), np.asarray(run(einsum))
    np.testing.assert_allclose(ours[mask == 1], reference[mask == 1], atol=1e-5, rtol=0)
    assert calls == []  # no layer read segment ids back from a dense mask
    # a 3-D mask on a fused path: read once by the model, not by each of the 2 layers
    block = (segments[:, :, None] == segments[:, None, :]) & (segments > 0)[:, :, None]
    blocked.apply({"params": params}, ids, attention_mask=block.astype(np.int32))
    assert len(calls) == 1


def test_29_a_3d_mask_on_a_fused_path_must_be_block_diagonal():
    blocked, params, ids = _bert("blocked")
    einsum = blocked.clone(options=blocked.options.replace(attention_impl="einsum"))
    segments = np.array([[1] * 10 + [2] * 22, [1] * 32])
    block = (segments[:, :, None] == segments[:, None, :]).astype(np.int32)  # [B, T, T], documents 0..9, 10..31
    ours = blocked.apply({"params": params}, ids, attention_mask=block).last_hidden_state
    theirs = einsum.apply({"params": params}, ids, attention_mask=block).last_hidden_state
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), atol=1e-5, rtol=0)
    causal = np.broadcast_to(np.tril(np.ones((32, 32), np.int32)), (2, 32, 32))  # not block-diagonal
    with pytest.raises(ValueError, match=r"attention_mask \[B, T, T\]: the fused attention paths .* block-diagonal"):
        blocked.apply({"params": params}, ids, attention_mask=causal)
    einsum.apply({"params": params}, ids, attention_mask=causal)  # the einsum path takes any mask
