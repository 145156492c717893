"""``from_pretrained``, ``save_pretrained`` and ``convert``: the public entry points."""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path

import jax
import ml_dtypes
import numpy as np

from jaxbert import fs
from jaxbert.errors import InputError
from jaxbert.fs import check_destination, publish_dir
from jaxbert.workdir import WorkdirError, is_workdir, read_run, recorded_config
from jaxbert.model.configs import PRESETS, config_classes
from jaxbert.model.bert.config import BertConfig, bert_class_name
from jaxbert.model.configs import read_config as _read_config
from jaxbert.model.configs import read_config_dict
from jaxbert.model.families import family_of
from jaxbert.model.layers.attention import describe as describe_attention
from jaxbert.model.classes import ALL_MODEL_CLASSES, build_model
from jaxbert.model.options import ModelOptions
from jaxbert.model.params import flatten, unflatten
from jaxbert.model.registry import HEADS, head, spec_of
from jaxbert.convert.load import state_dict_to_params
from jaxbert.convert.readers import TreeSource, open_source
from jaxbert.convert.result import ConversionError, ConversionReport, ConversionWarning
from jaxbert.convert.tokenizer_files import copy_tokenizer, tokenizer_files
from jaxbert.convert.writers import write_hf, write_jaxbert

_LOG = logging.getLogger("jaxbert")
MODEL_KIND = "model"  # what save_pretrained, convert and export publish (fs.publish_dir)

DTYPES = {"float32": np.float32, "fp32": np.float32, "float16": np.float16, "fp16": np.float16,
          "half": np.float16, "bfloat16": ml_dtypes.bfloat16, "bf16": ml_dtypes.bfloat16,
          "float64": np.float64, "fp64": np.float64, "double": np.float64}
# The attention a loaded model runs unless told: the fused path, whose memory grows with the window and not
# with T^2, and whose numbers agree with the einsum path within float32 rounding. It falls back to einsum
# (jaxbert.model.layers.attention.path) where the probabilities are needed: returned, multiplied by a head
# mask, or dropped out in training. Training recipes and `jaxbert parity` set their own.
DEFAULT_ATTENTION = "auto"


def resolve_dtype(dtype):
    """None, a name ("bf16", "float32", ...) or a NumPy/JAX dtype -> np.dtype or None."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        if dtype.lower() not in DTYPES:
            raise ConversionError(f"dtype {dtype!r} is unknown; expected one of {sorted(DTYPES)}")
        return np.dtype(DTYPES[dtype.lower()])
    return np.dtype(dtype)


def _class_name(model_class) -> str | None:
    if model_class is None:
        return None
    name = model_class if isinstance(model_class, str) else model_class.__name__
    if name not in ALL_MODEL_CLASSES:
        raise ConversionError(f"model class {name!r} is unknown; expected one of {sorted(ALL_MODEL_CLASSES)}")
    return name


def read_config(path):
    """config.json -> the config class of its model_type's family (jaxbert.model.families), BertConfig by default."""
    return _read_config(path)


def _is_base(name: str) -> bool:
    """Whether a class is a bare encoder built on BERT's modules (which may lack the pooler)."""
    return bert_class_name(name) in HEADS and head(bert_class_name(name)).base


def infer_class(config: BertConfig, keys: list[str]) -> str:
    """The class a checkpoint was saved from, as its config's family says (``Family.infer_class``:
    config ``architectures``, else its keys)."""
    family = family_of(config)
    name = family.infer_class(config, keys)
    if name is None:
        raise ConversionError(f"config architectures {list(config.architectures)} name no {family.name} class; "
                              f"pass model_class= one of {family.class_names()}")
    return name


def _open(path, step: int | None):
    """(source, config read from a training workdir or None)."""
    if is_workdir(path):
        try:
            config, name, tree, _ = read_run(path, step)
        except WorkdirError as e:
            raise ConversionError(str(e)) from None
        src = TreeSource(tree, f"{path} (training workdir)")
        src.meta = {"model_class": name}
        return src, config
    if step is not None:
        raise ConversionError(f"{path}: step={step} needs a training workdir (a folder with checkpoints/)")
    return open_source(path), None


def checkpoint_config(path, step: int | None = None):
    """The config a checkpoint was saved with (a training workdir's run config, else the config.json
    beside it), to ask its family which class to load it as before loading it."""
    if is_workdir(path):
        if step is None and recorded_config(path):
            return read_config_dict(recorded_config(path))
        try:
            return read_run(path, step)[0]
        except WorkdirError as e:
            raise ConversionError(str(e)) from None
    src = open_source(path)
    if src.config_path is None:
        raise ConversionError(f"{path}: no config.json beside it")
    return read_config(src.config_path)


