"""Layer-by-layer numerical parity between jaxbert and transformers (PyTorch).

The same weights go into both: jaxbert's params are written out as a
transformers state dict (jaxbert.convert.params_to_state_dict) and loaded into
the transformers class of the same name, in eval mode. Differences are taken
on real (non-padding) tokens only.
"""

from __future__ import annotations

import contextlib
import inspect

import jax
import jax.numpy as jnp
import numpy as np

from jaxbert.convert import params_to_state_dict
from jaxbert.errors import InputError, require
from jaxbert.model.registry import spec_of
from jaxbert.parity.grad import as_float64, grad_parity
from jaxbert.parity.report import (GRAD_TOLERANCE, RATIO_LIMIT, TOLERANCE, GradResult, ParityReport, Row,
                                   environment)

__all__ = ["GRAD_TOLERANCE", "RATIO_LIMIT", "TOLERANCE", "GradResult", "ParityReport", "Row", "compare",
           "numerics", "torch_model"]

DTYPES = {"float64": jnp.float64, "float32": jnp.float32, "bfloat16": jnp.bfloat16}
PRECISIONS = ("default", "high", "highest")


@contextlib.contextmanager
def numerics(dtype: str = "float32", precision: str = "highest"):
    """The JAX settings a check runs under: float64 switches jax_enable_x64 on
    for the block; ``precision`` sets jax_default_matmul_precision (on TPU,
    "default" runs float32 matmuls in bf16 passes, which no parity check survives)."""
    if precision not in PRECISIONS:
        raise InputError(f"matmul precision {precision!r} is unknown; expected one of {PRECISIONS}")
    if dtype not in DTYPES:
        raise InputError(f"dtype {dtype!r} is unknown; expected one of {tuple(DTYPES)}")
    with contextlib.ExitStack() as stack:
        if dtype == "float64":
            stack.enter_context(jax.enable_x64(True))
        stack.enter_context(jax.default_matmul_precision(precision))
        yield


def _diff(stage, ours, ref, real, tolerance) -> Row:
    """Differences at real tokens; ``real`` is a bool mask over the leading dims or None."""
    a = np.asarray(ours, np.float64)
    b = np.asarray(ref, np.float64)
    if real is not None:
        a, b = a[real], b[real]
    d = np.abs(a - b)
    # Relative to each element, floored at 1% of the tensor's rms so near-zeros do not explode.
    floor = 1e-2 * np.sqrt(np.mean(b**2)) + 1e-30
    return Row(stage, float(d.max()), float(d.mean()), float((d / np.maximum(np.abs(b), floor)).max()),
               tolerance)


def _distance(a, b, real) -> tuple:
    """(max, rms) of |a - b| at real tokens."""
    d = np.abs(a[real] - b[real]) if real is not None else np.abs(a - b)
    return float(d.max()), float(np.sqrt(np.mean(d ** 2)))


