"""The work each contender does: a callable that runs one unit and blocks until done.

jaxbert runs its real train step (jaxbert.train.mlm.train_step: MLM loss at
the masked positions only, AdamW); transformers runs BertForMaskedLM with
labels (its head covers every position) and torch.optim.AdamW.
"""

from __future__ import annotations

import contextlib
import json
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxbert.errors import require
from jaxbert.convert import params_to_state_dict
from jaxbert.data.masking import masked_slots
from jaxbert.model.bert.config import BertConfig
from jaxbert.model.families import FAMILIES
from jaxbert.model.bert.heads import BertForMaskedLM
from jaxbert.model.options import ModelOptions
from jaxbert.finetune.loop import prepare_runner
from jaxbert.finetune.model import task_config
from jaxbert.finetune.recipe import load as load_finetune_recipe
from jaxbert.finetune.step import step_spec
from jaxbert.engine import parallel
from jaxbert.engine.step import TrainState, make_train_step
from jaxbert.train.mlm import train_step

MASK_RATE = 0.15


def masked_count(seq_len: int) -> int:
    """M: masked slots per sequence, as the data loader sizes them."""
    return masked_slots(seq_len, MASK_RATE)


def _batch(cfg: BertConfig, batch: int, seq_len: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    M = masked_count(seq_len)
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq_len - 1), M, replace=False)
                                  for _ in range(batch)]), axis=1)
    return dict(
        input_ids=rng.integers(5, cfg.vocab_size, (batch, seq_len)).astype(np.int32),
        token_type_ids=np.zeros((batch, seq_len), np.int32),
        attention_mask=np.ones((batch, seq_len), np.int32),
        masked_positions=positions.astype(np.int32),
        masked_labels=rng.integers(5, cfg.vocab_size, (batch, M)).astype(np.int32),
        masked_weights=np.ones((batch, M), np.float32))


def no_dropout(cfg: BertConfig) -> BertConfig:
    # Benchmarks compare compute; dropout RNG differs between frameworks.
    return cfg.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


# ---- jaxbert ------------------------------------------------------------------------

def jax_matmul(n: int = 2048):
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    f = jax.jit(jnp.dot)
    return lambda: f(a, b).block_until_ready()


def jax_forward(cfg: BertConfig, batch: int, seq_len: int, **options):
    model = BertForMaskedLM(cfg, ModelOptions(**options))
    data = _batch(cfg, batch, seq_len)
    params = jax.jit(model.init)(jax.random.key(0), data["input_ids"])
    fwd = jax.jit(lambda p, ids, tt, am: model.apply(p, ids, tt, attention_mask=am).logits)
    args = (params, data["input_ids"], data["token_type_ids"], data["attention_mask"])
    return lambda: fwd(*args).block_until_ready()


def _train_state(cfg: BertConfig, options: dict):
    model = BertForMaskedLM(cfg, ModelOptions(**options))
    schedule = optax.constant_schedule(1e-4)
    tx = optax.adamw(schedule, weight_decay=0.01)
    return model, tx, schedule, TrainState


def jax_train(cfg: BertConfig, batch: int, seq_len: int, **options):
    """The jitted, donated train step; returns (run_one_step, memory_stats_fn)."""
    model, tx, schedule, TrainState = _train_state(cfg, options)
    data = {k: v[None] for k, v in _batch(cfg, batch, seq_len).items()}  # accum axis of 1
    params = jax.jit(model.init)(jax.random.key(0), data["input_ids"][0])["params"]
    state = {"s": TrainState.create(model.apply, params, tx, schedule)}
    step = jax.jit(train_step, donate_argnums=0)
    data = jax.device_put(data)
    rng = jax.random.key(1)

    def run():
        state["s"], metrics = step(state["s"], data, rng)
        jax.block_until_ready(metrics)
    return run


