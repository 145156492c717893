"""The step-time bound (jaxbert.plan.roofline): a hand-written HLO bounded by hand, a real CPU step that
never beats its bound, and the planner ranking by the bound. No libtpu, no long compile."""

import time

import numpy as np
import pytest

from jaxbert import devices as devs
from jaxbert.cli.main import main
from jaxbert.plan import batch_search, compile_step, hlo_module, hlo_text, instruction_cost, roofline
from jaxbert.train import recipe as recipes

HLO = """HloModule hand, entry_computation_layout={()->f32[]}

%sum (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

%fused_dot (p0: f32[8,16], p1: f32[16,4]) -> f32[8,4] {
  %p0 = f32[8,16]{1,0} parameter(0)
  %p1 = f32[16,4]{1,0} parameter(1)
  ROOT %d = f32[8,4]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%slice_fusion (q0: f32[3,16,4], q1: s32[]) -> f32[16,4] {
  %q0 = f32[3,16,4]{2,1,0} parameter(0)
  %q1 = s32[] parameter(1)
  %c = s32[] constant(0)
  %ds = f32[1,16,4]{2,1,0} dynamic-slice(%q0, %q1, %c, %c), dynamic_slice_sizes={1,16,4}
  ROOT %b = f32[16,4]{1,0} bitcast(%ds)
}

%update_fusion (u0: f32[3,8,4], u1: f32[8,4], u2: s32[]) -> f32[3,8,4] {
  %u0 = f32[3,8,4]{2,1,0} parameter(0)
  %u1 = f32[8,4]{1,0} parameter(1)
  %u2 = s32[] parameter(2)
  %z = s32[] constant(0)
  %ub = f32[1,8,4]{2,1,0} bitcast(%u1)
  ROOT %dus = f32[3,8,4]{2,1,0} dynamic-update-slice(%u0, %ub, %u2, %z, %z)
}

%cond (ct: (s32[], f32[8,16], f32[3,16,4], f32[3,8,4])) -> pred[] {
  %ct = (s32[], f32[8,16]{1,0}, f32[3,16,4]{2,1,0}, f32[3,8,4]{2,1,0}) parameter(0)
  %ci = s32[] get-tuple-element(%ct), index=0
  %three = s32[] constant(3)
  ROOT %lt = pred[] compare(%ci, %three), direction=LT
}

%body (t: (s32[], f32[8,16], f32[3,16,4], f32[3,8,4])) -> (s32[], f32[8,16], f32[3,16,4], f32[3,8,4]) {
  %t = (s32[], f32[8,16]{1,0}, f32[3,16,4]{2,1,0}, f32[3,8,4]{2,1,0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[8,16]{1,0} get-tuple-element(%t), index=1
  %w = f32[3,16,4]{2,1,0} get-tuple-element(%t), index=2
  %acc = f32[3,8,4]{2,1,0} get-tuple-element(%t), index=3
  %ws = f32[16,4]{1,0} fusion(%w, %i), kind=kLoop, calls=%slice_fusion
  %yy = f32[8,4]{1,0} fusion(%x, %ws), kind=kOutput, calls=%fused_dot, metadata={op_name="jit(step)/layer/dot_general"}
  %acc2 = f32[3,8,4]{2,1,0} fusion(%acc, %yy, %i), kind=kLoop, calls=%update_fusion
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  ROOT %r = (s32[], f32[8,16]{1,0}, f32[3,16,4]{2,1,0}, f32[3,8,4]{2,1,0}) tuple(%next, %x, %w, %acc2)
}

ENTRY %main (a: f32[8,16], w: f32[3,16,4], v: f32[1024], k: f32[16,4], acc: f32[3,8,4]) -> f32[1024] {
  %a = f32[8,16]{1,0} parameter(0)
  %w = f32[3,16,4]{2,1,0} parameter(1)
  %v = f32[1024]{0} parameter(2)
  %k = f32[16,4]{1,0} parameter(3)
  %acc = f32[3,8,4]{2,1,0} parameter(4)
  %add = f32[1024]{0} add(%v, %v)
  %ar = f32[1024]{0} all-reduce(%add), replica_groups={}, to_apply=%sum
  %conv = f32[8,4]{1,0} convolution(%a, %k), dim_labels=bf_io->bf
  %zero = s32[] constant(0)
  %init = (s32[], f32[8,16]{1,0}, f32[3,16,4]{2,1,0}, f32[3,8,4]{2,1,0}) tuple(%zero, %a, %w, %acc)
  %loop = (s32[], f32[8,16]{1,0}, f32[3,16,4]{2,1,0}, f32[3,8,4]{2,1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %out = f32[1024]{0} copy(%ar)
}
"""


