"""Gradient parity: one fixed masking, the same loss, every parameter's gradient compared."""

from __future__ import annotations

import copy
import inspect
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxbert.convert import params_to_state_dict
from jaxbert.model.families import BY_MODEL_TYPE
from jaxbert.model.registry import main_output, spec_of
from jaxbert.parity.report import GRAD_TOLERANCE, GradResult

MASK_RATE = 0.15
FLOOR = 1e-3  # see grad_parity


def fixed_masking(inputs: dict, vocab_size: int, seed: int = 0, pad_id: int | None = None):
    """MLM labels [B, L] (-100 = not predicted) at 15% of the real tokens, first and
    last real token of each row excluded; the inputs there become random ids, never pad_id
    (transformers' embedding keeps the pad row's gradient at 0, as padding_idx; jaxbert's
    pretraining never puts the pad id at a real position, and a RoBERTa's pad id, 1, is in the draw)."""
    rng = np.random.default_rng(seed)
    ids = np.array(inputs["input_ids"])
    real = np.asarray(inputs["attention_mask"]).astype(bool)
    edge = np.zeros_like(real)
    edge[..., 0] = True
    last = real.sum(-1) - 1
    np.put_along_axis(edge, np.maximum(last, 0)[..., None], True, axis=-1)
    pick = real & ~edge & (rng.random(ids.shape) < MASK_RATE)
    pick.reshape(-1)[np.flatnonzero(real & ~edge)[:1]] = True  # at least one prediction
    labels = np.where(pick, ids, -100)
    drawn = rng.integers(1, vocab_size, ids.shape)
    if pad_id is not None and pad_id > 0:  # ids from 1 never meet a pad id of 0 (BERT's): that draw is unchanged
        drawn = np.where(drawn == pad_id, pad_id % (vocab_size - 1) + 1, drawn)
    ids = np.where(pick, drawn, ids)
    nsp = rng.integers(0, 2, ids.shape[:1])
    return dict(inputs, input_ids=ids.astype(np.int32)), labels, nsp


def _ce(logits, labels):
    """Mean cross-entropy over labels != -100, as torch.nn.CrossEntropyLoss does."""
    valid = labels != -100
    logits = logits.astype(jnp.promote_types(logits.dtype, jnp.float32))
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.where(valid, labels, 0))
    return jnp.sum(nll * valid) / jnp.maximum(jnp.sum(valid), 1)


