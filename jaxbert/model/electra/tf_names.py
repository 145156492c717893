"""Google's original ELECTRA pretraining checkpoints (google-research/electra) named as transformers' classes.

One bundle holds both models of a pretraining run: the discriminator under ``electra/`` (``embeddings``,
``embeddings_project``, ``encoder/layer_N``) with its head ``discriminator_predictions/dense`` and ``dense_1``, and
the generator under ``generator/`` (``embeddings_project``, ``encoder``) with ``generator_predictions/dense``,
``LayerNorm`` and ``output_bias``; the generator reads the shared ``electra/embeddings`` (its own
``generator/embeddings`` where the run untied them). The class read picks the model: ``ElectraForMaskedLM`` the
generator (with the generator's config.json), any other the discriminator. Every variable is mapped or skipped with
its reason; a name under no scope listed here is left out, so that the reader refuses it.
"""

from __future__ import annotations

from jaxbert.model.bert.tf_names import SKIPPED_PARTS, tf_name_to_key

GENERATOR_CLASS = "ElectraForMaskedLM"
_NOT_WEIGHTS = {"temperature": "the sampling temperature, not a weight"}
_OTHER = {"generator": "the generator's (convert with --model-class ElectraForMaskedLM and the generator's "
                       "config.json)",
          "discriminator": "the discriminator's (the generator was asked for)"}


def _scope(name: str) -> str:
    """The name's first two scopes, the unit of the layout ("electra/encoder", "generator_predictions/dense")."""
    return "/".join(name.split("/")[:2])


def _role_of_scope(scope: str, untied: bool) -> tuple[str, str] | None:
    """(model the scope belongs to, its scope under transformers' prefix), or None for an unknown scope."""
    top, _, sub = scope.partition("/")
    if top == "electra" and sub == "embeddings":  # shared, unless the generator has its own
        return ("shared" if not untied else "discriminator"), scope
    if top == "electra" and sub in ("embeddings_project", "encoder"):
        return "discriminator", scope
    if top == "generator" and sub in ("embeddings", "embeddings_project", "encoder"):
        return "generator", f"electra/{sub}"
    if top == "discriminator_predictions" and sub in ("dense", "dense_1"):
        return "discriminator", f"{top}/{'dense_prediction' if sub == 'dense_1' else sub}"
    if top == "generator_predictions" and sub in ("dense", "LayerNorm"):
        return "generator", scope
    if scope == "generator_predictions/output_bias":
        return "generator", "generator_lm_head/bias"
    return None


def tf_names(names: list[str], model_class: str) -> dict:
    """{TF name: (state-dict key or None, transpose?, why skipped)} of the model ``model_class`` reads."""
    want = "generator" if model_class == GENERATOR_CLASS else "discriminator"
    untied = any(n.startswith("generator/embeddings/") for n in names)
    out = {}
    for name in names:
        parts = name.split("/")
        why = next((SKIPPED_PARTS.get(p) or _NOT_WEIGHTS.get(p) for p in parts
                    if p in SKIPPED_PARTS or p in _NOT_WEIGHTS), None)
        if why:
            out[name] = (None, False, why)
            continue
        found = _role_of_scope(_scope(name), untied)
        if found is None:
            continue  # maps to nothing: refused by the reader
        role, scope = found
        if role not in ("shared", want):
            out[name] = (None, False, _OTHER[role])
            continue
        key, transpose, _ = tf_name_to_key(scope + name[len(_scope(name)):])
        out[name] = (key, transpose, "")
    return out