def test_a_hand_written_step_is_bounded_as_computed_by_hand():
    # Per loop iteration (3 of them):
    #   %ws   slices one [16,4] layer out of the [3,16,4] stack: 256 read + 256 written + 4 (the index) = 516 B
    #         (hlo_bytes.py's count: 768 + 4 + 256 = 1028)
    #   %yy   dot 8x16 @ 16x4: 2 * 8*4 * 16 = 1024 FLOPs; 512 + 256 read, 128 written = 896 B
    #   %acc2 writes the [8,4] row in place: reads the update and writes it (2 * 128) + the index 4 = 260 B
    #         (hlo_bytes.py: 384 + 128 + 4 + 384 = 900)
    #   %next s32 add: 4 + 4 + 4 = 12 B
    # Entry: %add 3 * 4096 = 12288 B; %ar all-reduce 4096 B over the interconnect; %conv 2 * 8*4 * 16 = 1024
    # FLOPs (kernel 16x4, o = 4) and 512 + 256 + 128 = 896 B; %out copy 2 * 4096 = 8192 B.
    peak, bw, ici = 1e6, 1e6, 1e6  # FLOP/s, B/s, B/s: seconds = thousandths of the figures above
    b = roofline.step_bound(HLO, peak, bw, ici)
    per_iteration = max(1024, 896) + 516 + 260 + 12
    expected = (3 * per_iteration + 12288 + max(1024, 896) + 8192) / 1e6 + 4096 / 1e6
    assert b.seconds == pytest.approx(expected)
    assert b.flops == 3 * 1024 + 1024
    assert b.bytes == 3 * (516 + 896 + 260 + 12) + 12288 + 896 + 8192
    assert b.collective_bytes == 4096 and b.collective_s == pytest.approx(4096 / 1e6)
    assert b.compute_s == pytest.approx(4096 / 1e6) and b.memory_s == pytest.approx(b.bytes / 1e6)
    assert b.mfu_ceiling(2048) == pytest.approx(2048 / (expected * peak))
    # without an interconnect figure collectives add nothing
    assert roofline.step_bound(HLO, peak, bw).seconds == pytest.approx(expected - 4096 / 1e6)
    # hlo_bytes.py's count (operands + result) is unchanged: the script imports this parser
    plain = sum(n for n, _, _ in hlo_module.instructions(HLO))
    assert plain == 3 * (1028 + 896 + 900 + 12) + 12288 + 2 * 4096 + 896 + 8192


def test_device_facts_split_a_chip_between_its_devices():
    class Core:
        device_kind, platform = "TPU v4", "tpu"

        def __init__(self, coords):
            self.coords = coords
    cores = [Core((0, 0, 0)), Core((0, 0, 0)), Core((1, 0, 0)), Core((1, 0, 0))]
    assert devs.device_roofline(cores[0], cores) == (275e12 / 2, 1200e9 / 2, 268e9 / 2)
    gpu = type("G", (), {"device_kind": "NVIDIA H100 80GB HBM3", "platform": "gpu"})()
    assert devs.device_roofline(gpu) == (989e12, 3350e9, 450e9)
    a100 = type("G", (), {"device_kind": "NVIDIA A100-SXM4-40GB", "platform": "gpu"})()
    assert devs.device_roofline(a100)[1] == 1555e9
    assert devs.device_roofline(type("C", (), {"device_kind": "cpu", "platform": "cpu"})()) is None
    for table in (devs.HBM_GBPS, devs.INTERCONNECT_GBPS):  # every generation jaxbert knows has its figures
        for kind in ("TPU v3", "TPU v4", "TPU v5 lite", "TPU v5p", "TPU v6 lite", "A100", "H100", "H200"):
            assert devs._lookup(table, kind), (table, kind)


def _best_rate(fn, amount, repeats=7):
    fn()
    best = 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = max(best, amount / (time.perf_counter() - t0))
    return best


