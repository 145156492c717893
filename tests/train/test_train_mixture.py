"""`jaxbert train` on a mixture of prepared folders: what the run reports per source, an elastic resume
that reads the rows of an uninterrupted run, and every bad mixture refused in one line before any work.

The sources are two small folders of recognisable documents (tests/helpers/mixture.py), mixed 3:1;
a run reads more rows than either holds, so both start repeating.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pytest
import yaml

from jaxbert.cli.main import main
from jaxbert.data.mixture import Schedule, shares
from tests.helpers.mixture import VOCAB, prepare_sources
from tests.helpers.runs import child_env, loader_position, run_seen, seen_positions, write_recipe

STEPS, BATCH = 8, 16  # the reference run: 128 rows


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixture-train")
    sizes = prepare_sources(root, {"early": 60, "late": 20}, validation_fraction=0.3)
    assert sizes["late"] < STEPS * BATCH // 4 and sizes["early"] < STEPS * BATCH * 3 // 4, sizes  # both repeat
    # the same documents with another tokenizer, and with another row length
    prepare_sources(root, {"late-tok": 20}, vocab=VOCAB + ["zz"], tokenizer="tok2")
    prepare_sources(root, {"late-long": 20}, max_length=32)
    sources = [{"dir": str(root / "early"), "weight": 3}, {"dir": str(root / "late"), "weight": 1}]
    recipe = write_recipe(root / "mix.yaml", data={"source": "prepared", "seq_len": 16, "mask_rate": 0.25,
                                                   "sources": sources},
                          train={"steps": STEPS, "per_device_batch_size": BATCH, "log_every": 2, "eval_every": 0,
                                 "eval_batches": 1},
                          checkpoint={"every_steps": 4, "keep": 5})
    env = child_env(cache_dir=root / "jax-cache")
    ref = root / "reference"
    out = run_seen(root / "seen-reference", ["--config", str(recipe), "--workdir", str(ref)], env)
    total = STEPS * BATCH
    assert loader_position(ref, STEPS) == total
    reference = seen_positions(root / "seen-reference", total)
    assert sorted(reference) == list(range(total))
    return {"root": root, "recipe": recipe, "env": env, "reference": reference, "sizes": sizes, "out": out,
            "workdir": ref}


def test_a_mixture_run_reports_tokens_and_epochs_per_source_and_warns_when_one_repeats(setup):
    sizes, out = setup["sizes"], setup["out"]
    schedule = Schedule(shares([3, 1]), seed=0)  # train.seed 0: the stream the loader reads
    rows = {r["step"]: r for r in map(json.loads, (setup["workdir"] / "metrics.jsonl").read_text().splitlines())
            if "loss" in r}
    assert sorted(rows) == [2, 4, 6, 8]
    for step, row in rows.items():
        read = dict(zip(("early", "late"), schedule.consumed(step * BATCH)))
        for name in ("early", "late"):
            assert row[f"tokens/{name}"] == read[name] * 16
            assert row[f"epochs/{name}"] == round(read[name] / sizes[name], 4)
    assert rows[8]["tokens/early"] + rows[8]["tokens/late"] == STEPS * BATCH * 16
    assert abs(rows[8]["tokens/early"] / (STEPS * BATCH * 16) - 0.75) < 1 / 64  # 3:1 within a row
    last = rows[8]
    assert f"step 8/8: loss {last['loss']:.3f}" in out
    assert f"| epochs early {last['epochs/early']:.2f}, late {last['epochs/late']:.2f}" in out, out
    assert f"source early: {last['tokens/early']:,} tokens, {last['epochs/early']:.2f} epochs" in out, out
    for name in ("early", "late"):  # one warning each, at the step whose batch first re-reads a row
        first = next(s for s in range(1, STEPS + 1) if schedule.consumed(s * BATCH)[int(name == "late")] > sizes[name])
        assert re.findall(rf"warning: source {name} repeats from step (\d+):", out) == [str(first)], out


def test_a_mixture_resumed_on_another_device_count_with_half_the_batch_reads_the_rows_of_an_uninterruptedrun_seen(
        setup, tmp_path):
    args = ["--config", str(setup["recipe"]), "--workdir", str(tmp_path / "wd")]
    two = child_env(cache_dir=setup["root"] / "jax-cache-2dev", devices=2)
    # 2 devices x 8 rows for 4 steps, then 1 device x 8 rows (half the global batch) for 8 steps
    run_seen(tmp_path / "seen-1", args + ["--set", "train.steps=4", "--set", "train.per_device_batch_size=8"], two)
    out = run_seen(tmp_path / "seen-2", args + ["--set", "train.steps=12", "--set", "train.per_device_batch_size=8"],
               setup["env"])
    assert "resumed from" in out and "global batch 8 = 8 x 1 device(s)" in out, out
    middle, end = loader_position(tmp_path / "wd", 4), loader_position(tmp_path / "wd", 12)
    assert (middle, end) == (64, STEPS * BATCH)
    seen = seen_positions(tmp_path / "seen-1", middle)
    seen.update(seen_positions(tmp_path / "seen-2", end, above=middle))
    assert seen == setup["reference"]


def _refused(capsys, argv) -> str:
    code = main(["train", *argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


BAD = {  # --set data.sources=..., the start of the one line it is refused with
    "another tokenizer": ("[{dir: R/early, weight: 3}, {dir: R/late-tok, weight: 1}]",
                          r"data\.sources\[1\] \(.*late-tok\): tokenizer .*tok2/vocab\.txt"),
    "another row length": ("[{dir: R/early, weight: 3}, {dir: R/late-long, weight: 1}]",
                           r"data\.sources\[1\] \(.*late-long\) holds rows of 32 tokens, but data\.seq_len is 16"),
    "weight zero": ("[{dir: R/early, weight: 3}, {dir: R/late, weight: 0}]",
                    r"data\.sources\[1\]\.weight: must be a finite number > 0, got 0$"),
    "weight negative": ("[{dir: R/early, weight: -3}, {dir: R/late, weight: 1}]",
                        r"data\.sources\[0\]\.weight: must be a finite number > 0, got -3$"),
    "weight NaN": ("[{dir: R/early, weight: 3}, {dir: R/late, weight: .nan}]",
                   r"data\.sources\[1\]\.weight: must be a finite number > 0, got nan$"),
    "weight missing": ("[{dir: R/early, weight: 3}, {dir: R/late}]",
                       r"data\.sources\[1\]\.weight: missing; every source needs a weight > 0"),
    "no such source": ("[{dir: R/early, weight: 3}, {dir: R/nowhere, weight: 1}]",
                       r"data\.sources\[1\]\.dir: .*nowhere does not exist"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_mixture_is_one_line_and_exit_2_before_any_work(setup, tmp_path, capsys, case):
    sources, expected = BAD[case]
    workdir = tmp_path / "wd"
    err = _refused(capsys, ["--config", str(setup["recipe"]), "--workdir", str(workdir),
                            "--set", f"data.sources={sources.replace('R/', str(setup['root']) + '/')}"])
    assert re.search(r"^jaxbert train: error: (\S+: )?" + expected, err.strip()), err
    assert not workdir.exists()


def test_a_resume_with_changed_weights_is_refused_by_name_and_leaves_the_workdir_as_it_was(setup, tmp_path, capsys):
    workdir = tmp_path / "wd"
    shutil.copytree(setup["workdir"], workdir)
    before = sorted((p.relative_to(workdir), p.stat().st_mtime_ns) for p in workdir.rglob("*"))
    root = setup["root"]
    err = _refused(capsys, ["--config", str(setup["recipe"]), "--workdir", str(workdir), "--set", "train.steps=12",
                            "--set", f"data.sources=[{{dir: {root}/early, weight: 1}}, {{dir: {root}/late, weight: 1}}]"])
    assert err.startswith("jaxbert train: error: data.sources[1].weight: the run being resumed drew 25.00% of its "
                          "rows from late, this recipe 50.00%"), err
    err = _refused(capsys, ["--config", str(setup["recipe"]), "--workdir", str(workdir), "--set", "train.steps=12",
                            "--set", "data.temperature=0.5", "--set",
                            f"data.sources=[{{dir: {root}/early}}, {{dir: {root}/late}}]"])
    assert err.startswith("jaxbert train: error: data.temperature: the run being resumed drew"), err
    assert sorted((p.relative_to(workdir), p.stat().st_mtime_ns) for p in workdir.rglob("*")) == before
    assert yaml.safe_load((workdir / "recipe.yaml").read_text())["data"]["sources"][0]["weight"] == 3


@pytest.mark.parametrize("data,expected", [
    ({"dir": "a", "sources": [{"dir": "b", "weight": 1}]}, r"data\.sources: give data\.dir \(one folder\) or"),
    ({"temperature": 0.5}, r"data\.temperature: weighs the folders of data\.sources, and there are none"),
    ({"temperature": 1.5, "sources": [{"dir": "a"}]}, r"data\.temperature: must be in \[0, 1\], got 1\.5"),
    ({"temperature": 0.5, "sources": [{"dir": "a", "weight": 2}]}, r"data\.sources\[0\]\.weight: data\.temperature "
                                                                   r"sets every weight"),
    ({"sources": [{"dir": "x/a", "weight": 1}, {"dir": "y/a", "weight": 1}]},
     r"data\.sources\[1\]\.name: 'a' already names data\.sources\[0\]"),
    ({"sources": [{"dir": "a", "weight": 1, "wieght": 2}]}, r"data\.sources\[0\]: unknown key 'wieght'"),
    ({"sources": [{"dir": "a", "weight": True}]}, r"data\.sources\[0\]\.weight: must be a finite number > 0"),
    ({"sources": [{"dir": "a", "weight": 1, "name": "a/b"}]}, r"data\.sources\[0\]\.name: 'a/b' cannot key"),
    ({"sources": ["a"]}, r"data\.sources\[0\]: 'a' is not a mapping"),
])
def test_a_mixture_recipe_is_refused_naming_the_key(data, expected):
    from jaxbert.train import recipe as R
    with pytest.raises(R.RecipeError, match="^" + expected):
        R.from_dict({"data": data})
    assert R.from_dict({"data": {"sources": [{"dir": "x/a", "weight": 1}, {"dir": "y/a", "weight": 1, "name": "b"}]}})


@pytest.mark.parametrize("case", ["empty list", "huge integer weight", "weights overflow"])
def test_a_mixture_that_names_nothing_or_weighs_past_a_float_is_one_line_and_exit_2(tmp_path, capsys, case):
    """`data.sources: []` trained on the embedded corpus (a tokenizer trained, the data built, exit 0);
    a 330-digit integer weight ended in math.isfinite's OverflowError traceback; two weights of 1e308
    in fsum's. Each is one line naming the key, exit 2, before anything is written."""
    sources, expected = {
        "empty list": ("[]", r"data\.sources: an empty list names no folder; list the mixture's folders"),
        "huge integer weight": (f"[{{dir: {tmp_path}/a, weight: {10**330}}}]",
                                r"data\.sources\[0\]\.weight: an integer of 331 digits is out of range"),
        "weights overflow": (f"[{{dir: {tmp_path}/a, weight: 1.0e+308}}, {{dir: {tmp_path}/b, weight: 1.0e+308}}]",
                             r"data\.sources: the weights add up to more than a float holds"),
    }[case]
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"data:\n  sources: {sources}\ntrain:\n  steps: 1\n")
    err = _refused(capsys, ["--config", str(recipe), "--workdir", str(tmp_path / "wd")])
    assert re.search(r"^jaxbert train: error: \S+r\.yaml: " + expected, err.strip()), err
    assert not (tmp_path / "wd").exists()