def grad_parity(module, params, inputs, torch_model, encoder_states=None, seed: int = 0,
                dtype: str = "float32"):
    """Worst relative gradient error over all parameters, and where it is.

    ``dtype`` float64 runs both sides in float64 (call it inside
    compare.numerics("float64"); ``torch_model`` is then converted to float64).
    """
    import torch
    spec = spec_of(type(module).__name__, module.config)  # RoBERTa classes behave as the BERT class they extend
    name = module.config.class_name(type(module).__name__)
    wide = dtype == "float64"
    jdtype = jnp.float64 if wide else jnp.float32
    module = module.clone(options=module.options.replace(dtype=jdtype, param_dtype=jdtype))
    if wide:
        torch_model = as_float64(torch_model)
    tdtype = torch.float64 if wide else torch.float32
    masked, labels, nsp = fixed_masking(inputs, module.config.vocab_size, seed,
                                        pad_id=getattr(module.config, "pad_token_id", None))
    stages = dict(spec.stages)
    has_mlm, has_nsp = "mlm logits" in stages, "nsp logits" in stages
    enc_kw = {} if encoder_states is None else dict(
        encoder_hidden_states=jnp.asarray(encoder_states[0], jdtype), encoder_attention_mask=jnp.asarray(encoder_states[1]))

    def loss_fn(p):
        out = module.apply({"params": p}, masked["input_ids"], masked["token_type_ids"],
                           attention_mask=masked["attention_mask"], **enc_kw)
        loss = 0.0
        if has_mlm:
            loss += _ce(getattr(out, stages["mlm logits"]), labels)
        if has_nsp:
            loss += _ce(getattr(out, stages["nsp logits"]), nsp)
        if not (has_mlm or has_nsp):  # other heads: a plain function of every output
            loss += jnp.mean(main_output(spec, out, jnp.stack) ** 2)
        return loss

    p = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jdtype), params)
    loss_j, grads = jax.value_and_grad(loss_fn)(p)
    ours = params_to_state_dict(grads, module.config, name)

    kw = {k: torch.from_numpy(np.asarray(v)).long() for k, v in masked.items()
          if k != "token_type_ids" or "token_type_ids" in inspect.signature(torch_model.forward).parameters}
    if encoder_states is not None:
        kw["encoder_hidden_states"] = torch.from_numpy(np.asarray(encoder_states[0])).to(tdtype)
        kw["encoder_attention_mask"] = torch.from_numpy(np.asarray(encoder_states[1])).long()
    if getattr(torch_model.config, "is_decoder", False):  # transformers 5: only configs that have it
        kw["use_cache"] = False  # see compare._outputs_torch
    torch_model.zero_grad(set_to_none=True)
    out = torch_model(**kw)
    loss_t = 0.0
    ce = torch.nn.CrossEntropyLoss()
    V = module.config.vocab_size
    if has_mlm:
        logits = getattr(out, stages["mlm logits"])
        loss_t = loss_t + ce(logits.reshape(-1, V), torch.from_numpy(labels).long().reshape(-1))
    if has_nsp:
        loss_t = loss_t + ce(getattr(out, stages["nsp logits"]), torch.from_numpy(nsp).long())
    if not (has_mlm or has_nsp):
        loss_t = loss_t + main_output(spec, out, torch.stack).pow(2).mean()
    loss_t.backward()
    theirs = {k: p.grad for k, p in torch_model.named_parameters()}

    pairs = {}
    for key, g in ours.items():
        if key not in theirs:
            raise RuntimeError(f"transformers has no parameter {key}")
        t = theirs[key]  # None: the loss does not reach it
        pairs[key] = (np.asarray(g, np.float64),
                      np.zeros(g.shape) if t is None else t.detach().numpy().astype(np.float64))
    # Each tensor's error relative to its own largest gradient, floored at FLOOR
    # of the largest gradient anywhere: some true gradients are exactly zero
    # (the key bias shifts every score of a row alike, which softmax ignores),
    # and there both frameworks return rounding noise.
    floor = FLOOR * max(float(np.abs(t).max()) for _, t in pairs.values())
    worst = (-1.0, "", ())
    for key, (g, t) in pairs.items():
        d = np.abs(g - t)
        rel = float(d.max() / max(float(np.abs(t).max()), floor, 1e-30))
        if rel > worst[0]:
            worst = (rel, key, tuple(int(i) for i in np.unravel_index(int(d.argmax()), d.shape)))
    return GradResult(worst[0], worst[1], worst[2], float(loss_j), float(loss_t.detach()),
                      tolerance=GRAD_TOLERANCE[dtype])


def as_float64(model):
    """A float64 copy of a transformers model (the float32 weights, exactly), its rotary tables
    (where it has any) and its family's float32 spots taken in float64 too: see float64_reference."""
    import torch

    if next(model.parameters()).dtype == torch.float64:
        return float64_reference(model)
    return float64_reference(copy.deepcopy(model).to(torch.float64))


def float64_reference(model):
    """A float64 transformers model made float64 throughout: its rotary tables (float64_rotary), then
    what its family's entry says (Family.float64_reference: EuroBERT's RMSNorm). Returns the model
    (changed in place)."""
    float64_rotary(model)
    family = BY_MODEL_TYPE.get(getattr(model.config, "model_type", None))
    if family is not None and family.float64_reference is not None:
        family.float64_reference(model)
    return model


