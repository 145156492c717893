"""``from_pretrained``, ``save_pretrained`` and ``convert``: the public entry points."""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np

from jaxbert import fs
from jaxbert.model.config import BertConfig
from jaxbert.convert.load import state_dict_to_params, unflatten
from jaxbert.convert.readers import open_source
from jaxbert.convert.report import ConversionError, ConversionReport, ConversionWarning
from jaxbert.convert.writers import _flatten, write_hf, write_jaxbert

DTYPES = {"float32": np.float32, "fp32": np.float32, "float16": np.float16, "fp16": np.float16,
          "half": np.float16, "bfloat16": ml_dtypes.bfloat16, "bf16": ml_dtypes.bfloat16}


def resolve_dtype(dtype):
    """None, a name ("bf16", "float32", ...) or a NumPy/JAX dtype -> np.dtype or None."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        if dtype.lower() not in DTYPES:
            raise ValueError(f"dtype {dtype!r} is unknown; expected one of {sorted(DTYPES)}")
        return np.dtype(DTYPES[dtype.lower()])
    return np.dtype(dtype)


def _class_name(model_class) -> str | None:
    from jaxbert.model.heads import MODEL_CLASSES
    if model_class is None:
        return None
    name = model_class if isinstance(model_class, str) else model_class.__name__
    if name not in MODEL_CLASSES:
        raise ConversionError(f"model class {name!r} is unknown; expected one of {sorted(MODEL_CLASSES)}")
    return name


def infer_class(config: BertConfig, keys: list[str]) -> str:
    """The class a checkpoint was saved from: config ``architectures``, else its keys."""
    from jaxbert.model.heads import MODEL_CLASSES
    for arch in config.architectures or ():
        if arch in MODEL_CLASSES:
            return arch
    if config.architectures:
        raise ConversionError(f"config architectures {config.architectures} name no jaxbert class; "
                              f"pass model_class= one of {sorted(MODEL_CLASSES)}")
    has = lambda prefix: any(k.startswith(prefix) for k in keys)  # noqa: E731
    if has("cls.predictions.") and has("cls.seq_relationship."):
        return "BertForPreTraining"
    if has("cls.predictions."):
        return "BertLMHeadModel" if config.is_decoder else "BertForMaskedLM"
    if has("cls.seq_relationship."):
        return "BertForNextSentencePrediction"
    if has("qa_outputs."):
        return "BertForQuestionAnswering"
    if has("classifier."):  # multiple choice looks like sequence classification; name it if so
        return "BertForSequenceClassification" if has("bert.pooler.") else "BertForTokenClassification"
    return "BertModel"


def load_checkpoint(path, model_class=None, *, config=None, dtype=None, strict: bool = False,
                    scan_layers: bool = False, add_pooling_layer: bool | None = None,
                    seed: int = 0) -> tuple[BertConfig, str, dict, ConversionReport]:
    """Read any supported checkpoint into NumPy params. Returns (config, class name, params, report)."""
    src = open_source(path)
    if config is None:
        if src.config_path is None:
            raise ConversionError(f"{path}: no config.json beside it; pass config= (a BertConfig, "
                                  "a preset name or a config.json path)")
        config = BertConfig.from_json_file(src.config_path)
    elif not isinstance(config, BertConfig):
        config = BertConfig.from_pretrained(config)
    keys = src.keys()
    name = _class_name(model_class) or src.meta.get("model_class") or infer_class(config, keys)
    if name == "BertLMHeadModel" and not config.is_decoder:
        raise ConversionError(f"{path}: BertLMHeadModel needs is_decoder=true in its config")
    if add_pooling_layer is None and name == "BertModel":
        add_pooling_layer = src.meta.get("add_pooling_layer")
    params, report = state_dict_to_params(
        src.items(), config, name, keys=keys, scan_layers=scan_layers, dtype=resolve_dtype(dtype),
        strict=strict, add_pooling_layer=add_pooling_layer, source=src.description, seed=seed,
        adopt_buffers=True)
    return config, name, params, report


def from_pretrained(path, model_class=None, *, config=None, dtype=None, strict: bool = False,
                    scan_layers: bool = False, seed: int = 0, return_report: bool = False,
                    **module_options):
    """Load a checkpoint into a jaxbert module and its params.

    Args:
      path: a Hugging Face directory (model.safetensors, pytorch_model.bin,
        either sharded with an index, or flax_model.msgpack, plus config.json),
        a jaxbert directory (save_pretrained(format='jaxbert')), or one weights
        file (.safetensors, .bin, .pt, .msgpack) with config.json beside it or ``config``.
      model_class: a jaxbert class or its name; None picks it from the config's
        ``architectures`` (or, failing that, from the checkpoint's keys).
      dtype: cast params to it ("bf16", "float16", jnp.float32, ...); None keeps
        the checkpoint's dtype.
      strict: refuse checkpoints with missing params or unused tensors; otherwise
        missing params are initialised and both are listed in a ConversionWarning.
      scan_layers: give the scanned layout (and a module built with scan_layers).
      seed: PRNG seed for initialising missing params.
      module_options: passed to the module (attention_impl, remat_policy,
        add_pooling_layer, ...); ``compute_dtype`` becomes the module's ``dtype``.
    Returns:
      (module, params), or (module, params, report) with ``return_report``.
      ``params`` is the params dict itself: call ``module.apply({'params': params}, ...)``.
      Its leaves are jax Arrays; the module's ``param_dtype`` is their dtype.
    """
    import jax
    from jaxbert.model.heads import MODEL_CLASSES
    if "compute_dtype" in module_options:
        module_options["dtype"] = module_options.pop("compute_dtype")
    config, name, params, report = load_checkpoint(
        path, model_class, config=config, dtype=dtype, strict=strict, scan_layers=scan_layers,
        add_pooling_layer=module_options.get("add_pooling_layer"), seed=seed)
    if report.warning():
        warnings.warn(report.warning(), ConversionWarning, stacklevel=2)
    flat = dict(_flatten(params))
    del params
    dtypes = {v.dtype for v in flat.values()}
    out = {}
    for path_ in list(flat):  # one leaf at a time: NumPy copy freed as its jax copy is made
        out[path_] = jax.device_put(flat.pop(path_))
    param_dtype = dtypes.pop() if len(dtypes) == 1 else np.float32
    module = MODEL_CLASSES[name](config, param_dtype=param_dtype, scan_layers=scan_layers, **module_options)
    return (module, unflatten(out), report) if return_report else (module, unflatten(out))


def save_pretrained(path, module, params, format: str = "hf", max_shard_size: int | str = "5GB") -> Path:
    """Write ``params`` (either layout) for ``module``.

    format='hf': config.json (architectures set) + model.safetensors, sharded
    with model.safetensors.index.json above ``max_shard_size`` ("5GB" = 5*10**9
    bytes); transformers' from_pretrained loads it. format='jaxbert':
    config.json + jaxbert.json + an Orbax checkpoint of the params, loadable
    without torch or transformers.
    """
    name = type(module).__name__
    pooling = getattr(module, "add_pooling_layer", None) if name == "BertModel" else None
    if format not in ("hf", "jaxbert"):
        raise ValueError(f"format {format!r} is unknown; expected 'hf' or 'jaxbert'")
    with _local_target(path) as local:
        if format == "hf":
            write_hf(local, module.config, name, params, max_shard_size=max_shard_size, add_pooling_layer=pooling)
        else:
            write_jaxbert(local, module.config, name, params, add_pooling_layer=pooling)
    return path if fs.is_url(path) else Path(path)


@contextlib.contextmanager
def _local_target(path):
    """The directory a writer fills: path itself when local; for a URL a local folder published
    there when complete (fs.publish_dir)."""
    if not fs.is_url(path):
        yield path
        return
    with fs.publish_dir(path, "model", overwrite=True) as tmp:
        inner = Path(os.fspath(tmp)) / "model"  # the writers build their directory as a sibling swap
        yield inner
        for entry in inner.iterdir():
            entry.rename(Path(os.fspath(tmp)) / entry.name)
        inner.rmdir()


def convert(src, dst, to: str, model_class=None, *, config=None, dtype=None, strict: bool = False,
            scan_layers: bool = False, max_shard_size: int | str = "5GB") -> ConversionReport:
    """Read ``src`` (any supported checkpoint) and write ``dst`` as ``to`` ('jaxbert' or 'hf').

    The params stay NumPy arrays throughout: nothing is placed on an accelerator.
    """
    if to not in ("hf", "jaxbert"):
        raise ValueError(f"to={to!r} is unknown; expected 'hf' or 'jaxbert'")
    t0 = time.perf_counter()
    config, name, params, report = load_checkpoint(src, model_class, config=config, dtype=dtype,
                                                   strict=strict, scan_layers=scan_layers)
    with _local_target(dst) as local:
        if to == "hf":
            write_hf(local, config, name, params, max_shard_size=max_shard_size)
        else:
            write_jaxbert(local, config, name, params)
    report.seconds = time.perf_counter() - t0
    return report
