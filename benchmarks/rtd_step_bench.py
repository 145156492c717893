"""CPU bench rows of replaced-token detection's train step (issue 51): against the MLM step of the same
discriminator, and against a PyTorch loop built from transformers' two ELECTRA classes.

    python benchmarks/rtd_step_bench.py --compare mlm   [--size base] [--layers 12] [--batch 8] [--seq 128]
    python benchmarks/rtd_step_bench.py --compare torch [--size small] [--batch 8] [--seq 128]
    (--rounds 5 --calls 2)

--compare mlm: jaxbert's RTD step (jaxbert.train.rtd: generator + discriminator, tied embeddings,
λ = 50) against jaxbert's MLM step (jaxbert.train.mlm) of ElectraForMaskedLM at the discriminator's size,
the same batch (15% of the tokens masked, the head and loss at the masked slots). The ratio is RTD time /
MLM time; the issue's goal is <= 1.25x with ELECTRA-Base's generator at 1/3 width.

--compare torch: jaxbert's RTD step against a loop of transformers' ElectraForMaskedLM (the generator) and
ElectraForPreTraining (the discriminator), tied as ELECTRA ties them (the generator's three embedding
modules are the discriminator's, its decoder re-tied to the word table), on jaxbert's initial weights
(jaxbert.convert), torch.optim.AdamW. The torch generator runs its encoder over every token and its head
(generator_predictions, generator_lm_head) at the masked slots only, as jaxbert's does (--torch-head all:
the class called with labels, its head over every token, as a user calling it plainly would); the sample is
Gumbel-max on its logits, no gradient; the discriminator is called with labels (its BCE over the real
tokens); loss = MLM + 50 x RTD. The ratio is torch time / jaxbert time (> 1: jaxbert faster); the issue's
goal is >= 1.0x where both frameworks multiply at the same rate, so the CPU's fp32 matmul rates on the
step's shapes are printed beside it.

Sizes: base = ELECTRA-Base (hidden 768, 12 heads, FFN 3072, embedding 768; generator 1/3: 256, 4 heads,
FFN 1024, every layer); small = ELECTRA-Small (hidden 256, 4 heads, FFN 1024, embedding 128; generator 1/4:
64, 1 head, FFN 256). Vocabulary 30,522, no dropout (the frameworks' dropout RNGs differ), fp32, AdamW lr
1e-4, weight decay 0.01 on both sides. Each contender is a warm process of its own; they take turns round by
round and each ratio is the median of the per-round ratios (benchmarks/rounds.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

from rounds import contest, load_line, main_or_serve, matmul_rates, print_rates

VOCAB, WEIGHT = 30522, 50.0
SIZES = {"base": dict(hidden_size=768, num_attention_heads=12, intermediate_size=3072, embedding_size=768,
                      num_hidden_layers=12, width=1 / 3),
         "small": dict(hidden_size=256, num_attention_heads=4, intermediate_size=1024, embedding_size=128,
                       num_hidden_layers=12, width=1 / 4)}


def configs(args: dict):
    """(generator config, discriminator config): jaxbert's ElectraConfig, no dropout."""
    from jaxbert.model.families import FAMILIES
    size = dict(SIZES[args["size"]])
    width = size.pop("width")
    if args.get("layers"):
        size["num_hidden_layers"] = args["layers"]
    cls = FAMILIES["electra"].config_class
    common = dict(vocab_size=VOCAB, max_position_embeddings=512, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)
    disc = cls(**size, **common)
    gen = disc.replace(hidden_size=round(disc.hidden_size * width),
                       num_attention_heads=max(1, round(disc.num_attention_heads * width)),
                       intermediate_size=round(disc.intermediate_size * width))
    return gen, disc


def mlm_batch(batch: int, seq: int, seed: int = 0) -> dict:
    """Random tokens, masked_slots(seq, 0.15) slots per row masked ([MASK] = 103 at 80%, as the loader's
    rule is not what is timed here), originals as labels."""
    from jaxbert.data.masking import masked_slots
    rng = np.random.default_rng(seed)
    M = masked_slots(seq, 0.15)
    ids = rng.integers(1000, VOCAB, (batch, seq)).astype(np.int32)
    ids[:, 0], ids[:, -1] = 101, 102
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq - 1), M, replace=False) for _ in range(batch)]), 1)
    labels = np.take_along_axis(ids, positions, 1)
    masked = ids.copy()
    np.put_along_axis(masked, positions, 103, 1)
    return dict(input_ids=masked, token_type_ids=np.zeros_like(ids), attention_mask=np.ones_like(ids),
                masked_positions=positions.astype(np.int32), masked_labels=labels.astype(np.int32),
                masked_weights=np.ones((batch, M), np.float32))