def test_a_real_cpu_step_never_beats_its_bound():
    import jax
    import jax.numpy as jnp
    r = recipes.load("tiny-demo", ["model.preset=bert-tiny", "model.config.num_hidden_layers=2",
                                   "model.config.hidden_size=32", "model.config.num_attention_heads=2",
                                   "model.config.intermediate_size=64", "model.config.vocab_size=256",
                                   "data.seq_len=16"])
    compiled, run = compile_step.runnable_train_step(r, r.model_config(), jax.devices()[:1], 4)
    # This machine's figures, generous: the best of several calls of a matmul and of a copy about the size
    # of the step's arrays (they stay in cache, so a DRAM-sized copy would understate the bandwidth).
    n = 512
    a = jnp.ones((n, n), jnp.float32)
    mm = jax.jit(jnp.dot)
    peak = _best_rate(lambda: mm(a, a).block_until_ready(), 2 * n**3)
    x = jnp.ones((64 * 1024,), jnp.float32)
    cp = jax.jit(lambda v: v * 1.0)
    bandwidth = _best_rate(lambda: cp(x).block_until_ready(), 2 * x.nbytes)
    bound = roofline.step_bound(compiled.as_text(), peak, bandwidth)
    run()
    measured = min(_timed(run) for _ in range(5))
    assert bound.flops > 0 and bound.bytes > 0 and 0 < bound.seconds < measured, (bound, measured)


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _bounded_cost(b: int, hbm: int, seconds: float) -> compile_step.StepCost:
    bound = roofline.Bound(seconds, seconds, seconds, 0.0, 1.0, 1.0, 0.0, 100e12, 1e12, None, 0.5)
    return compile_step.StepCost(b, hbm, 0, 0, 0, hbm, None, None, 0.0, 0.0, bound=bound)