def torch_model(module, params, dtype: str = "float32"):
    """The transformers model of ``module``'s class, holding ``params`` (eval mode,
    float32 or float64)."""
    torch = require("torch", "torch", "a parity check")
    transformers = require("transformers", "torch", "a parity check")

    name = module.config.class_name(type(module).__name__)  # a RoBERTa config: the Roberta* class
    check_transformers_supports(module.config)
    if name in module.config.OWN_CLASSES:
        raise InputError(f"{name} is jaxbert's own class (no transformers version has one): no reference to compare "
                         f"its head with; compare the encoder with --model-class {module.config.CLASS_NAMES[0]}")
    if not hasattr(transformers, name):  # a model type this transformers predates (EuroBERT before 5.x)
        raise InputError(f"transformers {transformers.__version__} has no {name}: no reference to compare with; "
                         "pip install -U transformers")
    spec = spec_of(name, module.config)
    cfg = transformers.AutoConfig.for_model(**module.config.to_dict())
    cfg._attn_implementation = spec.family.reference_attention
    kwargs = {"add_pooling_layer": module.add_pooling_layer} if spec.base and hasattr(module, "add_pooling_layer") \
        else {}
    model = getattr(transformers, name)(cfg, **kwargs).eval()
    np_dtype = np.float64 if dtype == "float64" else np.float32
    if dtype == "float64":
        model = model.to(torch.float64)
    state = {k: torch.from_numpy(np.array(v, np_dtype))
             for k, v in params_to_state_dict(params, module.config, name).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Tied decoder weights and buffers are the only keys the state dict may lack.
    missing = [k for k in missing if ".decoder." not in f".{k}" and not k.endswith("_ids") and k not in spec.ties(module.config)]
    if missing or unexpected:
        raise RuntimeError(f"transformers {name} did not take the weights: missing {missing}, unexpected {unexpected}")
    return model


def check_transformers_supports(config, version: str | None = None) -> None:
    """transformers 5 dropped BERT's relative position embeddings, and transformers 4 cannot express
    every ModernBERT layer pattern: say so by name. ``version`` defaults to the installed transformers'."""
    if version is None:
        import transformers
        version = transformers.__version__
    position = getattr(config, "position_embedding_type", "absolute")  # rotary families have no such field
    if int(version.split(".")[0]) >= 5 and position != "absolute":
        raise InputError(f"position_embedding_type {config.position_embedding_type!r} needs transformers < 5 "
                         f"as the reference (installed: {version}, which has only absolute positions); "
                         "pip install 'transformers<5'")
    conflict = getattr(config, "transformers4_conflict", lambda: None)()  # a family whose 4.x spelling is narrower
    if int(version.split(".")[0]) < 5 and conflict:
        raise InputError(f"{conflict}: no reference to compare with (installed: transformers {version}); "
                         "pip install 'transformers>=5'")


def torch_inputs(model, inputs: dict) -> dict:
    """NumPy inputs -> torch tensors, leaving out token_type_ids where the model takes none (ModernBERT)."""
    import torch

    takes = inspect.signature(model.forward).parameters
    return {k: torch.from_numpy(np.asarray(v)).long() for k, v in inputs.items()
            if k != "token_type_ids" or "token_type_ids" in takes}


def _outputs_torch(model, spec, inputs, enc):
    import torch

    kw = torch_inputs(model, inputs)
    if enc is not None:
        kw["encoder_hidden_states"] = torch.from_numpy(np.asarray(enc[0])).to(next(model.parameters()).dtype)
        kw["encoder_attention_mask"] = torch.from_numpy(np.asarray(enc[1])).long()
    if getattr(model.config, "is_decoder", False):  # transformers 5 gives the field only to configs that have it
        # transformers 4.57 gives every query of a multi-token call the last
        # position in relative_key(_query) attention whenever a cache exists
        # (and use_cache=True makes one); without a cache its positions are right.
        kw["use_cache"] = False
    base = model.base_model
    seen, hooks = {}, []
    for key, module_name in (("pooler", "pooler"), ("final", spec.family.final_norm)):
        if module_name and getattr(base, module_name, None) is not None:
            hooks.append(getattr(base, module_name).register_forward_hook(
                lambda m, i, o, key=key: None if seen.setdefault(key, (i[0], o)) else None))  # None: o unchanged
    with torch.no_grad():
        out = model(**kw, output_hidden_states=True)
    for hook in hooks:
        hook.remove()
    pooled = seen["pooler"][1] if "pooler" in seen else None
    stages = _stages(spec, out.hidden_states, pooled, out, seen["final"][1] if "final" in seen else None)
    if "final" in seen:  # the last layer's own output, whatever hidden_states[-1] holds (see _last_layer_alike)
        stages[_BEFORE_FINAL] = np.asarray(seen["final"][0].detach().numpy(), np.float64)
    return stages


_BEFORE_FINAL = "_before final norm"


def _last_layer_alike(ours: dict, *refs: dict) -> None:
    """Compare the last layer like with like. transformers 4.x's ModernBERT returns the last layer's
    output as hidden_states[-1]; 5.x returns last_hidden_state there (after final_norm), as jaxbert's
    EuroBERT does. Where jaxbert's last hidden state is the final norm's input and the reference's its
    output, the reference's "layer n" becomes the final norm's input (taken by a hook); the final norm
    itself is compared in its own row either way. Changes ``refs`` in place."""
    befores = [ref.pop(_BEFORE_FINAL, None) for ref in refs]
    layers = [k for k in ours if k.startswith("layer ")]
    if not layers or "final norm" not in ours:
        return
    last = max(layers, key=lambda k: int(k.split()[1]))
    ours_after = np.array_equal(ours[last], ours["final norm"])
    for ref, before in zip(refs, befores):
        if before is None or "final norm" not in ref:
            continue
        ref_after = np.array_equal(ref[last], ref["final norm"])
        if ref_after and not ours_after:
            ref[last] = before
        elif ours_after and not ref_after:
            ref[last] = ref["final norm"]


def _stages(spec, hidden_states, pooled, out, final=None) -> dict:
    """Stage name -> array, for either framework's output object."""
    n = len(hidden_states) - 1
    stages = {"embeddings": hidden_states[0]}
    stages.update({f"layer {i}": hidden_states[i] for i in range(1, n + 1)})
    if spec.family.final_norm:  # a norm after the last layer: last_hidden_state is not layer n
        stages["final norm"] = final
    if pooled is not None:
        stages["pooler"] = pooled
    for stage, attr in spec.stages:
        stages[stage] = getattr(out, attr)
    # float64 holds float32 and bfloat16 values exactly: differences are taken there.
    return {k: np.asarray(v.detach().numpy() if hasattr(v, "detach") else v, np.float64)
            for k, v in stages.items()}


def _has_rotary(model) -> bool:
    return any(name.rsplit(".", 1)[-1] == "rotary_emb" for name, _ in model.named_modules())


def _forward(runner, params, input_ids, token_type_ids, attention_mask, enc_states, enc_mask):
    kwargs = {}
    if enc_states is not None:
        kwargs = dict(encoder_hidden_states=enc_states, encoder_attention_mask=enc_mask)
    return runner.apply({"params": params}, input_ids, token_type_ids, attention_mask=attention_mask,
                        output_hidden_states=True, **kwargs)


# Compiled once per module and input shapes (the module is a static, hashable argument).
_jit_forward = jax.jit(_forward, static_argnums=0)


def _outputs_jax(module, params, inputs, enc, dtype, jit):
    """jaxbert's stages; call inside numerics(dtype)."""
    runner = module.clone(options=module.options.replace(dtype=DTYPES[dtype]))
    if dtype == "float64":  # params too: nothing on the way stays float32
        runner = runner.clone(options=runner.options.replace(param_dtype=jnp.float64))
        params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float64), params)
    states_dtype = jnp.float64 if dtype == "float64" else jnp.float32
    enc = (None, None) if enc is None else (jnp.asarray(enc[0], states_dtype), jnp.asarray(enc[1]))
    out = (_jit_forward if jit else _forward)(
        runner, params, jnp.asarray(inputs["input_ids"]), jnp.asarray(inputs["token_type_ids"]),
        jnp.asarray(inputs["attention_mask"]), *enc)
    return _stages(spec_of(type(module).__name__, module.config), out.hidden_states, out.pooler_output, out,
                   out.last_hidden_state)