def _unbox(tree):
    import jax
    return jax.tree_util.tree_map(lambda x: x.unbox() if hasattr(x, "unbox") else x, tree,
                                  is_leaf=lambda x: hasattr(x, "unbox"))


def rtd_params(args: dict):
    """(RtdModel, jaxbert's initial joint params, seed 0)."""
    import jax
    from jaxbert.model.families import FAMILIES
    from jaxbert.train.rtd import RtdModel
    gen_cfg, disc_cfg = configs(args)
    family = FAMILIES["electra"]
    model = RtdModel(family.build("ElectraForMaskedLM", gen_cfg), family.build("ElectraForPreTraining", disc_cfg),
                     "tied")
    ids = np.zeros((1, 8), np.int32)
    params = jax.jit(lambda k: _unbox(model.init_boxed(k, ids, ids)["params"]))(jax.random.key(0))
    return model, params


def _jax_step(step, state, data):
    import jax
    holder = {"s": state, "losses": []}
    rng = jax.random.key(1)

    def run():
        holder["s"], m = step(holder["s"], data, rng)
        m = jax.device_get(m)
        if len(holder["losses"]) < 2:
            holder["losses"].append(float(m["mlm_loss_sum"] / m["mlm_weight"]))
    return run, lambda: {"first_mlm_losses": holder["losses"]}


def build_jax_rtd(args: dict):
    import jax
    import optax
    from jaxbert.engine.step import TrainState, make_train_step
    from jaxbert.train.rtd import rtd_spec
    model, params = rtd_params(args)
    schedule = optax.constant_schedule(1e-4)
    state = TrainState.create(model.apply, params, optax.adamw(schedule, weight_decay=0.01), schedule)
    data = jax.device_put({k: v[None] for k, v in mlm_batch(args["batch"], args["seq"]).items()})
    return _jax_step(jax.jit(make_train_step(rtd_spec(WEIGHT)), donate_argnums=0), state, data)


def build_jax_mlm(args: dict):
    import jax
    import optax
    from jaxbert.engine.step import TrainState
    from jaxbert.model.families import FAMILIES
    from jaxbert.train.mlm import train_step
    _, disc_cfg = configs(args)
    model = FAMILIES["electra"].build("ElectraForMaskedLM", disc_cfg)
    ids = np.zeros((1, 8), np.int32)
    params = jax.jit(lambda k: _unbox(model.init_boxed(k, ids, ids)["params"]))(jax.random.key(0))
    schedule = optax.constant_schedule(1e-4)
    state = TrainState.create(model.apply, params, optax.adamw(schedule, weight_decay=0.01), schedule)
    data = jax.device_put({k: v[None] for k, v in mlm_batch(args["batch"], args["seq"]).items()})
    return _jax_step(jax.jit(train_step, donate_argnums=0), state, data)


