"""The batch planner and compile-for-a-target: jaxbert plan, jaxbert bench --target.

The real-compile test plans a 1-layer model for the local CPU backend; the
long TPU compiles are benchmarks (jaxbert bench --target), not tests.
"""

import json

import pytest

from jaxbert.cli.main import main
from jaxbert.errors import InputError
from jaxbert.plan import batch_search, compile_step
from jaxbert.train import recipe as recipes

TINY = ["model.preset=bert-tiny", "model.config.num_hidden_layers=1", "model.config.hidden_size=32",
        "model.config.num_attention_heads=2", "model.config.intermediate_size=64",
        "model.config.vocab_size=256", "data.seq_len=16"]


def _fake_cost(hbm: int, b: int, host: int = 0) -> compile_step.StepCost:
    return compile_step.StepCost(b, hbm, 0, 0, 0, hbm, None, None, 0.0, 0.0, host_temporaries=host)


@pytest.mark.parametrize("base,slope,budget,expected", [
    (600_000, 70_000, 1_500_000, 12),  # (1.5e6 - 6e5) // 7e4 = 12
    (600_000, 70_000, 650_000, 0),     # not even one sequence
    (100, 3, 100 + 3 * 1000, 1000),    # far above the first guess
    (100, 3, 100 + 3 * 4096 + 50, 4096),  # capped at max_batch
])
def test_largest_batch_finds_the_edge_in_few_compiles(base, slope, budget, expected):
    calls = []

    def cost_at(b):
        calls.append(b)
        return _fake_cost(base + slope * b, b)

    b, seen = batch_search.largest_batch(cost_at, budget, start=8, max_batch=4096)
    assert b == expected
    if 0 < b < 4096:
        assert seen[b].hbm <= budget < seen[b + 1].hbm
    assert len(calls) == len(set(calls)) <= 12


def test_largest_batch_with_a_kink():
    # Above 20 the step needs a second buffer: the line through small batches overshoots.
    cost = lambda b: _fake_cost(1000 + 10 * b + (500 if b > 20 else 0), b)
    b, seen = batch_search.largest_batch(cost, 1600, start=8)
    assert b == 20 and seen[21].hbm > 1600


LIBTPU_OOM = ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries "
              "(15.57G) exceeds available HBM (15.48G).")


def test_a_compile_refused_for_memory_is_a_figure_that_never_fits():
    # libtpu compiling for a TPU v3 raises this instead of returning a memory analysis
    c = compile_step.out_of_memory_cost(RuntimeError(LIBTPU_OOM), 16 * 2**30, 68, 1.0, 2.0)
    assert c.out_of_memory and c.per_device_batch == 68
    assert c.hbm == int(16 * 2**30 - 15.48 * 2**30 + 15.57 * 2**30)  # capacity - available + required
    assert c.temporaries == int(15.57 * 2**30)
    assert not c.fits(16 * 2**30) and not c.fits(10**15)
    assert compile_step.out_of_memory_cost(RuntimeError("INVALID_ARGUMENT: bad shape"), 16 * 2**30, 68, 1.0, 2.0) is None
    # the search treats it as the edge even if the estimate were under the budget
    refused = compile_step.StepCost(10, 1_000, 0, 0, 0, 1_000, None, None, 0.0, 0.0, out_of_memory=True)
    cost = lambda b: refused if b >= 10 else _fake_cost(100 * b, b)
    b, seen = batch_search.largest_batch(cost, 2_000, start=8)
    assert b == 9 and seen[10].out_of_memory


def test_plan_on_the_local_backend_picks_a_batch_that_fits_and_one_more_does_not(tmp_path, capsys):
    budget_gib = 1.5e6 / 2**30
    out = tmp_path / "plan.json"
    argv = ["plan", "--target", "local", "--hbm", str(budget_gib), "--policies", "none", "--scan", "no",
            "--max-batch", "64", "--json", str(out)]
    for item in TINY:
        argv += ["--set", item]
    argv += ["--preset", "bert-tiny", "--seq-len", "16"]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    budget = result["budget_bytes"]
    (cand,) = result["candidates"]
    b = cand["batch"]
    assert 1 < b < 64, cand  # the budget sits inside the range, so the search had an edge to find
    assert cand["hbm_bytes"] <= budget < cand["over_hbm_bytes"]
    assert result["recommended"]["batch"] == b
    # A compile of our own at b + 1 agrees that it does not fit, and at b that it does.
    data = {"model": {"dtype": "bfloat16"}}
    for item in TINY:
        recipes.apply_override(data, item)
    r = recipes.from_dict(data)
    devices = compile_step.target_devices("local")
    assert compile_step.compile_train_step(r, r.model_config(), devices, b + 1).hbm > budget
    assert "recommended: scan_layers=False remat_policy=none per_device_batch_size" in capsys.readouterr().out