def family_class(path, suffix: str, what: str, step: int | None = None) -> str:
    """The class with a head suffix ("ForMaskedLM") in the family of the checkpoint at ``path``;
    refused naming the family and ``what`` needs it when the family has no such head."""
    config = checkpoint_config(path, step)
    family = family_of(config)
    name = family.class_of(config.model_type, suffix)
    if name is None:
        raise ConversionError(f"{path}: {what} needs a {suffix} head, and model_type {config.model_type!r} "
                              f"({family.name}) has none; its classes are {family.class_names()}")
    return name


def load_checkpoint(path, model_class=None, *, config=None, dtype=None, strict: bool = False,
                    scan_layers: bool = False, add_pooling_layer: bool | None = None,
                    seed: int = 0, step: int | None = None) -> tuple[BertConfig, str, dict, ConversionReport]:
    """Read any supported checkpoint into NumPy params. Returns (config, class name, params, report)."""
    src, config_of_run = _open(path, step)
    if config is None and config_of_run is not None:
        config = config_of_run
    elif config is None:
        if src.config_path is None:
            raise ConversionError(f"{path}: no config.json beside it; pass config= (a BertConfig, "
                                  "a preset name or a config.json path)")
        config = read_config(src.config_path)
    elif not isinstance(config, config_classes()):
        config = BertConfig.from_pretrained(config) if str(config) in PRESETS else read_config(config)
    if hasattr(src, "for_model"):  # a TF bundle: named as the config's family reads it (ELECTRA's hold two models)
        src = src.for_model(config, _class_name(model_class) or src.meta.get("model_class"))
    keys = src.keys()
    name = _class_name(model_class) or src.meta.get("model_class") or infer_class(config, keys)
    if spec_of(name, config).decoder and not config.is_decoder:  # generate's model class: say what this one is
        own = src.meta.get("model_class") or infer_class(config, keys)
        raise ConversionError(
            f"{path}: a masked-LM model ({own}, is_decoder false in its config): it fills in masked words "
            f"(`jaxbert fill-mask {path} 'text with [MASK]'`) and does not continue text; generating needs a "
            f"decoder, a {name} whose config has is_decoder: true")
    if add_pooling_layer is None and _is_base(name):
        add_pooling_layer = src.meta.get("add_pooling_layer")
    params, report = state_dict_to_params(
        src.items(), config, name, keys=keys, scan_layers=scan_layers, dtype=resolve_dtype(dtype),
        strict=strict, add_pooling_layer=add_pooling_layer, source=src.description, seed=seed,
        adopt_buffers=True, shapes=getattr(src, "shapes", None))
    report.ignored[:0] = src.skipped
    return config, name, params, report


def from_pretrained(path, model_class=None, *, config=None, dtype=None, strict: bool = False,
                    scan_layers: bool = False, seed: int = 0, return_report: bool = False,
                    step: int | None = None, **module_options):
    """Load a checkpoint into a jaxbert module and its params.

    Args:
      path: a Hugging Face directory (model.safetensors, pytorch_model.bin,
        either sharded with an index, or flax_model.msgpack, plus config.json),
        an original TensorFlow BERT checkpoint (a folder with bert_config.json and
        bert_model.ckpt.index/.data-*, or the checkpoint prefix; read without TensorFlow),
        a jaxbert directory (save_pretrained(format='jaxbert')), or one weights
        file (.safetensors, .bin, .pt, .msgpack) with config.json beside it or ``config``,
        or a training workdir (its newest readable checkpoint, or ``step``; the
        config comes from the run's recipe; see also ``tokenizer_path``).
      model_class: a jaxbert class or its name; None picks it from the config's
        ``architectures`` (or, failing that, from the checkpoint's keys).
      dtype: cast params to it ("bf16", "float16", jnp.float32, ...); None keeps
        the checkpoint's dtype.
      strict: refuse checkpoints with missing params or unused tensors; otherwise
        missing params are initialised and both are listed in a ConversionWarning.
      scan_layers: give the scanned layout (and a module built with scan_layers).
      seed: PRNG seed for initialising missing params.
      module_options: passed to the module (attention_impl, remat_policy,
        add_pooling_layer, ...); ``compute_dtype`` becomes the module's ``dtype``. attention_impl is
        DEFAULT_ATTENTION ("auto") unless given: the module's ``options.attention_impl`` says it, and the log
        (logger "jaxbert") says which path it takes.
    Returns:
      (module, params), or (module, params, report) with ``return_report``.
      ``params`` is the params dict itself: call ``module.apply({'params': params}, ...)``.
      Its leaves are jax Arrays; the module's ``param_dtype`` is their dtype.
    """
    if "compute_dtype" in module_options:
        module_options["dtype"] = module_options.pop("compute_dtype")
    config, name, params, report = load_checkpoint(
        path, model_class, config=config, dtype=dtype, strict=strict, scan_layers=scan_layers,
        add_pooling_layer=module_options.get("add_pooling_layer"), seed=seed, step=step)
    if report.warning():
        warnings.warn(report.warning(), ConversionWarning, stacklevel=2)
    flat = flatten(params)
    del params
    dtypes = {v.dtype for v in flat.values()}
    out = {}
    for path_ in list(flat):  # one leaf at a time: NumPy copy freed as its jax copy is made
        out[path_] = jax.device_put(flat.pop(path_))
    param_dtype = dtypes.pop() if len(dtypes) == 1 else np.float32
    module_options.setdefault("attention_impl", DEFAULT_ATTENTION)
    pooling = {"add_pooling_layer": module_options.pop("add_pooling_layer")} if "add_pooling_layer" in module_options else {}
    try:
        options = ModelOptions(param_dtype=param_dtype, scan_layers=scan_layers, **module_options)
    except TypeError as e:  # an option ModelOptions does not have
        raise ValueError(f"from_pretrained: {e}") from None
    try:
        module = build_model(name, config, options, **pooling)
    except ValueError as e:  # add_pooling_layer for a class of a family without a pooler
        raise ValueError(f"from_pretrained: {e}") from None
    _LOG.info("from_pretrained: %s, attention_impl %r: %s", name, options.attention_impl,
              describe_attention(options))
    return (module, unflatten(out), report) if return_report else (module, unflatten(out))