def float64_rotary(model):
    """transformers takes RoPE's inverse frequencies, angles, cos and sin in float32 even in a
    float64 model (ModernBERT: 1 float32 ulp off at some angles, 1e-8 on the outputs). Its rotary
    modules (any submodule named ``rotary_emb``) get float64 tables here, from inverse frequencies
    taken in float64 from the config's theta (as jaxbert's float64 path takes them), so a
    float64 comparison tests everything else to 1e-10. Both layouts transformers has: one table per
    module (``inv_freq``; 4.x ModernBERT's per-layer modules, EuroBERT's) and one module holding a
    table per layer type (``{layer_type}_inv_freq``, called with the layer type; 5.x ModernBERT).
    Returns the model (changed in place)."""
    import torch

    def forward(self, x, position_ids, layer_type=None):
        inv = self._float64_inv_freq[layer_type]
        angles = position_ids[..., None].double() * inv.to(position_ids.device)[None, None, :]
        angles = torch.cat((angles, angles), dim=-1)  # rotate-half's layout
        scale = self._float64_scaling[layer_type]
        return (angles.cos() * scale).to(x.dtype), (angles.sin() * scale).to(x.dtype)

    for name, sub in model.named_modules():
        if name.rsplit(".", 1)[-1] != "rotary_emb":
            continue
        tables = {None: "inv_freq"} if hasattr(sub, "inv_freq") else \
            {kind: f"{kind}_inv_freq" for kind in getattr(sub, "layer_types", ()) if hasattr(sub, f"{kind}_inv_freq")}
        if not tables:
            continue
        sub._float64_inv_freq = {kind: _float64_inv_freq(getattr(sub, attr), _theta(sub, kind), torch)
                                 for kind, attr in tables.items()}
        sub._float64_scaling = {kind: float(getattr(sub, "attention_scaling" if kind is None
                                                    else f"{kind}_attention_scaling", 1.0))
                                for kind in tables}
        sub.forward = types.MethodType(forward, sub)
        _float64_rope_application(sys.modules.get(type(model).__module__), torch)
    return model


def _float64_rope_application(modeling, torch):
    """transformers 5's ModernBERT applies the tables to q.float() and k.float() (float32 in a float64
    model: 1e-8 on the outputs). Its modeling module's apply_rotary_pos_emb is wrapped, once, so that
    float64 q and k stay float64; any other dtype goes to transformers' own function unchanged."""
    original = getattr(modeling, "apply_rotary_pos_emb", None)
    if original is None or getattr(original, "_jaxbert_float64", False):
        return
    if list(inspect.signature(original).parameters) != ["q", "k", "cos", "sin", "unsqueeze_dim"]:
        return  # a layout this does not know: left as it is

    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        if q.dtype != torch.float64:
            return original(q, k, cos, sin, unsqueeze_dim)
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    apply_rotary_pos_emb._jaxbert_float64 = True
    modeling.apply_rotary_pos_emb = apply_rotary_pos_emb


def _theta(rotary, layer_type):
    """The RoPE theta a rotary module was built from: its config's rope_theta (4.x), else its
    rope_parameters' (5.x: flat for a family of one layer kind, else per layer type), else None."""
    config = getattr(rotary, "config", None)
    theta = getattr(config, "rope_theta", None) if layer_type is None else None
    params = getattr(config, "rope_parameters", None) or {}
    if theta is None and layer_type is not None:
        theta = (params.get(layer_type) or {}).get("rope_theta")
    elif theta is None:
        theta = params.get("rope_theta")
    return theta


def _float64_inv_freq(buffer, theta, torch):
    """theta ** (-2i / D) in float64, when that reproduces the float32 ``buffer`` (the default RoPE);
    else the buffer widened (a scaled RoPE this does not rebuild)."""
    buffer = buffer.double()
    if not isinstance(theta, (int, float)):
        return buffer
    dim = 2 * buffer.shape[-1]
    wide = 1.0 / (float(theta) ** (torch.arange(0, dim, 2, dtype=torch.float64, device=buffer.device) / dim))
    return wide if torch.allclose(wide, buffer, rtol=1e-6, atol=0.0) else buffer