@pytest.mark.parametrize("verb", [["bench", "--target", "v4:2x2x1"],
                                  ["plan", "--preset", "bert-base-uncased", "--seq-len", "128",
                                   "--target", "v4:2x2x1"]])
def test_a_tpu_target_without_libtpu_names_the_extra(monkeypatch, capsys, verb):
    monkeypatch.setattr(compile_step, "libtpu_installed", lambda: False)
    assert main(verb) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "libtpu" in err[0] and "pip install '.[tpu]'" in err[0] and "jaxbert[" not in err[0]


def test_recipe_auto_keys():
    r = recipes.from_dict({"train": {"per_device_batch_size": "auto"}, "model": {"remat_policy": "auto"}})
    assert r.train.per_device_batch_size == "auto" and r.model.remat_policy == "auto"
    with pytest.raises(recipes.RecipeError, match="train.accum_steps"):
        recipes.from_dict({"train": {"accum_steps": "auto"}})


def test_auto_without_a_known_memory_size_is_a_clear_error():
    import jax
    r = recipes.from_dict({"train": {"per_device_batch_size": "auto"}})
    with pytest.raises(InputError, match="memory of .* is unknown"):
        batch_search.resolve_auto(r, r.model_config(), jax.devices("cpu"), log=lambda m: None)


def test_train_with_remat_auto_plans_it_and_records_the_choice(tmp_path, monkeypatch, capsys):
    import yaml
    from tests.helpers.runs import write_recipe
    monkeypatch.setattr(batch_search, "device_hbm_bytes", lambda device, devices=None: 2**30)  # CPU devices report none
    recipe = write_recipe(tmp_path / "t.yaml", model={"remat_policy": "auto"},
                          train={"steps": 2, "log_every": 1, "eval_every": 0})
    wd = tmp_path / "run"
    assert main(["train", "--config", str(recipe), "--workdir", str(wd)]) == 0
    assert "plan: per_device_batch_size 8, remat_policy none" in capsys.readouterr().out
    effective = yaml.safe_load((wd / "recipe.yaml").read_text())
    assert effective["model"]["remat_policy"] == "none" and effective["train"]["per_device_batch_size"] == 8