def jax_compile_split(cfg: BertConfig, batch: int, seq_len: int, **options) -> tuple[float, float]:
    """(lowering, XLA compile) seconds of the train step from abstract shapes; nothing is allocated."""
    model, tx, schedule, TrainState = _train_state(cfg, options)
    data = {k: jax.ShapeDtypeStruct((1,) + v.shape, v.dtype) for k, v in _batch(cfg, batch, seq_len).items()}
    ids = jnp.zeros((batch, seq_len), jnp.int32)
    state = jax.eval_shape(lambda: TrainState.create(
        model.apply, model.init(jax.random.key(0), ids)["params"], tx, schedule))
    t0 = time.perf_counter()
    lowered = jax.jit(train_step, donate_argnums=0).lower(state, data, jax.random.key(0))
    t1 = time.perf_counter()
    lowered.compile()
    return t1 - t0, time.perf_counter() - t1


def jax_compile_seconds(cfg: BertConfig, batch: int, seq_len: int, **options) -> float:
    """Lowering + compile of the train step (what a user waits for before step 1)."""
    return sum(jax_compile_split(cfg, batch, seq_len, **options))


def jax_peak_memory() -> float | None:
    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else peak / 2**20


# ---- transformers (PyTorch) ------------------------------------------------------------

def torch_settings(platform: str, compile_: bool = False) -> dict:
    """How the transformers contender runs on a jax platform ("cpu", "gpu"): as its users run it there.

    On a GPU: CUDA, bf16 autocast, SDPA attention, fused AdamW (torch.compile: a second contender, the
    compile flag). On a CPU: fp32, SDPA, the default AdamW. A pure function: tests read it without CUDA."""
    gpu = platform == "gpu"
    return {"device": "cuda" if gpu else "cpu", "autocast_dtype": "bfloat16" if gpu else None,
            "attn_implementation": "sdpa", "fused_adamw": gpu, "compile": bool(compile_)}


def adamw_kwargs(settings: dict) -> dict:
    """torch.optim.AdamW's arguments under `settings` (fused where the settings say so)."""
    kwargs = {"lr": 1e-4, "weight_decay": 0.01}
    if settings["fused_adamw"]:
        kwargs["fused"] = True
    return kwargs


def torch_autocast(settings: dict):
    """The autocast context the contender's forward and loss run in (a no-op context without a dtype)."""
    if settings["autocast_dtype"] is None:
        return contextlib.nullcontext()
    import torch
    return torch.autocast(settings["device"], dtype=getattr(torch, settings["autocast_dtype"]))


def _torch_model(cfg: BertConfig, settings: dict):
    torch = require("torch", "torch", "a PyTorch contender")
    transformers = require("transformers", "torch", "a PyTorch contender")
    hf_cfg = transformers.BertConfig(**no_dropout(cfg).to_dict())
    hf_cfg._attn_implementation = settings["attn_implementation"]
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(hf_cfg).to(settings["device"])
    run = torch.compile(model) if settings["compile"] else model
    return model, run


def _sync(settings: dict) -> None:
    """Blocks until the device is done (CUDA runs asynchronously)."""
    if settings["device"] == "cuda":
        import torch
        torch.cuda.synchronize()


def torch_peak_memory(settings: dict) -> float | None:
    """MiB at the CUDA allocator's peak (torch.cuda.max_memory_allocated); None on the CPU."""
    if settings["device"] != "cuda":
        return None
    import torch
    return torch.cuda.max_memory_allocated() / 2**20


def torch_matmul(n: int = 2048, platform: str = "cpu"):
    import torch
    settings = torch_settings(platform)
    a, b = torch.randn(n, n, device=settings["device"]), torch.randn(n, n, device=settings["device"])

    def run():
        torch.mm(a, b)
        _sync(settings)
    return run


def torch_forward(cfg: BertConfig, batch: int, seq_len: int, compile_: bool = False, platform: str = "cpu"):
    import torch
    settings = torch_settings(platform, compile_)
    model, run = _torch_model(cfg, settings)
    model.eval()
    data = {k: torch.from_numpy(v).long().to(settings["device"]) for k, v in _batch(cfg, batch, seq_len).items()
            if k in ("input_ids", "token_type_ids", "attention_mask")}

    def step():
        with torch.no_grad(), torch_autocast(settings):
            run(**data).logits
        _sync(settings)
    return step