def test_a_weight_in_exponent_notation_reads_as_a_number_as_every_recipe_number_does(tmp_path):
    """YAML 1.1 reads `1e3` (no dot) as a string: optim.learning_rate and data.temperature were
    converted, a mixture weight was refused ("must be a finite number > 0, got '1e3'")."""
    from jaxbert.train import recipe as R
    path = tmp_path / "r.yaml"
    path.write_text("data:\n  sources: [{dir: x/a, weight: 1e3}, {dir: y/b, weight: 1}]\n"
                    "optim:\n  learning_rate: 1e-3\n")
    assert yaml.safe_load(path.read_text())["data"]["sources"][0]["weight"] == "1e3"  # YAML's reading
    r = R.load(str(path))
    assert r.optim.learning_rate == 1e-3 and r.data.source_weights() == [1000.0, 1.0]
    assert r.data.sources[0].weight == 1000.0  # recorded in recipe.yaml as the number
    assert R.from_dict({"data": {"sources": [{"dir": "x/a", "weight": "2.5e1"}, {"dir": "y/b", "weight": 1}]}}
                       ).data.source_weights() == [25.0, 1.0]
    for bad in ("1e3x", "-1e3", ".nan"):
        with pytest.raises(R.RecipeError, match=r"^data\.sources\[0\]\.weight: must be a finite number > 0"):
            R.from_dict({"data": {"sources": [{"dir": "x/a", "weight": bad if bad != ".nan" else float("nan")}]}})
    assert R.from_dict({}).data.sources is None  # no key: no mixture (recorded as null)


