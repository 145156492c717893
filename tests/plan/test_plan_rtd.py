"""jaxbert plan on a replaced-token-detection recipe (train.objective: rtd): the step it compiles trains the
generator and the discriminator, and its useful FLOPs (the MFU ceiling's numerator) count both models.

No compile here (the TPU compiles are benchmarks, docs/rtd.md "TPU plan"): the lowered step's own FLOP count
(XLA's cost analysis of the unoptimized HLO) is read instead, and the CLI runs on a stand-in compile."""

import json

import jax

from jaxbert.cli.main import main
from jaxbert.plan import batch_search, compile_step
from jaxbert.train import recipe as recipes

RECIPE = "configs/train/electra-tiny.yaml"
# discriminator 2 x 64 (E = 64, FFN 256, 2 heads), vocabulary 512, T = 32; the recipe's generator at width 1/2:
# 2 x 32 (FFN 128, 1 head), reading the 64-wide tables through its own projection
L, H, E, I, V, T = 2, 64, 64, 256, 512, 32
TINY = [f"model.config.num_hidden_layers={L}", f"model.config.hidden_size={H}", f"model.config.embedding_size={E}",
        "model.config.num_attention_heads=2", f"model.config.intermediate_size={I}", f"model.config.vocab_size={V}",
        f"data.seq_len={T}", f"model.config.max_position_embeddings={T}", "model.remat_policy=none",
        "model.scan_layers=false", "parallel.fsdp=false"]


def _by_hand(masked_slots: int) -> tuple[float, float]:
    """(generator, discriminator) training FLOPs per token: 6 x matmul weights + 12 x width x layers x T, plus
    each model's head (the generator's H x H and H x V at the masked slots, the discriminator's H x H and H x 1
    at every token), written out from the sizes above."""
    g, gi = H // 2, I // 2
    gen = (6 * (L * (4 * g * g + 2 * g * gi) + E * g) + 12 * g * L * T
           + 6 * (g * V + g * g) * masked_slots / T)
    disc = 6 * L * (4 * H * H + 2 * H * I) + 12 * H * L * T + 6 * (H * H + H)
    return gen, disc


def test_the_rtd_step_lowered_for_a_plan_holds_both_models_and_its_useful_flops_count_both(monkeypatch):
    r = recipes.load(RECIPE, TINY)
    cfg = r.model_config()
    gen, disc = _by_hand(r.data.masked_slots())
    assert batch_search.useful_flops_per_token(r, cfg) == gen + disc
    B = 4
    useful = batch_search.model_flops_per_device(r, cfg, B)
    assert useful == (gen + disc) * B * T

    lowered = {}

    def read_lowered(low, devices, per_device_batch, lower_s, hlo_dir=None):  # stands in for the compile
        lowered["flops"] = low.cost_analysis()["flops"]
        lowered["text"] = low.as_text()
        return None
    monkeypatch.setattr(compile_step, "compiled_cost", read_lowered)
    compile_step.compile_train_step(r, cfg, jax.devices()[:1], B)
    # The lowered step computes about the useful FLOPs of both models (element-wise work adds ~12% at these
    # sizes); without the generator it would hold (disc / (gen + disc)) ~ 3/4 of them, and a plan counting the
    # discriminator alone would put its step at ~1.47 x its useful FLOPs.
    assert 1.0 < lowered["flops"] / useful < 1.2
    assert lowered["flops"] / (disc * B * T) > 1.35
    # The generator's own matmuls are there: its 32-wide feed-forward (32 x 128) beside the discriminator's.
    assert "tensor<32x128xf32>" in lowered["text"] and "tensor<64x256xf32>" in lowered["text"]


def test_plan_cli_of_an_rtd_recipe_prints_the_generator_and_counts_both_models(tmp_path, monkeypatch, capsys):
    compiled = []

    def stand_in(recipe, cfg, devices, b):
        compiled.append(recipe.train.objective)
        return compile_step.StepCost(b, 1000 * b, 0, 0, 0, 1000 * b, None, None, 0.0, 0.0)
    monkeypatch.setattr(batch_search, "compile_train_step", stand_in)
    out = tmp_path / "plan.json"
    argv = ["plan", "--target", "local", "--recipe", RECIPE, "--hbm", str(4500 / 2**30), "--policies", "none",
            "--start", "4", "--max-batch", "4", "--json", str(out), "--set", "train.per_device_batch_size=4"]
    for item in TINY:
        argv += ["--set", item]
    assert main(argv) == 0
    text = capsys.readouterr().out
    r = recipes.load(RECIPE, TINY)
    gen, disc = _by_hand(r.data.masked_slots())
    assert "objective rtd (sharing tied, weight 50)" in text and "generator 2x32 (1 heads, FFN 128)" in text
    assert f"generator {gen / 1e6:,.1f} M + discriminator {disc / 1e6:,.1f} M" in text
    report = json.loads(out.read_text())
    assert set(compiled) == {"rtd"} and report["recommended"]["batch"] == 4
    assert report["recommended"]["useful_flops"] == (gen + disc) * 4 * T
