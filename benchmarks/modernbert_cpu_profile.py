"""Where the ModernBERT train step spends its CPU time, in jaxbert and in transformers, item by item.

    python benchmarks/modernbert_cpu_profile.py [--model modernbert-6x384] [--batch 8] [--seq 512] [--steps 3]

Builds both steps exactly as `jaxbert bench --only train/modernbert-6x384/8x512` does (jaxbert.bench.worker's
build: jaxbert `attention_impl: auto` fp32, AdamW; transformers' ModernBertForMaskedLM, sdpa, sparse_prediction,
torch AdamW), each in a process of its own (malloc keep, as the bench), times --steps steps without a profiler,
then traces --steps more: jaxbert's with jax.profiler (XLA's CPU thunks, each named by the optimized HLO that
XLA_FLAGS=--xla_dump_to writes, and put in an item by the op_name its metadata carries), torch's with
torch.profiler (self CPU time by aten operator). Prints one table: item, jaxbert ms per step, torch ms per
step, then each side's largest single ops. The traced time of a side can exceed its step: XLA's thunks run on
two threads. Not a test: figures only (they move with the machine's load, printed beside them).
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

# (item, regular expression on a jaxbert op's metadata op_name); the first that matches names the item
JAX_ITEMS = [
    ("decoder matmul (tied table)", r"decoder/dot_general"),
    ("weight matmuls (Wqkv, Wo, Wi, Wo, head dense)", r"(Wqkv|Wo|Wi|dense)(/[^/]*)?/dot_general"),
    ("attention (q k^T, softmax, mask, window blocks, p v)", r"attn/(?!Wqkv|Wo)"),
    ("RoPE and q, k, v layout", r"attn/Wqkv"),
    ("Wo / Wi / Wo bias, layout", r"(attn/Wo|mlp/Wi|mlp/Wo)"),
    ("GeGLU (gelu(a) * b)", r"mlp/"),
    ("LayerNorm (no bias)", r"norm/"),
    ("embeddings (gather; its gradient)", r"tok_embeddings|embeddings/"),
    ("decoder bias add", r"decoder/add"),
    ("head (dense, gelu, norm)", r"head/"),
    ("loss, accuracy (softmax over V, argmax)", r"jvp\(|transpose\("),  # the rest of the differentiated step
    ("AdamW, gradient norm", r"."),  # outside the gradient: the optimizer's update and the metrics
]
JAX_UNNAMED = "(no op_name in the HLO)"

# torch's ops are put in an item by the operator or autograd node they run under: the optimizer's step, a
# backward node (its name), or the outermost aten operator of the forward
TORCH_ITEMS = [
    ("AdamW (torch.optim, foreach)", r"^Optimizer\.|zero_grad"),
    ("matmuls (mm, addmm, bmm, linear)", r"aten::(mm|addmm|bmm|matmul|linear)$|(Mm|Addmm|Bmm|Linear)Backward"),
    ("attention (sdpa and its mask, backward)", r"scaled_dot_product|ScaledDotProduct|_prepare_4d|sliding|"
                                               r"aten::(bitwise_and|bitwise_or|__and__|le|ge|abs|logical_and)$"),
    ("LayerNorm (no bias)", r"layer_norm|LayerNorm"),
    ("GeGLU (gelu(a) * b, chunk)", r"gelu|Gelu"),
    ("loss (log_softmax, nll)", r"log_softmax|LogSoftmax|nll_loss|NllLoss|cross_entropy"),
    ("embeddings (gather; its gradient)", r"embedding|Embedding"),
    ("RoPE (cat, neg, mul on q, k)", r"aten::(cat|neg)$|(Cat|Neg)Backward"),
    ("elementwise (mul, add: residuals, GeGLU's product)", r"aten::(mul|add|sub|div)_?$|(Mul|Add|Sub|Div)Backward"),
    ("copies and layout (copy_, clone, view, transpose, index)", r"copy|clone|contiguous|index|Index|transpose|"
                                                                 r"Transpose|view|View|reshape|Reshape|permute|"
                                                                 r"Permute|split|Split|chunk|slice|Slice|select"),
    ("other", r"."),
]


def _item(items, text: str) -> str:
    return next(name for name, rx in items if re.search(rx, text))


def _hlo_ops(dump: str) -> dict:
    """{instruction name: op_name} of the train step's optimized HLO (its fusions and thunks)."""
    path = max(glob.glob(os.path.join(dump, "*train_step*cpu_after_optimizations.txt")), key=os.path.getsize)
    ops, calls, inside, computation = {}, {}, {}, None
    for line in open(path):
        head = re.match(r"(?:ENTRY )?%(\S+) [(]", line)
        if head:
            computation = head.group(1)
        m = re.match(r"\s*(?:ROOT )?%(\S+) = ", line)
        if m:
            op = re.search(r'op_name="([^"]*)"', line)
            ops.setdefault(m.group(1), op.group(1) if op else "")
            if op:
                inside.setdefault(computation, op.group(1))
            called = re.search(r"calls=%([\w.-]+)", line)
            if called:
                calls[m.group(1)] = called.group(1)
    # a fusion without metadata of its own (XLA's wrapped reduce-windows): its body's first op_name
    return {name: op or inside.get(calls.get(name), "") for name, op in ops.items()}