def test_a_typo_in_a_source_key_is_refused_by_name_in_one_line(tmp_path, capsys):
    """data.sources' items are typed (SourceSection): a key that is not dir, weight or name stops the run
    before anything is written, naming the source and the key."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"data:\n  sources: [{{dir: {tmp_path}/a, weight: 3}}, {{dir: {tmp_path}/b, wieght: 1}}]\n")
    err = _refused(capsys, ["--config", str(recipe), "--workdir", str(tmp_path / "wd")])
    assert re.search(r"^jaxbert train: error: \S+r\.yaml: data\.sources\[1\]: unknown key 'wieght'; a source has "
                     r"dir, weight and name$", err.strip()), err
    assert not (tmp_path / "wd").exists()


@pytest.mark.parametrize("data", [
    {"sources": [{"dir": "x/early", "weight": 3}, {"name": "tail", "dir": "y/late", "weight": "1e3"},
                 {"dir": "z/c", "weight": 0.5}]},
    {"sources": [{"dir": "x/early"}, {"dir": "y/late", "name": "tail"}], "temperature": 0.3},
])
def test_a_mixture_recipe_round_trips_through_recipe_yaml(tmp_path, data):
    """The recipe.yaml a run writes reads back as the same recipe, and records each source as it was
    given (no default written in; a weight read from '1e3' as the number, an integer as the integer)."""
    from jaxbert.train import recipe as R
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({"data": data}))
    r = R.load(str(path))
    assert all(isinstance(s, R.SourceSection) for s in r.data.sources)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.data.sources[0].weight = 2
    written = R.save_effective(r, tmp_path / "wd")
    again = R.load(str(written))
    assert again == r
    recorded = yaml.safe_load(written.read_text())["data"]
    expected = [{k: (1000.0 if v == "1e3" else v) for k, v in s.items()} for s in data["sources"]]
    assert recorded["sources"] == expected and recorded.get("temperature") == data.get("temperature")
    assert R.save_effective(again, tmp_path / "wd2").read_text() == written.read_text()
    assert r.data.source_names() == ["early", "tail", "c"][:len(data["sources"])]