def torch_train(cfg: BertConfig, batch: int, seq_len: int, compile_: bool = False, platform: str = "cpu"):
    import torch
    settings = torch_settings(platform, compile_)
    model, run = _torch_model(cfg, settings)
    model.train()
    b = _batch(cfg, batch, seq_len)
    labels = np.full((batch, seq_len), -100, np.int64)
    np.put_along_axis(labels, b["masked_positions"], b["masked_labels"], axis=1)
    data = {k: torch.from_numpy(b[k]).long().to(settings["device"])
            for k in ("input_ids", "token_type_ids", "attention_mask")}
    data["labels"] = torch.from_numpy(labels).to(settings["device"])
    opt = torch.optim.AdamW(model.parameters(), **adamw_kwargs(settings))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch_autocast(settings):
            loss = run(**data).loss
        loss.backward()
        opt.step()
        _sync(settings)
    return step


# ---- fine-tuning: sequence classification ---------------------------------------------------

FINETUNE_LABELS = ("0", "1")


def _classification_batch(cfg: BertConfig, batch: int, seq_len: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return dict(input_ids=rng.integers(5, cfg.vocab_size, (batch, seq_len)).astype(np.int32),
                token_type_ids=np.zeros((batch, seq_len), np.int32),
                attention_mask=np.ones((batch, seq_len), np.int32),
                labels=rng.integers(0, len(FINETUNE_LABELS), batch).astype(np.int32),
                valid=np.ones(batch, np.float32))


def jax_finetune(cfg: BertConfig, batch: int, seq_len: int, **options):
    """`jaxbert finetune`'s own train step for sequence classification, built as the verb builds it
    (the finetune-glue recipe: AdamW, weight decay 0.01, global-norm clipping at 1.0, linear
    schedule; loop.prepare_runner, the runner's compiled step, metrics fetched each step).
    Returns (run_one_step, compiles): compiles() is how many shapes the step has compiled."""
    recipe = load_finetune_recipe("finetune-glue", [f"train.per_device_batch_size={batch}",
                                    f"model.dtype={np.dtype(options.get('dtype', jnp.float32)).name}",
                                    f"model.attention_impl={options.get('attention_impl', 'einsum')}"])
    config = task_config(cfg, "classification", FINETUNE_LABELS)
    runner = parallel.make_runner(recipe.parallel)
    prepare_runner(recipe, runner, "BertForSequenceClassification", config, total=10_000)
    state = {"s": runner.create_state()}
    train_fn = runner.compile_train(make_train_step(step_spec("classification")))
    data = runner.shard_batch({k: v[None] for k, v in _classification_batch(cfg, batch, seq_len).items()})
    rng = jax.random.PRNGKey(1)  # the loop's key kind

    def run():
        state["s"], metrics = train_fn(state["s"], data, rng)
        runner.metrics_to_host(metrics)  # the loop reads the step's metrics every step
    return run, lambda: train_fn._cache_size()


def torch_finetune(cfg: BertConfig, batch: int, seq_len: int, compile_: bool = False):
    """transformers' BertForSequenceClassification with labels, torch.optim.AdamW (lr 2e-5, weight
    decay 0.01, eps 1e-6) and clip_grad_norm_(1.0): the same batch and update as jaxbert's."""
    torch = require("torch", "torch", "a PyTorch contender")
    transformers = require("transformers", "torch", "a PyTorch contender")
    hf_cfg = transformers.BertConfig(**{**no_dropout(cfg).to_dict(), "num_labels": len(FINETUNE_LABELS)})
    hf_cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(hf_cfg)
    run = torch.compile(model) if compile_ else model
    model.train()
    b = _classification_batch(cfg, batch, seq_len)
    data = {k: torch.from_numpy(b[k]).long() for k in ("input_ids", "token_type_ids", "attention_mask", "labels")}
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    rest = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                            lr=2e-5, eps=1e-6)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = run(**data).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()
    return step


