"""`jaxbert parity MODEL`: jaxbert vs transformers on the checkpoint's own tokenizer and text."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

from jaxbert import fs
from jaxbert.convert import from_pretrained
from jaxbert.errors import CheckFailed, InputError
from jaxbert.fs import atomic_write_text
from jaxbert.model.families import FAMILIES, family_of
from jaxbert.model.registry import spec_of
from jaxbert.parity.compare import compare
from jaxbert.parity.trajectory import TRAJECTORY_TOLERANCE, trajectory
from jaxbert.train.recipe import OptimSection, position_limit
from jaxbert.parity.inputs import DEFAULT_TEXTS, find_tokenizer, make_inputs


MODEL_ARGUMENTS = {"model": "MODEL"}  # a short name (minilm) resolved by jaxbert.cli.main


def add_arguments(p):
    p.add_argument("model", help="anything jaxbert.from_pretrained reads")
    p.add_argument("--text", action="append", default=None,
                   help='input text, repeatable; "first ||| second" gives two segments')
    p.add_argument("--max-length", type=int, default=None,
                   help="tokens per text (default: as many as the model's position table holds)")
    p.add_argument("--dtype", default="float32", choices=["float64", "float32", "bfloat16"],
                   help="compute dtype of jaxbert; transformers runs float32, or float64 with float64 "
                        "(both sides float64 end to end, tolerance 1e-10)")
    p.add_argument("--reference", default=None, choices=["float64"],
                   help="also run transformers in float64 as the truth: each row shows how far jaxbert and "
                        "transformers are from it; jaxbert may exceed its own float32 rounding (its float32 "
                        "result against its float64 one) by at most 1.25x")
    p.add_argument("--precision", default="highest", choices=["default", "high", "highest"],
                   help="jax_default_matmul_precision for jaxbert (default highest: on TPU 'default' "
                        "runs float32 matmuls in bf16 passes)")
    p.add_argument("--grad", action="store_true",
                   help="also compare every parameter's gradient (with --train-steps: the stage table and the "
                        "gradients first, then the steps)")
    p.add_argument("--json", type=Path, default=None, help="write the table as JSON (an existing file is refused)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace --json when it is an earlier `jaxbert parity` report (anything else is refused)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="max abs diff on hidden states (default 1e-10 fp64, 1e-5 fp32, 0.15 bf16); "
                        "logits scale it")
    p.add_argument("--train-steps", type=int, default=0, metavar="N",
                   help="instead of one forward pass: N training steps of jaxbert's train_step and AdamW "
                        "against transformers + torch.optim.AdamW (the family's masked LM: "
                        f"{', '.join(f.mlm_class(t) for f in FAMILIES.values() for t in f.model_types)}; "
                        "its MLM head, fresh if the model has none; "
                        "dropout off; float64 or float32, float32 judged against both sides in float64); "
                        "with --grad, --reference or --tolerance the forward pass's table comes first")
    p.add_argument("--lr", type=float, default=1e-4, help="--train-steps: peak learning rate")
    p.add_argument("--warmup-steps", type=int, default=None,
                   help="--train-steps: linear warmup (default N // 5), then linear decay to 0 at N")
    p.add_argument("--model-class", default=None, help="jaxbert class name (default: from the config)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pad-left", action="store_true", help="pad the batch on the left instead of the right")


def _check_args(args) -> None:
    """Every numeric option, before the model loads."""
    checks = [("--max-length", args.max_length, lambda v: v >= 1, "a positive number of tokens"),
              ("--tolerance", args.tolerance, lambda v: math.isfinite(v) and v > 0, "a finite number > 0"),
              ("--train-steps", args.train_steps, lambda v: v >= 0, ">= 0"),
              ("--lr", args.lr, lambda v: math.isfinite(v) and v > 0, "a finite number > 0"),
              ("--warmup-steps", args.warmup_steps, lambda v: v >= 0, ">= 0"),
              ("--seed", args.seed, lambda v: 0 <= v < 2**32, "in [0, 2**32)")]
    for flag, value, ok, meaning in checks:
        if value is not None and not ok(value):
            raise InputError(f"{flag} {value}: must be {meaning}")
    if args.train_steps and args.dtype not in TRAJECTORY_TOLERANCE:
        raise InputError(f"--train-steps runs float64 or float32, not --dtype {args.dtype}")


PARITY_REPORT_KEYS = ("dtype", "ok", "env", "rows")  # both the forward and the --train-steps report


def run(args) -> int:
    if args.json:
        fs.check_new_file(args.json, "--json", args.overwrite, ours=fs.json_report_of(*PARITY_REPORT_KEYS))
    _check_args(args)
    # transformers' own computation order (explicit softmax), not from_pretrained's default fused path
    module, params = from_pretrained(args.model, model_class=args.model_class, attention_impl="einsum")
    limit = position_limit(module.config)  # RoBERTa's positions start at pad_token_id + 1
    if args.max_length is None:
        args.max_length = limit
    elif args.max_length > limit:
        print(f"warning: --max-length {args.max_length} exceeds the {limit} positions of the model's table; "
              f"texts are truncated to {limit} tokens", file=sys.stderr)
        args.max_length = limit
    tokenizer = find_tokenizer(fs.local_copy(args.model))  # a URL: the copy from_pretrained fetched
    texts = args.text or DEFAULT_TEXTS
    print(f"{args.model}: {type(module).__name__}; inputs: {len(texts)} texts, "
          f"{'tokenizer ' + ('found' if tokenizer else 'missing: random ids')}")
    cfg = module.config
    choices = 2 if spec_of(type(module).__name__, cfg).choices else 0
    family = family_of(cfg)
    # a family with a local attention window: the first row reaches past it, unless --text says otherwise
    min_length = (family.parity_length(cfg) or 0) if family.parity_length and not args.text else 0
    inputs = make_inputs(tokenizer, texts, args.max_length, cfg.vocab_size, args.seed, choices,
                         pad_id=cfg.pad_token_id or 0, type_vocab_size=getattr(cfg, "type_vocab_size", 1),
                         pad_left=args.pad_left, min_length=min_length)
    if min_length:
        print(f"the first text repeats to {inputs['input_ids'].shape[-1]} tokens: past the local attention window")
    encoder = None
    if getattr(cfg, "add_cross_attention", False):  # decoders with cross-attention need encoder states
        rng = np.random.default_rng(args.seed)
        B = inputs["input_ids"].shape[0]
        encoder = (rng.normal(size=(B, 7, module.config.hidden_size)).astype(np.float32), np.ones((B, 7), np.int32))
    if args.train_steps and inputs["input_ids"].ndim != 2:
        raise InputError("--train-steps needs a model whose encoder reads [batch, length] ids")
    forward = None
    if not args.train_steps or args.grad or args.reference or args.tolerance is not None:
        # --train-steps with a forward pass's option: its table (hidden states, gradients) first, then the steps
        forward = compare(module, params, inputs, dtype=args.dtype, tolerance=args.tolerance, grad=args.grad,
                          encoder_states=encoder, reference=args.reference, precision=args.precision)
        print(forward.table())
        sys.stdout.flush()
    if args.train_steps:
        return _train_steps(args, module, params, inputs, forward)
    report = forward
    if args.json:
        report.write_json(args.json)
    sys.stdout.flush()
    return 0 if report.ok else 1


def _train_steps(args, module, params, inputs, forward=None) -> int:
    """The trajectory after the forward pass's report (forward, when an option asked for it): both
    tables printed, both in --json (the forward one under "forward"), exit 1 naming what failed."""
    warmup = args.train_steps // 5 if args.warmup_steps is None else args.warmup_steps
    optim = OptimSection(learning_rate=args.lr, warmup_steps=warmup)
    report = trajectory(module, params, inputs, optim, args.train_steps, dtype=args.dtype,
                        precision=args.precision, seed=args.seed)
    print(report.table())
    failed = []
    if forward is not None:
        failed += ["the forward pass"] if not all(r.ok for r in forward.rows) else []
        failed += ["the gradients"] if forward.grad is not None and not forward.grad.ok else []
    failed += [f"step {r.step}" for r in report.rows if not r.ok]
    if args.json:
        data = report.to_json()
        if forward is not None:
            data.update(ok=not failed, forward=forward.to_json())
        atomic_write_text(args.json, json.dumps(data, indent=2))
    sys.stdout.flush()
    if failed:
        raise CheckFailed(f"{args.model}: outside tolerance at {', '.join(failed)}")
    return 0