def test_train_and_evaluate_without_the_planner_refuses_auto_before_writing(tmp_path):
    """The train loop sits below the planner: `jaxbert train` hands it batch_search.resolve_auto; a library
    caller with an `auto` key and no planner is told what to pass, and nothing is written."""
    from jaxbert.train.loop import train_and_evaluate
    r = recipes.from_dict({"train": {"per_device_batch_size": "auto"}})
    with pytest.raises(recipes.RecipeError, match="plan_auto=jaxbert.plan.batch_search.resolve_auto"):
        train_and_evaluate(r, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_target_bench_rows_and_table_with_a_stand_in_worker():
    import argparse
    from jaxbert.bench.target import run_target_bench, target_table
    specs = []

    def worker(spec):
        specs.append(spec)
        scanned = "/scan-" in spec["work"]
        extra = {"hbm_gb": 3.22, "hbm_gib": 3.0, "bound_ms": 21.5, "mfu_ceiling": 0.61}
        if not scanned:
            extra.update(gflop=2308.0, gb_accessed=40.1, xla_over_model_flops=1.02)
        return {"seconds": [61.0], "extra": extra}

    args = argparse.Namespace(quick=True, only=["aot/bert-base/32x128/scan-none", "transformers-flax"],
                              target="v4:2x2x1")
    records = run_target_bench(args, worker)
    assert [(s["work"], s["contender"]) for s in specs] == [
        ("aot/bert-base/32x128/scan-none", "jaxbert"),
        ("aot/bert-base/32x128/scan-none-fsdp", "jaxbert"),
        ("aot/bert-base/32x128/unscanned-none", "transformers-flax"),
        ("aot/bert-base/32x128/unscanned-full", "transformers-flax")]
    assert all(s["options"] == {"target": "v4:2x2x1"} for s in specs)
    rows = target_table(records, "v4:2x2x1").splitlines()
    assert rows[2] == "| bert-base/32x128/scan-none | jaxbert | 3.0 | — | — | — | 21.5 | 0.61 | 61 |"
    assert rows[4] == ("| bert-base/32x128/unscanned-none | transformers-flax | 3.0 | 2,308.0 | 40.1 | 1.02 | 21.5 | 0.61 "
                       "| 61 |")


def test_largest_batch_rows_search_with_the_planner_and_tabulate(monkeypatch):
    import argparse
    from jaxbert.bench import target as bench_target
    from jaxbert.bench.target import run_target_bench, target_table
    compiled = []

    def fake_compile(contender, r, cfg, devices, B, T, policy, hlo_dir=None):
        compiled.append((contender, B, r.train.accum_steps, r.parallel.fsdp))
        if policy == "offload":
            assert r.model.attention_chunks == r.model.ffn_chunks == 4  # the row's -chunks4 reaches the recipe
            return _fake_cost(100 + B, B, host=2**30 * B)  # a byte per sequence on the device, 2**30 on the host
        per_seq = 2 if contender == "jaxbert" else 7  # GiB-free units: bytes
        return _fake_cost(100 + per_seq * B, B)

    monkeypatch.setattr(bench_target, "_compile", fake_compile)
    monkeypatch.setattr(bench_target.compile_step, "target_devices", lambda target: [type("D", (), {"device_kind": "TPU v4"})()])
    monkeypatch.setattr(bench_target, "device_hbm_bytes", lambda device, devices=None: 100 + 2 * 40)
    worker = lambda spec: bench_target.run_aot_work(spec["work"], spec["contender"], spec["options"]["target"])
    args = argparse.Namespace(quick=False, only=["aot-max/bert-large/T512/scan-", "aot-max/bert-large/T512/unscanned"],
                              target="v4:2x2x1")
    records = run_target_bench(args, worker)
    got = {(r.work.split("/")[-1], r.contender): r.extra["largest_batch"] for r in records}
    assert got == {("scan-full-fsdp", "jaxbert"): 40, ("scan-offload-fsdp-chunks4", "jaxbert"): 80,
                   ("unscanned-full", "transformers-flax"): 11}  # 100 + 7 * 11 = 177 <= 180 < 184
    assert {(c, a) for c, _, a, _ in compiled} == {("jaxbert", 1), ("transformers-flax", 1)}  # one micro-batch
    assert all(f for c, _, _, f in compiled if c == "jaxbert")
    table = target_table(records, "v4:2x2x1")
    assert "| bert-large/T512/scan-full-fsdp | jaxbert | 40 | 0.0 |" in table
    assert "| bert-large/T512/scan-offload-fsdp-chunks4 | jaxbert | 80 | 0.0 | 0.0 | 0.0 | 80.0 |" in table  # host GiB


@pytest.mark.parametrize("total,largest,expected", [(32, 29, 2), (32, 7, 8), (64, 67, 1), (7, 3, 7), (30, 0, None)])
def test_fewest_micro_batches(total, largest, expected):
    assert batch_search.fewest_micro_batches(total, largest) == expected


def _planned(monkeypatch, recipe, budget, slopes):
    """Candidates from batch_search.plan under a stand-in compile: HBM = slope[policy] x micro-batch, plus 50 for the
    gradient accumulator when the step has more than one micro-batch; every compile is recorded."""
    compiled = []

    def fake_compile(r, cfg, devices, b):
        compiled.append((r.model.remat_policy, r.train.accum_steps, b))
        return _fake_cost(slopes[r.model.remat_policy] * b + (50 if r.train.accum_steps > 1 else 0), b)

    monkeypatch.setattr(batch_search, "compile_train_step", fake_compile)
    cands = batch_search.plan(recipe, recipe.model_config(), [], budget, tuple(slopes), (True,), log=lambda m: None)
    for c in cands:  # what each policy recomputes (a scanned compile measures none): none 0, dots 5%, full 33%
        c.remat_extra = {"none": 0.0, "dots": 0.05, "full": 1 / 3}[c.remat_policy]
    compiled.clear()
    return cands, compiled


def test_the_recipe_batch_goes_to_the_least_recomputing_candidate_and_is_confirmed(monkeypatch):
    r = recipes.load("bert-base-phase1", ["train.per_device_batch_size=32", "train.accum_steps=1"])
    cands, compiled = _planned(monkeypatch, r, 850, {"none": 100, "dots": 25})
    assert [(c.remat_policy, c.batch) for c in cands] == [("none", 8), ("dots", 34)]
    splits = batch_search.split_recipe_batch(r, None, [], 850, cands, log=lambda m: None)
    # none: 32 = 4 x 8 adds the accumulator its search (one micro-batch) did not have, so it is compiled:
    # 8 x 100 + 50 = 850 fits. dots takes 1 x 32, below the 34 its search measured: no compile
    assert [(s.candidate.remat_policy, s.micro_batches, s.size) for s in splits] == [("none", 4, 8), ("dots", 1, 32)]
    assert compiled == [("none", 4, 8)] and splits[0].cost.hbm == 850 and splits[1].cost is None
    # a tighter budget: none's 4 x 8 with the accumulator is over, so 8 x 4 (450), after one more compile
    compiled.clear()
    splits = batch_search.split_recipe_batch(r, None, [], 849, cands, log=lambda m: None)
    assert [(s.candidate.remat_policy, s.micro_batches, s.size) for s in splits][0] == ("none", 8, 4)
    assert compiled == [("none", 4, 8), ("none", 8, 4)] and splits[0].cost.hbm == 450


def test_a_recipe_that_accumulates_may_fit_its_whole_batch_without_the_accumulator(monkeypatch):
    r = recipes.load("bert-base-phase1", ["train.per_device_batch_size=16", "train.accum_steps=2"])
    cands, compiled = _planned(monkeypatch, r, 3220, {"dots": 100})
    assert cands[0].batch == 31  # 31 x 100 + 50 fits; 32 x 100 + 50 does not
    (s,) = batch_search.split_recipe_batch(r, None, [], 3220, cands, log=lambda m: None)
    assert (s.micro_batches, s.size, s.cost.hbm, compiled) == (1, 32, 3200, [("dots", 1, 32)])
    # one micro-batch over the budget too: the recipe's own 2 x 16, known to fit, without another compile
    compiled.clear()
    (s,) = batch_search.split_recipe_batch(r, None, [], 3160, cands, log=lambda m: None)
    assert (s.micro_batches, s.size, s.cost, compiled) == (2, 16, None, [("dots", 1, 32)])


def test_no_split_without_a_fitting_candidate_and_none_for_an_auto_batch(monkeypatch):
    r = recipes.load("bert-base-phase1", ["train.per_device_batch_size=8"])
    cands, _ = _planned(monkeypatch, r, 50, {"none": 100})
    assert cands[0].batch == 0 and batch_search.split_recipe_batch(r, None, [], 50, cands, log=lambda m: None) == []
    auto = recipes.load("bert-base-phase1", ["train.per_device_batch_size=auto"])
    with pytest.raises(InputError, match="auto"):
        batch_search.split_recipe_batch(auto, None, [], 50, cands, log=lambda m: None)


def test_plan_of_a_recipe_splits_its_own_batch_into_micro_batches_that_fit(tmp_path):
    budget_gib = 1.5e6 / 2**30
    out = tmp_path / "plan.json"
    argv = ["plan", "--recipe", "tiny-demo", "--target", "local", "--hbm", str(budget_gib), "--policies", "none",
            "--scan", "no", "--max-batch", "64", "--json", str(out)]
    for item in TINY + ["model.dtype=bfloat16", "train.per_device_batch_size=64", "train.accum_steps=1"]:
        argv += ["--set", item]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    (cand,), split = result["candidates"], result["recipe_batch"]["recommended"]
    assert 1 < cand["batch"] < 64 and result["recipe_batch"]["global_batch"] == 64  # one local device
    assert split["per_device_batch_size"] * split["accum_steps"] == 64 and split["accum_steps"] > 1
    assert split["per_device_batch_size"] <= cand["batch"] and split["hbm_bytes"] <= result["budget_bytes"]
    # our own compile of that split agrees that it fits
    r = recipes.load("tiny-demo", TINY + ["model.dtype=bfloat16", "model.scan_layers=false",
                                          "model.remat_policy=none", f"train.accum_steps={split['accum_steps']}"])
    cost = compile_step.compile_train_step(r, r.model_config(), compile_step.target_devices("local"), split["per_device_batch_size"])
    assert cost.hbm == split["hbm_bytes"] <= result["budget_bytes"]


@pytest.mark.parametrize("accum", [1, 2])
def test_what_remat_adds_is_measured_per_micro_batch_when_the_recipe_accumulates(monkeypatch, accum):
    r = recipes.load("bert-base-phase1", [f"train.accum_steps={accum}", "train.per_device_batch_size=4"])
    cfg = r.model_config()
    per_micro_batch = batch_search.model_flops_per_device(r, cfg, 4) / accum

    def fake_compile(recipe, cfg, devices, b):  # XLA counts a scanned micro-batch loop's body once
        cost = _fake_cost(100 * b, b)
        cost.flops = 1.1 * per_micro_batch * b / 4
        return cost

    monkeypatch.setattr(batch_search, "compile_train_step", fake_compile)
    (c,) = batch_search.plan(r, cfg, [], 450, ("dots",), (False,), log=lambda m: None)
    assert c.batch == 4 and c.remat_extra == pytest.approx(0.1)


def test_every_target_bench_row_compiles_one_micro_batch_as_the_old_port_steps():
    from jaxbert.bench import target as bench_target
    # bert-large's recipe accumulates 2 micro-batches; the rows compare single steps of B sequences
    r, scanned, policy, B, T = bench_target._recipe("bert-large", "unscanned-none")
    assert r.train.accum_steps == 1 and (scanned, policy, T) == (False, "none", 512)


def _no_compile(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("compiled for refused options")
    monkeypatch.setattr(batch_search, "compile_train_step", refuse)


@pytest.mark.parametrize("argv,flag", [(["--hbm", "nan"], "--hbm"), (["--hbm", "inf"], "--hbm"), (["--hbm", "0"], "--hbm"),
                                       (["--hbm", "-1"], "--hbm"), (["--max-batch", "0"], "--max-batch"),
                                       (["--max-batch", "-4"], "--max-batch"), (["--start", "-2"], "--start"),
                                       (["--policies", "bogus"], "--policies"), (["--policies", "auto"], "--policies")])
def test_plan_refuses_bad_options_before_a_compile(monkeypatch, capsys, argv, flag):
    _no_compile(monkeypatch)
    assert main(["plan", "--preset", "bert-tiny", "--seq-len", "16", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"jaxbert plan: error: {flag} "), err


def test_a_split_never_holds_micro_batches_larger_than_max_batch(monkeypatch):
    r = recipes.load("bert-base-phase1", ["train.per_device_batch_size=5", "train.accum_steps=3"])
    cands, compiled = _planned(monkeypatch, r, 10**9, {"none": 100})  # anything fits: the max bounds the batch
    cands[0].batch = 4  # as plan(max_batch=4) leaves it
    (s,) = batch_search.split_recipe_batch(r, None, [], 10**9, cands, log=lambda m: None, max_batch=4)
    assert s.size <= 4 and s.size * s.micro_batches == 15 and compiled == []


def test_plan_on_the_cpu_takes_host_ram_and_says_so(monkeypatch, capsys):
    monkeypatch.setattr(batch_search, "compile_train_step", lambda r, cfg, devices, b: _fake_cost(1000 * b, b))
    argv = ["plan", "--recipe", "tiny-demo", "--policies", "none", "dots", "--max-batch", "4",
            "--set", "train.per_device_batch_size=5", "--set", "train.accum_steps=3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "(host RAM: the CPU has no device memory of its own)" in out
    recommended = [line for line in out.splitlines() if line.startswith("recommended")]
    assert len(recommended) == 1 and "per_device_batch_size=3 accum_steps=5" in recommended[0], out
    assert "HBM" not in out and "FLOPs remat adds" not in out  # nothing measured: no column of dashes
    assert "on this 1 device)" in out


def test_plan_without_a_recipe_recommends_once(monkeypatch, capsys):
    monkeypatch.setattr(batch_search, "compile_train_step", lambda r, cfg, devices, b: _fake_cost(1000 * b, b))
    assert main(["plan", "--preset", "bert-tiny", "--seq-len", "16", "--policies", "none", "--max-batch", "4"]) == 0
    out = capsys.readouterr().out
    recommended = [line for line in out.splitlines() if line.startswith("recommended")]
    assert len(recommended) == 1 and "per_device_batch_size=4" in recommended[0]


def test_plan_from_a_family_preset_trains_that_family_s_class(monkeypatch, capsys):
    """`plan --preset modernbert`: the recipe built from the preset alone trains ModernBertForMaskedLM
    (no complaint about BertForMaskedLM, a class the user never named). The search itself is
    stubbed: what is checked is the recipe and config it is handed."""
    seen = []

    def search(r, cfg, *rest, **kw):
        seen.append((r.model.model_class, type(cfg).__name__, list(cfg.architectures)))
        raise InputError("stop here")

    monkeypatch.setattr(batch_search, "plan", search)
    assert main(["plan", "--preset", "modernbert", "--seq-len", "64", "--hbm", "1"]) == 2
    assert capsys.readouterr().err.strip() == "jaxbert plan: error: stop here"
    assert seen == [("ModernBertForMaskedLM", "ModernBertConfig", ["ModernBertForMaskedLM"])]
    # a class named with --set still wins, and is checked against the family
    assert main(["plan", "--preset", "modernbert", "--seq-len", "64", "--hbm", "1",
                 "--set", "model.model_class=BertForMaskedLM"]) == 2
    assert "architectures names 'BertForMaskedLM'" in capsys.readouterr().err