def build_torch_rtd(args: dict):
    import torch
    import transformers
    from jaxbert.convert import params_to_state_dict
    from jaxbert.train.rtd import export_params
    gen_cfg, disc_cfg = configs(args)
    _, params = rtd_params(args)
    gen_p, disc_p = export_params(params, "tied")
    models = []
    for cls, cfg, p in (("ElectraForMaskedLM", gen_cfg, gen_p), ("ElectraForPreTraining", disc_cfg, disc_p)):
        hf = transformers.ElectraConfig(**cfg.to_dict())
        hf._attn_implementation = "sdpa"
        m = getattr(transformers, cls)(hf)
        sd = {k: torch.from_numpy(np.array(v)) for k, v in params_to_state_dict(p, cfg, cls).items()}
        missing, unexpected = m.load_state_dict(sd, strict=False)
        if unexpected or any(not (k.endswith("_ids") or k == "generator_lm_head.weight") for k in missing):
            raise RuntimeError(f"{cls}: converted weights do not fit: missing {missing}, unexpected {unexpected}")
        models.append(m.train())
    gen, disc = models
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):  # ELECTRA's tied tables
        setattr(gen.electra.embeddings, name, getattr(disc.electra.embeddings, name))
    gen.generator_lm_head.weight = gen.electra.embeddings.word_embeddings.weight
    named, seen = [], set()
    for m in (gen, disc):
        for p in m.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                named.append(p)
    opt = torch.optim.AdamW(named, lr=1e-4, weight_decay=0.01)
    b = {k: torch.from_numpy(v) for k, v in mlm_batch(args["batch"], args["seq"]).items()}
    ids, types, mask = b["input_ids"].long(), b["token_type_ids"].long(), b["attention_mask"].long()
    pos, labels = b["masked_positions"].long(), b["masked_labels"].long()
    rows = torch.arange(ids.shape[0])[:, None]
    full_labels = torch.full_like(ids, -100)
    full_labels[rows, pos] = labels
    all_tokens = args.get("torch_head") == "all"
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        if all_tokens:
            out = gen(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=full_labels)
            mlm, logits = out.loss, out.logits[rows, pos]
        else:
            h = gen.electra(input_ids=ids, token_type_ids=types, attention_mask=mask).last_hidden_state
            logits = gen.generator_lm_head(gen.generator_predictions(h[rows, pos]))  # [B, M, V]
            mlm = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        with torch.no_grad():
            u = torch.rand(logits.shape).clamp_(1e-20, 1.0)
            sampled = torch.argmax(logits.float() - torch.log(-torch.log(u)), -1)
            fed = ids.clone()
            fed[rows, pos] = sampled
            replaced = (sampled != labels)
            target = torch.zeros_like(ids)
            target[rows, pos] = replaced.long()
        rtd = disc(input_ids=fed, token_type_ids=types, attention_mask=mask, labels=target).loss
        loss = mlm + WEIGHT * rtd
        loss.backward()
        opt.step()
        if len(losses) < 2:
            losses.append(float(mlm.detach()))
    return step, lambda: {"first_mlm_losses": losses}


BUILDERS = {"jaxbert-rtd": build_jax_rtd, "jaxbert-mlm": build_jax_mlm, "torch-rtd": build_torch_rtd}


def step_shapes(args: dict) -> list[tuple[int, int, int]]:
    """The discriminator's and the generator's largest weight matmuls at B x T rows, and the generator's
    vocabulary head at the masked slots."""
    from jaxbert.data.masking import masked_slots
    gen, disc = configs(args)
    R = args["batch"] * args["seq"]
    M = args["batch"] * masked_slots(args["seq"], 0.15)
    return [(R, disc.hidden_size, disc.intermediate_size), (R, disc.intermediate_size, disc.hidden_size),
            (R, disc.hidden_size, disc.hidden_size), (R, gen.hidden_size, gen.intermediate_size),
            (M, disc.embedding_size, VOCAB)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", choices=("mlm", "torch"), required=True)
    ap.add_argument("--size", choices=tuple(SIZES), default=None, help="default: base for mlm, small for torch")
    ap.add_argument("--layers", type=int, default=0, help="the discriminator's (and generator's) layers; 0: the size's")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2)
    ap.add_argument("--torch-head", choices=("masked", "all"), default="masked")
    a = ap.parse_args()
    args = {"size": a.size or ("base" if a.compare == "mlm" else "small"), "layers": a.layers, "batch": a.batch,
            "seq": a.seq, "torch_head": a.torch_head}
    from jaxbert.bench.machine import this_machine
    gen, disc = configs(args)
    print(this_machine()[0])
    print(f"discriminator: hidden {disc.hidden_size}, {disc.num_hidden_layers} layers, {disc.num_attention_heads} heads, "
          f"FFN {disc.intermediate_size}, embedding {disc.embedding_size}; generator: hidden {gen.hidden_size}, "
          f"{gen.num_attention_heads} heads, FFN {gen.intermediate_size}; batch {a.batch} x {a.seq}; {load_line()}")
    names = ["jaxbert-mlm", "jaxbert-rtd"] if a.compare == "mlm" else ["jaxbert-rtd", "torch-rtd"]
    results, ratios = contest(__file__, names, args, a.rounds, a.calls)
    for name in names:
        if name in results:
            r = results[name]
            print(f"{name:>12s}: median {statistics.median(r['seconds']) * 1e3:8.1f} ms per step "
                  f"(rounds' medians {', '.join(f'{s * 1e3:.0f}' for s in r['per_round'])}); {r['extra']}")
    for peer, ratio in ratios.items():
        what = "RTD time / MLM time" if a.compare == "mlm" else "torch time / jaxbert time"
        print(f"{what}: {ratio.text()}")
    print(load_line())
    if a.compare == "torch":
        print_rates(matmul_rates(step_shapes(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main_or_serve(BUILDERS, main))