# ---- ModernBERT: jaxbert's ModernBertForMaskedLM against transformers', on the same weights --------------

MODERNBERT_FAMILY = "modernbert"
MODERNBERT_CLASS = "ModernBertForMaskedLM"
MODERNBERT_MASK_RATE = 0.30  # ModernBERT's pretraining rate
# Token ids the batches draw from: below ModernBERT's special tokens (50280..50283) and the padding rows.
MODERNBERT_TOKENS = (5, 50000)


def modernbert_config(layers: int, hidden: int, **overrides):
    """A small ModernBERT shaped like ModernBERT-base: heads of 64, an MLP of 1.5 x hidden (each of its
    two GLU halves), a global layer every 3 with local windows of 128 (+-64), base's vocabulary; no
    dropout (benchmarks compare compute; the frameworks' dropout RNGs differ)."""
    return FAMILIES[MODERNBERT_FAMILY].config_class(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=max(hidden // 64, 1),
        intermediate_size=hidden * 3 // 2, global_attn_every_n_layers=3, local_attention=128, **overrides)


def modernbert_batch(cfg, batch: int, seq_len: int, seed: int = 0) -> dict:
    """Random tokens, 30% of them labelled (masked_slots' M): the batch both contenders take."""
    rng = np.random.default_rng(seed)
    M = masked_slots(seq_len, MODERNBERT_MASK_RATE)
    tokens = (MODERNBERT_TOKENS[0], min(MODERNBERT_TOKENS[1], cfg.vocab_size))
    positions = np.sort(np.stack([rng.choice(seq_len, M, replace=False) for _ in range(batch)]), axis=1)
    return dict(input_ids=rng.integers(*tokens, (batch, seq_len)).astype(np.int32),
                token_type_ids=np.zeros((batch, seq_len), np.int32),
                attention_mask=np.ones((batch, seq_len), np.int32),
                masked_positions=positions.astype(np.int32),
                masked_labels=rng.integers(*tokens, (batch, M)).astype(np.int32),
                masked_weights=np.ones((batch, M), np.float32))


def _modernbert_module(cfg, options: dict):
    return FAMILIES[MODERNBERT_FAMILY].build(MODERNBERT_CLASS, cfg, ModelOptions(**options))


_PARAMS: dict = {}  # config -> params: one init per process, however many works it builds


def modernbert_params(cfg) -> dict:
    """jaxbert's init (seed 0) as NumPy: the weights of both contenders (transformers' through the converter).
    They do not depend on the sequence length (rotary positions have no params)."""
    key = json.dumps(cfg.to_dict(), sort_keys=True, default=str)
    if key not in _PARAMS:
        module = _modernbert_module(cfg, {})
        params = jax.jit(module.init)(jax.random.key(0), np.zeros((1, 8), np.int32))["params"]
        _PARAMS[key] = jax.tree_util.tree_map(np.asarray, params)
    return _PARAMS[key]


def modernbert_model(model: str) -> tuple[int, int] | None:
    """(layers, hidden) of a bench model name "modernbert-LxH" or "modernbert-LxH-vV" (modernbert-6x384,
    modernbert-6x384-v32768); None for another name."""
    m = re.fullmatch(r"modernbert-(\d+)x(\d+)(?:-v\d+)?", model)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def modernbert_work_config(model: str):
    """The config of a bench model name: modernbert_config's, with the vocabulary of a "-vV" suffix (its
    special tokens moved to ids 0-3, below every vocabulary the bench names)."""
    layers, hidden = modernbert_model(model)
    m = re.search(r"-v(\d+)$", model)
    if m is None:
        return modernbert_config(layers, hidden)
    return modernbert_config(layers, hidden, vocab_size=int(m.group(1)), pad_token_id=0, cls_token_id=1,
                             bos_token_id=1, sep_token_id=2, eos_token_id=2)


class LossProbe:
    """A work's callable that also keeps the losses of its first two calls (warm-up: on the starting
    weights, then, for a train step, after one update), which the row reports beside the other
    contender's: both take them on the same weights and tokens."""

    KEEP = 2

    def __init__(self, run):
        self._run, self.losses = run, []

    def __call__(self):
        loss = self._run()
        if len(self.losses) < self.KEEP:
            self.losses.append(float(loss))


def jax_modernbert(cfg, batch: int, seq_len: int, train: bool, **options) -> LossProbe:
    """jaxbert's ModernBertForMaskedLM: the MLM train step (loss at the masked tokens, AdamW) or its
    forward to that loss."""
    model = _modernbert_module(cfg, options)
    b = modernbert_batch(cfg, batch, seq_len)
    params = jax.tree_util.tree_map(jnp.array, modernbert_params(cfg))  # copies: the train step donates its state
    if train:
        schedule = optax.constant_schedule(1e-4)
        state = {"s": TrainState.create(model.apply, params, optax.adamw(schedule, weight_decay=0.01), schedule)}
        step = jax.jit(train_step, donate_argnums=0)
        data = jax.device_put({k: v[None] for k, v in b.items()})  # accum axis of 1
        rng = jax.random.key(1)

        def run():
            state["s"], metrics = step(state["s"], data, rng)
            jax.block_until_ready(metrics)
            return metrics["mlm_loss_sum"] / metrics["mlm_weight"]
        return LossProbe(run)

    def loss_fn(p, d):
        logits = model.apply({"params": p}, d["input_ids"], attention_mask=d["attention_mask"],
                             masked_positions=d["masked_positions"]).logits
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32),
                                                                        d["masked_labels"]))
    fwd = jax.jit(loss_fn)
    params, data = jax.device_put(params), jax.device_put(b)
    return LossProbe(lambda: fwd(params, data).block_until_ready())