def _median_step(fn, steps: int) -> float:
    secs = []
    for _ in range(steps):
        time.sleep(0.5)  # as the bench: let the previous call's worker threads go idle
        t0 = time.perf_counter()
        fn()
        secs.append(time.perf_counter() - t0)
    return statistics.median(secs)


def profile_jax(work: str, steps: int) -> dict:
    dump = tempfile.mkdtemp(prefix="jaxbert-hlo-")
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={dump}").strip()
    import jax
    from jaxbert.bench.worker import build
    from jaxbert.train.allocator import keep_freed_memory
    keep_freed_memory()
    fn, _ = build(work, "jaxbert", {"attention": "auto"})
    fn(), fn()
    step = _median_step(fn, steps)
    ops = _hlo_ops(dump)
    trace = tempfile.mkdtemp(prefix="jaxbert-trace-")
    with jax.profiler.trace(trace):
        for _ in range(steps):
            fn()
    data = jax.profiler.ProfileData.from_file(glob.glob(os.path.join(trace, "**", "*.xplane.pb"), recursive=True)[0])
    per_op = collections.Counter()
    for plane in data.planes:
        for line in plane.lines:
            if line.name.startswith("tf_XLA"):
                for ev in line.events:
                    if ev.name in ops:
                        per_op[ev.name] += ev.duration_ns / steps / 1e6
    items = collections.Counter()
    for name, ms in per_op.items():
        items[_item(JAX_ITEMS, ops[name]) if ops[name] else JAX_UNNAMED] += ms
    top = [(f"{name}: {ops[name].replace('jit(mlm_train_step)/', '')[-110:]}", ms)
           for name, ms in per_op.most_common(25)]
    return {"step_ms": step * 1e3, "items": dict(items), "top": top}


def profile_torch(work: str, steps: int) -> dict:
    import torch
    from jaxbert.bench.worker import build
    from jaxbert.train.allocator import keep_freed_memory
    keep_freed_memory()
    fn, _ = build(work, "torch-eager", {"attention": "auto"})
    fn(), fn()
    step = _median_step(fn, steps)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            fn()
    per_op, items = collections.Counter(), collections.Counter()
    for ev in prof.events():
        ms = ev.self_cpu_time_total / steps / 1e3
        if ms <= 0:
            continue
        per_op[ev.name] += ms
        items[_item(TORCH_ITEMS, _torch_owner(ev))] += ms
    return {"step_ms": step * 1e3, "items": dict(items), "top": per_op.most_common(25)}


def _torch_owner(ev) -> str:
    """What a torch profiler event runs for: the optimizer step or autograd node above it, else the outermost
    aten operator above it (itself included)."""
    chain, node = [], ev
    while node is not None:
        chain.append(node.name)
        node = node.cpu_parent
    for name in chain:
        if name.startswith("Optimizer.") or "zero_grad" in name:
            return name
        if name.startswith("autograd::engine::evaluate_function: "):
            return name.split(": ", 1)[1]
    return next((name for name in reversed(chain) if name.startswith("aten::")), ev.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="modernbert-6x384")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--side", choices=("jax", "torch"), help=argparse.SUPPRESS)  # a worker process
    args = parser.parse_args()
    work = f"train/{args.model}/{args.batch}x{args.seq}"
    if args.side:
        out = (profile_jax if args.side == "jax" else profile_torch)(work, args.steps)
        print("@@profile " + json.dumps(out))
        return
    results = {}
    for side in ("jax", "torch"):
        load = os.getloadavg()[0]
        run = subprocess.run([sys.executable, __file__, "--side", side, "--model", args.model, "--batch",
                              str(args.batch), "--seq", str(args.seq), "--steps", str(args.steps)],
                             check=True, capture_output=True, text=True).stdout
        line = next(x for x in run.splitlines() if x.startswith("@@profile "))
        results[side] = {**json.loads(line[len("@@profile "):]), "load": load}
    j, t = results["jax"], results["torch"]
    print(f"{work}: jaxbert step {j['step_ms']:.0f} ms (load {j['load']:.1f}), "
          f"transformers {t['step_ms']:.0f} ms (load {t['load']:.1f}); traced ms per step:")
    print("\njaxbert item | ms")
    for name, ms in sorted(j["items"].items(), key=lambda kv: -kv[1]):
        print(f"  {name} | {ms:.0f}")
    print(f"  total traced | {sum(j['items'].values()):.0f}")
    print("\ntransformers item | ms (self CPU)")
    for name, ms in sorted(t["items"].items(), key=lambda kv: -kv[1]):
        print(f"  {name} | {ms:.0f}")
    print(f"  total traced | {sum(t['items'].values()):.0f}")
    for side, r in (("jaxbert", j), ("transformers", t)):
        print(f"\n{side}: largest ops, ms per step")
        for name, ms in r["top"]:
            print(f"  {ms:8.1f}  {name}")


if __name__ == "__main__":
    main()