def compare(module, params, inputs: dict, *, dtype: str = "float32", tolerance: float | None = None,
            grad: bool = False, encoder_states=None, torch_reference=None, jit: bool = True,
            reference: str | None = None, precision: str = "highest") -> ParityReport:
    """Run jaxbert and transformers on ``inputs`` and diff every stage.

    Args:
      module, params: a jaxbert model and its params (either layout).
      inputs: input_ids, token_type_ids, attention_mask int arrays [B, L]
        ([B, C, L] for BertForMultipleChoice).
      dtype: compute dtype of jaxbert. transformers runs float32, or float64
        when dtype is float64 (then params and compute are float64 on both sides).
      tolerance: max abs diff allowed on hidden states; logits rows scale it
        by max(1, max |reference logits|). Default TOLERANCE[dtype].
      grad: also compare the gradient of every parameter (see grad_parity),
        in float64 when dtype is float64, else float32.
      encoder_states: (encoder_hidden_states [B, S, H], encoder_attention_mask [B, S])
        for decoders with cross-attention.
      torch_reference: a transformers model already holding the weights (reused
        across calls by test matrices); built from params when None.
      jit: compile jaxbert's forward (once per module and shapes); False runs it
        op by op, which is quicker for one call of a tiny model.
      reference: "float64" also runs transformers in float64 as the truth: each
        row gets |jaxbert - truth| and |transformers - truth| and their ratio,
        which must stay <= RATIO_LIMIT.
      precision: jax_default_matmul_precision for jaxbert's matmuls.
    """
    spec = spec_of(type(module).__name__, module.config)  # stages are named as for the BERT class
    if reference not in (None, "float64"):
        raise InputError(f"reference {reference!r} is unknown; expected float64")
    tol = TOLERANCE[dtype] if tolerance is None else tolerance
    ref_model = torch_reference if torch_reference is not None else torch_model(module, params)
    if dtype == "float64":
        ref_model = as_float64(ref_model)
    ref = _outputs_torch(ref_model, spec, inputs, encoder_states)
    truth = None
    if reference == "float64":
        truth = _outputs_torch(as_float64(ref_model), spec, inputs, encoder_states)
    with numerics(dtype, precision):
        ours = _outputs_jax(module, params, inputs, encoder_states, dtype, jit)
    own32 = own64 = None
    if truth is not None:  # this backend's float32 rounding on these inputs: jaxbert fp32 against jaxbert fp64
        with numerics("float32", precision):
            own32 = ours if dtype == "float32" else _outputs_jax(module, params, inputs, encoder_states,
                                                                  "float32", jit)
        with numerics("float64", precision):
            own64 = ours if dtype == "float64" else _outputs_jax(module, params, inputs, encoder_states,
                                                                  "float64", jit)
    _last_layer_alike(ours, ref, *([truth] if truth is not None else []))
    mask = np.asarray(inputs["attention_mask"]).astype(bool)
    token_mask = mask.reshape(-1, mask.shape[-1])  # [B*C, L] for multiple choice
    rows = []
    for stage, r in ref.items():
        if stage in ("pooler", "nsp logits") or (stage == "logits" and r.ndim == 2):
            real = None  # one vector per sequence
        else:
            real = token_mask
        scale = max(1.0, float(np.abs(r).max())) if "logits" in stage else 1.0
        row = _diff(stage, ours[stage], r, real, tol * scale)
        if truth is not None:
            row.jax_vs_truth, row.jax_vs_truth_rms = _distance(ours[stage], truth[stage], real)
            row.torch_vs_truth, row.torch_vs_truth_rms = _distance(r, truth[stage], real)
            row.rounding_rms = _distance(own32[stage], own64[stage], real)[1]
        rows.append(row)
    argmax = None
    if "mlm logits" in ref:
        argmax = bool(np.array_equal(ours["mlm logits"][token_mask].argmax(-1),
                                     ref["mlm logits"][token_mask].argmax(-1)))
    ref_name = "transformers " + ("float64" if dtype == "float64" else "float32")
    if spec.family.reference_attention != "eager":
        ref_name += f" ({spec.family.reference_attention} attention)"
    if dtype == "float64" or truth is not None:
        ref_name += "".join(" (float64 rotary tables)" for _ in [0] if _has_rotary(ref_model))
    if truth is not None:
        ref_name += ", float64 as the truth"
    report = ParityReport(type(module).__name__, dtype, rows, argmax, env=environment(dtype, precision, ref_name))
    if grad:
        grad_dtype = "float64" if dtype == "float64" else "float32"
        with numerics(grad_dtype, precision):
            report.grad = grad_parity(module, params, inputs, ref_model, encoder_states, dtype=grad_dtype)
    return report