def torch_modernbert(cfg, batch: int, seq_len: int, train: bool, platform: str = "cpu") -> LossProbe:
    """transformers' ModernBertForMaskedLM (sdpa, sparse_prediction: the head and the loss at the labelled
    tokens only) on jaxbert's init converted by jaxbert.convert; torch.optim.AdamW for the train step."""
    torch = require("torch", "torch", "a PyTorch contender")
    transformers = require("transformers", "torch", "a PyTorch contender")
    settings = torch_settings(platform)
    hf_cfg = transformers.ModernBertConfig(**{**cfg.to_dict(), "sparse_prediction": True},
                                           attn_implementation=settings["attn_implementation"])
    model = transformers.ModernBertForMaskedLM(hf_cfg)
    b = modernbert_batch(cfg, batch, seq_len)
    state_dict = {k: torch.from_numpy(np.array(v)) for k, v in  # writable copies
                  params_to_state_dict(modernbert_params(cfg), cfg, MODERNBERT_CLASS).items()}
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    if unexpected or set(missing) - {"decoder.weight"}:  # the tied decoder weight is tok_embeddings
        raise RuntimeError(f"converted ModernBERT weights do not fit: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.to(settings["device"])
    labels = np.full(b["input_ids"].shape, -100, np.int64)
    np.put_along_axis(labels, b["masked_positions"], b["masked_labels"], axis=1)
    data = {"input_ids": torch.from_numpy(b["input_ids"]).long().to(settings["device"]),
            "attention_mask": torch.from_numpy(b["attention_mask"]).long().to(settings["device"]),
            "labels": torch.from_numpy(labels).to(settings["device"])}
    if not train:
        model.eval()

        def forward():
            with torch.no_grad(), torch_autocast(settings):
                loss = model(**data).loss
            _sync(settings)
            return loss.item()
        return LossProbe(forward)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), **adamw_kwargs(settings))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch_autocast(settings):
            loss = model(**data).loss
        loss.backward()
        opt.step()
        _sync(settings)
        return loss.item()
    return LossProbe(step)