def test_plan_ranks_candidates_by_the_tokens_per_second_their_bound_allows(monkeypatch, capsys):
    # "full" fits a batch 4x larger (the most useful FLOPs per step even after its 1/3 recompute), but its
    # step is bound at 10 ms per sequence against 2 for "none": none allows 500 sequences/s, full 100.
    hbm = {"none": 100, "full": 25}
    per_seq = {"none": 2e-3, "full": 10e-3}
    monkeypatch.setattr(batch_search, "compile_train_step",
                        lambda r, cfg, devices, b: _bounded_cost(b, hbm[r.model.remat_policy] * b,
                                                                 per_seq[r.model.remat_policy] * b))
    r = recipes.load("bert-base-phase1", ["train.per_device_batch_size=auto", "train.accum_steps=1"])
    cands = batch_search.plan(r, r.model_config(), [], 800, ("full", "none"), (True,), log=lambda m: None)
    full, none = cands
    assert (full.batch, none.batch) == (32, 8) and full.score() > none.score()  # FLOPs would pick full
    assert none.bound_tokens_per_s() == pytest.approx(8 * 128 / 16e-3)
    assert full.bound_tokens_per_s() == pytest.approx(32 * 128 / 320e-3)
    assert batch_search.ranked_by_bound(cands) and batch_search.best(cands) is none
    assert none.mfu_ceiling() == pytest.approx(none.useful_flops / (16e-3 * 100e12))
    # the CLI prints the bound's columns, ranks the table by it and says why it recommends
    monkeypatch.setattr(compile_step, "target_devices", lambda target: [type("D", (), {
        "device_kind": "TPU v4", "platform": "tpu", "memory_stats": lambda self: {}})()])
    monkeypatch.setattr(compile_step, "check_target", lambda target: None)
    assert main(["plan", "--recipe", "bert-base-phase1", "--target", "v4:2x2x1", "--hbm", str(800 / 2**30),
                 "--policies", "full", "none", "--set", "train.per_device_batch_size=auto"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| True |")]
    assert "bound ms | tokens/s/device at bound | MFU ceiling" in out
    assert rows[0].startswith("| True | none **(recommended)** | 8 |") and "| 16.00 | 64,000 |" in rows[0]
    assert rows[1].startswith("| True | full | 32 |") and "| 320.00 | 12,800 |" in rows[1]
    assert "per_device_batch_size=8 (the most tokens/s its step-time bound allows" in out
    # without a bound (a CPU) the FLOPs decide, as before
    for c in cands:
        c.fit.bound = None
    assert not batch_search.ranked_by_bound(cands) and batch_search.best(cands) is full
    assert np.isfinite(full.score())


def test_a_target_bench_row_carries_the_bound_and_its_mfu_ceiling():
    from jaxbert.bench.target import bound_extra
    cost = _bounded_cost(32, 100, 0.02)
    cost.bound.collective_s = 0.001
    extra = bound_extra(cost, 1e12, 32 * 128)
    assert extra == {"bound_ms": 20.0, "bound_tokens_per_s": round(32 * 128 / 0.02),
                     "mfu_ceiling": round(1e12 / (0.02 * 100e12), 3), "memory_bound_share": 0.5, "collective_ms": 1.0}
    assert bound_extra(_bounded_cost(32, 100, 0.02).__class__(32, 1, 0, 0, 0, 1, None, None, 0.0, 0.0), 1e12, 1) == {}


def test_tpu_hlo_a_loop_without_a_known_trip_count_and_a_batched_matmul_as_a_dilated_convolution():
    # libtpu writes no known_trip_count: the condition's `counter < 3` says it
    tpu_style = HLO.replace(', backend_config={"known_trip_count":{"n":"3"}}', "")
    assert "known_trip_count" not in tpu_style
    assert roofline.step_bound(tpu_style, 1e6, 1e6, 1e6).seconds == pytest.approx(
        roofline.step_bound(HLO, 1e6, 1e6, 1e6).seconds)
    # a loop unrolled by 2 (libtpu's windowed einsums: `i < 4`, `i += 2`) runs ceil(3 / 2) = 2 times
    by_two = tpu_style.replace("%one = s32[] constant(1)", "%one = s32[] constant(2)")
    assert roofline.step_bound(by_two, 1e6, 1e6).flops == 2 * 1024 + 1024
    # attention scores [B=2, N=12, T=128, S=128] from q, k [2, 128, 12, 64], as libtpu wrote them: B and N are
    # windows over an input dilated by their own size, so each output element meets one real position per
    # window: 2 * (2*12*128*128) * 64 FLOPs, not 2 * 12 times that
    shapes = {"q": "bf16[2,128,12,64]{1,3,2,0:T(8,128)(2,1)}", "k": "bf16[2,128,12,64]{1,3,2,0:T(8,128)(2,1)}"}
    flops = instruction_cost.instruction_flops(
        "bf16[2,12,128,128]{2,3,1,0:T(8,128)(2,1)}", "convolution", ["q", "k"],
        ", window={size=2x12 stride=1x11 lhs_dilate=2x12}, dim_labels=0b1f_0o1i->01bf", shapes.get)
    assert flops == 2 * (2 * 12 * 128 * 128) * 64
    # the MLM head's weight gradient: a window of 2 over real input, 80 input features
    shapes = {"g": "bf16[2,80,30522]{2,1,0}", "x": "bf16[2,80,768]{2,1,0}"}
    flops = instruction_cost.instruction_flops("bf16[30522,768,1]{0,1,2}", "convolution", ["g", "x"],
                                               ", window={size=2}, dim_labels=0fb_0io->bf0", shapes.get)
    assert flops == 2 * 30522 * 768 * 2 * 80
    # an array a TPU layout places on chip (S(3): CMEM) is no HBM traffic; S(0) and no S() are
    assert hlo_text.hbm_nbytes("(s32[]{:T(128)}, bf16[2,128,768]{2,1,0:T(8,128)(2,1)S(3)}, f32[4]{0:S(0)})") == 20
    on_chip = HLO.replace("%add = f32[1024]{0} add(%v, %v)", "%add = f32[1024]{0:S(1)} add(%v, %v)")
    assert roofline.step_bound(on_chip, 1e6, 1e6).bytes == roofline.step_bound(HLO, 1e6, 1e6).bytes - 4096


def test_a_conditional_is_counted_at_its_costliest_branch_whichever_is_listed_first():
    """lax.cond chooses by data (a scanned layer choosing its attention kernel): the bound counts the branch
    with the most FLOPs, a [64, 256] x [256, 512] matmul, not the [64, 256] x [256, 8] one listed first."""
    import jax
    import jax.numpy as jnp

    def step(flag, x, small, big):
        return jax.lax.cond(flag, lambda x: (x @ big).sum(), lambda x: (x @ small).sum(), x)

    args = (jnp.bool_(True), jnp.ones((64, 256)), jnp.ones((256, 8)), jnp.ones((256, 512)))
    hlo = jax.jit(step).lower(*args).as_text(dialect="hlo")
    assert "conditional" in hlo
    flops = sum(op.flops for op in hlo_module.HloModule(hlo).operations())
    assert flops == 2.0 * 64 * 256 * 512
