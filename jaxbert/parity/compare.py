"""Layer-by-layer numerical parity between jaxbert and transformers (PyTorch).

The same weights go into both: jaxbert's params are written out as a
transformers state dict (jaxbert.convert.params_to_state_dict) and loaded into
the transformers class of the same name, in eval mode. Differences are taken
on real (non-padding) tokens only.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np

from jaxbert.convert import params_to_state_dict
from jaxbert.errors import require
from jaxbert.fs import atomic_write_text
from jaxbert.model.config import bert_class_name
from jaxbert.model.registry import head
from jaxbert.parity.grad import GradResult, grad_parity

# Default tolerances on max abs diff. Hidden states are LayerNorm outputs
# (order 1); logits rows scale theirs by max(1, max |reference|).
TOLERANCE = {"float32": 1e-5, "bfloat16": 0.15}


@dataclasses.dataclass
class Row:
    stage: str
    max_abs: float
    mean_abs: float
    max_rel: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return bool(self.max_abs <= self.tolerance)


@dataclasses.dataclass
class ParityReport:
    model_class: str
    dtype: str
    rows: list
    argmax_agree: bool | None = None  # MLM argmax equal at every real token
    grad: GradResult | None = None

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows) and (self.grad is None or self.grad.ok)

    def row(self, stage: str) -> Row:
        return next(r for r in self.rows if r.stage == stage)

    def table(self) -> str:
        lines = [f"{self.model_class}, jaxbert {self.dtype} vs transformers float32 (real tokens only)",
                 f"{'stage':<16}{'max abs':>12}{'mean abs':>12}{'max rel':>12}{'tolerance':>12}  ok"]
        for r in self.rows:
            lines.append(f"{r.stage:<16}{r.max_abs:12.3e}{r.mean_abs:12.3e}{r.max_rel:12.3e}"
                         f"{r.tolerance:12.1e}  {'yes' if r.ok else 'NO'}")
        if self.argmax_agree is not None:
            lines.append(f"MLM argmax agrees at every real token: {'yes' if self.argmax_agree else 'NO'}")
        if self.grad is not None:
            g = self.grad
            lines.append(f"gradients: worst relative error {g.worst_rel:.3e} at {g.worst_param}{list(g.worst_index)}"
                         f" (loss {g.loss_jax:.6f} vs {g.loss_torch:.6f}; tolerance {g.tolerance:.0e})"
                         f"  {'yes' if g.ok else 'NO'}")
        lines.append("PASS" if self.ok else "FAIL")
        return "\n".join(lines)

    def to_json(self) -> dict:
        out = {"model_class": self.model_class, "dtype": self.dtype, "ok": self.ok,
               "argmax_agree": self.argmax_agree,
               "rows": [dict(dataclasses.asdict(r), ok=r.ok) for r in self.rows]}
        if self.grad is not None:
            out["grad"] = dict(dataclasses.asdict(self.grad), ok=self.grad.ok)
        return out

    def write_json(self, path) -> None:
        atomic_write_text(path, json.dumps(self.to_json(), indent=2) + "\n")


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


def torch_model(module, params):
    """The transformers model of ``module``'s class, holding ``params`` (float32, eval mode)."""
    torch = require("torch", "torch", "a parity check")
    transformers = require("transformers", "torch", "a parity check")

    name = module.config.class_name(type(module).__name__)  # a RoBERTa config: the Roberta* class
    cfg = transformers.AutoConfig.for_model(**module.config.to_dict())
    cfg._attn_implementation = "eager"
    kwargs = {"add_pooling_layer": module.add_pooling_layer} if head(bert_class_name(name)).base else {}
    model = getattr(transformers, name)(cfg, **kwargs).eval()
    state = {k: torch.from_numpy(np.array(v, np.float32))
             for k, v in params_to_state_dict(params, module.config, name).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Tied decoder weights and buffers are the only keys the state dict may lack.
    missing = [k for k in missing if ".decoder." not in k and not k.endswith("_ids")]
    if missing or unexpected:
        raise RuntimeError(f"transformers {name} did not take the weights: missing {missing}, unexpected {unexpected}")
    return model


def _outputs_torch(model, name, inputs, enc):
    import torch

    kw = {k: torch.from_numpy(np.asarray(v)).long() for k, v in inputs.items()}
    if enc is not None:
        kw["encoder_hidden_states"] = torch.from_numpy(np.asarray(enc[0], np.float32))
        kw["encoder_attention_mask"] = torch.from_numpy(np.asarray(enc[1])).long()
    if model.config.is_decoder:
        # transformers 4.57 gives every query of a multi-token call the last
        # position in relative_key(_query) attention whenever a cache exists
        # (and use_cache=True makes one); without a cache its positions are right.
        kw["use_cache"] = False
    base = model.base_model
    pooled = {}
    hook = None
    if getattr(base, "pooler", None) is not None:
        hook = base.pooler.register_forward_hook(lambda m, i, o: pooled.setdefault("out", o))
    with torch.no_grad():
        out = model(**kw, output_hidden_states=True)
    if hook is not None:
        hook.remove()
    return _stages(name, out.hidden_states, pooled.get("out"), out)


def _stages(name, hidden_states, pooled, out) -> dict:
    """Stage name -> array, for either framework's output object."""
    n = len(hidden_states) - 1
    stages = {"embeddings": hidden_states[0]}
    stages.update({f"layer {i}": hidden_states[i] for i in range(1, n + 1)})
    if pooled is not None:
        stages["pooler"] = pooled
    for stage, attr in head(name).stages:
        stages[stage] = getattr(out, attr)
    return {k: np.asarray(v.detach().numpy() if hasattr(v, "detach") else v, np.float32)
            for k, v in stages.items()}


def _forward(runner, params, input_ids, token_type_ids, attention_mask, enc_states, enc_mask):
    kwargs = {}
    if enc_states is not None:
        kwargs = dict(encoder_hidden_states=enc_states, encoder_attention_mask=enc_mask)
    return runner.apply({"params": params}, input_ids, token_type_ids, attention_mask=attention_mask,
                        output_hidden_states=True, **kwargs)


# Compiled once per module and input shapes (the module is a static, hashable argument).
_jit_forward = jax.jit(_forward, static_argnums=0)


def _outputs_jax(module, params, inputs, enc, dtype, jit):
    runner = module.clone(dtype=jnp.bfloat16 if dtype == "bfloat16" else jnp.float32)
    enc = (None, None) if enc is None else (jnp.asarray(enc[0]), jnp.asarray(enc[1]))
    out = (_jit_forward if jit else _forward)(
        runner, params, jnp.asarray(inputs["input_ids"]), jnp.asarray(inputs["token_type_ids"]),
        jnp.asarray(inputs["attention_mask"]), *enc)
    return _stages(bert_class_name(type(module).__name__), out.hidden_states, out.pooler_output, out)


def compare(module, params, inputs: dict, *, dtype: str = "float32", tolerance: float | None = None,
            grad: bool = False, encoder_states=None, torch_reference=None, jit: bool = True) -> ParityReport:
    """Run jaxbert and transformers on ``inputs`` and diff every stage.

    Args:
      module, params: a jaxbert model and its params (either layout).
      inputs: input_ids, token_type_ids, attention_mask int arrays [B, L]
        ([B, C, L] for BertForMultipleChoice).
      dtype: jaxbert's compute dtype; transformers always runs float32.
      tolerance: max abs diff allowed on hidden states; logits rows scale it
        by max(1, max |reference logits|). Default TOLERANCE[dtype].
      grad: also compare the gradient of every parameter (see grad_parity).
      encoder_states: (encoder_hidden_states [B, S, H], encoder_attention_mask [B, S])
        for decoders with cross-attention.
      torch_reference: a transformers model already holding the weights (reused
        across calls by test matrices); built from params when None.
      jit: compile jaxbert's forward (once per module and shapes); False runs it
        op by op, which is quicker for one call of a tiny model.
    """
    name = bert_class_name(type(module).__name__)  # stages are named as for the BERT class
    tol = TOLERANCE[dtype] if tolerance is None else tolerance
    ref_model = torch_reference if torch_reference is not None else torch_model(module, params)
    ref = _outputs_torch(ref_model, name, inputs, encoder_states)
    ours = _outputs_jax(module, params, inputs, encoder_states, dtype, jit)
    mask = np.asarray(inputs["attention_mask"]).astype(bool)
    token_mask = mask.reshape(-1, mask.shape[-1])  # [B*C, L] for multiple choice
    rows = []
    for stage, r in ref.items():
        if stage in ("pooler", "nsp logits") or (stage == "logits" and r.ndim == 2):
            real = None  # one vector per sequence
        else:
            real = token_mask
        scale = max(1.0, float(np.abs(r).max())) if "logits" in stage else 1.0
        rows.append(_diff(stage, ours[stage], r, real, tol * scale))
    argmax = None
    if "mlm logits" in ref:
        argmax = bool(np.array_equal(ours["mlm logits"][token_mask].argmax(-1),
                                     ref["mlm logits"][token_mask].argmax(-1)))
    report = ParityReport(type(module).__name__, dtype, rows, argmax)
    if grad:
        report.grad = grad_parity(module, params, inputs, ref_model, encoder_states)
    return report