def save_pretrained(path, module, params, format: str = "hf", max_shard_size: int | str = "5GB",
                    overwrite: bool = True) -> Path:
    """Write ``params`` (either layout) for ``module``.

    format='hf': config.json (architectures set) + model.safetensors, sharded
    with model.safetensors.index.json above ``max_shard_size`` ("5GB" = 5*10**9
    bytes); transformers' from_pretrained loads it. format='jaxbert':
    config.json + jaxbert.json + an Orbax checkpoint of the params, loadable
    without torch or transformers.

    The directory is built beside ``path`` and swapped in when complete. An
    existing ``path`` is replaced only when it is an earlier jaxbert model
    directory (and ``overwrite``); a folder holding anything else is refused.
    """
    if format not in ("hf", "jaxbert"):
        raise InputError(f"format {format!r} is unknown; expected 'hf' or 'jaxbert'")
    name = type(module).__name__
    pooling = getattr(module, "add_pooling_layer", None) if _is_base(name) else None
    with publish_dir(path, MODEL_KIND, overwrite) as tmp:  # a URL: filled locally, then published
        _write(tmp, format, module.config, name, params, max_shard_size, pooling)
    return path if fs.is_url(path) else Path(path)


def _write(directory, to, config, name, params, max_shard_size, pooling=None) -> None:
    if to == "hf":
        write_hf(directory, config, name, params, max_shard_size=max_shard_size, add_pooling_layer=pooling)
    else:
        write_jaxbert(directory, config, name, params, add_pooling_layer=pooling)


def convert(src, dst, to: str, model_class=None, *, config=None, dtype=None, strict: bool = False,
            scan_layers: bool = False, max_shard_size: int | str = "5GB",
            overwrite: bool = False) -> ConversionReport:
    """Read ``src`` (any supported checkpoint) and write ``dst`` as ``to`` ('jaxbert' or 'hf').

    The params stay NumPy arrays throughout: nothing is placed on an accelerator.
    ``dst`` is written as ``save_pretrained`` writes it, except that an earlier
    jaxbert model directory there is replaced only with ``overwrite``; ``dst``
    may not be ``src``, inside it or around it. The tokenizer files beside ``src`` (a
    workdir: its run's tokenizer) are copied into ``dst`` byte for byte.
    """
    if to not in ("hf", "jaxbert"):
        raise InputError(f"to={to!r} is unknown; expected 'hf' or 'jaxbert'")
    t0 = time.perf_counter()
    check_destination(dst, MODEL_KIND, overwrite, sources=(src,))  # before the (long) read
    config, name, params, report = load_checkpoint(src, model_class, config=config, dtype=dtype,
                                                   strict=strict, scan_layers=scan_layers)
    tokenizer = tokenizer_files(src)
    with publish_dir(dst, MODEL_KIND, overwrite, sources=(src,)) as tmp:
        _write(tmp, to, config, name, params, max_shard_size)
        copy_tokenizer(tokenizer, tmp)
    report.seconds = time.perf_counter() - t0
    return report
