"""Several training files for the embedding kind (data.sources): with data.batch_per_source every global
batch comes from one file, files drawn as often as their weights say and each file's rows once per cycle;
without it each batch's rows follow the weights; a schedule started at step k gives the batches an
uninterrupted one gives from k. The batches are read back by decoding their token ids with the tokenizer
file and matching the texts to the JSONL rows, which shares no code with the sampler. Bad sources are
refused in one line before anything is written."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from tokenizers import Tokenizer

from jaxbert.cli.main import main
from jaxbert.data.tokenizer import load_tokenizer
from jaxbert.finetune.features import bucket_lengths
from jaxbert.finetune.kinds import get
from jaxbert.finetune.kinds.embedding.sources import read_training
from jaxbert.finetune.recipe import load
from jaxbert.finetune.task_data import parse_task
from tests.helpers.cli import one_line
from tests.helpers.finetune_data import WORDS, make_source, write_jsonl


def _rows(topics, n, seed):
    """n distinct rows whose anchors name one of `topics` and two filler words."""
    rng, seen, rows = random.Random(seed), set(), []
    while len(rows) < n:
        key = (rng.choice(topics), *rng.sample(WORDS[:20], 2))
        if key not in seen:
            seen.add(key)
            rows.append({"q": " ".join(key), "p": f"the {key[0]} {key[1]}", "n": f"the {key[2]} {key[1]}"})
    return rows


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("sources")
    src = make_source(root)
    a = write_jsonl(root / "a.jsonl", _rows(("alpha", "beta"), 48, 0))
    b = write_jsonl(root / "b.jsonl", _rows(("gamma", "delta"), 32, 1))
    return root, src, a, b


def _training(data, per_source: bool, weights=(3, 1)):
    root, src, a, b = data
    sources = f"data.sources=[{{file: '{a}', weight: {weights[0]}}}, {{file: '{b}', weight: {weights[1]}}}]"
    recipe = load("finetune-tiny", [sources, f"data.batch_per_source={str(per_source).lower()}"])
    spec = parse_task("embedding", None, [str(a)], text_columns=("q", "p", "n"))
    kind = get("embedding")
    return read_training(spec, recipe.data, kind, recipe.options_for(kind), load_tokenizer(str(src)), 16, 16, 0)


def _reader(data):
    """anchor text -> (file, row) from the JSONL files; decode: token ids -> anchor text (the tokenizer file)."""
    root, src, a, b = data
    owner = {}
    for path in (a, b):
        for i, line in enumerate(path.read_text().splitlines()):
            owner[json.loads(line)["q"]] = (path.name, i)
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    return owner, lambda ids: tok.decode([int(t) for t in ids], skip_special_tokens=True).replace(" ##", "")


def _read(batches, n, data):
    owner, decode = _reader(data)
    return [[owner[decode(anchor)] for anchor in host["input_ids_0"][0]] for host, _ in itertools.islice(batches, n)]


def test_batch_per_source_draws_each_batch_from_one_file_as_often_as_its_weight(data):
    training = _training(data, per_source=True)
    assert training.per_epoch == 48 // 16 + 32 // 16
    steps = _read(training.batches(0, bucket_lengths(16)), 800, data)
    files = [{f for f, _ in batch} for batch in steps]
    assert all(len(f) == 1 for f in files)  # one file per batch
    share = sum(f == {"a.jsonl"} for f in files) / len(files)
    assert abs(share - 0.75) < 0.06, share  # weight 3 : 1 (sd 0.015 over 800 draws)
    for name, size in (("a.jsonl", 48), ("b.jsonl", 32)):  # each file's first cycle: every row once
        first = [r for batch in steps if batch[0][0] == name for _, r in batch][:size]
        assert sorted(first) == list(range(size))
    # started again at step 300: the batches an uninterrupted schedule gives from there
    again = _read(_training(data, per_source=True).batches(300, bucket_lengths(16)), 50, data)
    assert again == steps[300:350]


def test_without_batch_per_source_each_row_follows_the_weights(data):
    training = _training(data, per_source=False, weights=(1, 3))
    assert training.per_epoch == (48 + 32) // 16
    steps = _read(training.batches(0, bucket_lengths(16)), 200, data)
    rows = [f for batch in steps for f, _ in batch]
    assert abs(rows.count("b.jsonl") / len(rows) - 0.75) < 0.03  # sd 0.008 over 3,200 rows
    assert sum(len({f for f, _ in batch}) == 2 for batch in steps) > 150  # batches mix the files
    again = _read(_training(data, per_source=False, weights=(1, 3)).batches(123, bucket_lengths(16)), 20, data)
    assert again == steps[123:143]
    for name, size in (("a.jsonl", 48), ("b.jsonl", 32)):  # each file's rows stream: every row once a cycle
        stream = [r for batch in steps for f, r in batch if f == name]
        assert sorted(stream[:size]) == list(range(size)) and sorted(stream[size:2 * size]) == list(range(size))


@pytest.mark.parametrize("case, needle", [
    ("missing", "data.sources[1].file: {root}/nowhere.jsonl: no such file"),
    ("weight", "data.sources[1].weight: must be a finite number > 0, got 0"),
    ("small", "b.jsonl (data.sources[1], b): 32 rows, fewer than one global batch of 48; "
              "data.batch_per_source draws each batch from one source"),
    ("both", "give --train FILE or data.sources, not both"),
    ("kind", "data.sources: several training files are read by --task embedding alone"),
])
def test_bad_sources_are_refused_in_one_line_and_nothing_is_written(data, tmp_path, capsys, case, needle):
    root, src, a, b = data
    second = {"missing": f"{{file: '{root}/nowhere.jsonl'}}", "weight": f"{{file: '{b}', weight: 0}}"}.get(
        case, f"{{file: '{b}'}}")
    args = ["finetune", "--task", "classification" if case == "kind" else "embedding", "--model", str(src),
            "--eval", str(a), "--text-columns", "q", "p", "--config", "finetune-tiny",
            "--workdir", str(tmp_path / "run"), "--set", f"data.sources=[{{file: '{a}'}}, {second}]"]
    if case == "small":
        args += ["--set", "data.batch_per_source=true", "--set", "train.per_device_batch_size=48"]
    if case in ("both", "kind"):
        args += ["--train", str(a)]
    assert main(args) == 2
    one_line(capsys.readouterr(), "finetune", needle.format(root=root))
    assert not (tmp_path / "run").exists()


def test_each_column_is_cut_to_the_bucket_of_its_own_longest_text(data, tmp_path):
    """Short anchors and long passages: the anchors' column at bucket 32, the passages' at 64, as
    sentence-transformers pads each column to its own longest text; every text whole in its column."""
    _, src, _, _ = data
    rng = random.Random(3)
    rows = [{"q": f"{WORDS[i]} {WORDS[i + 1]}", "p": " ".join(rng.choice(WORDS[:20]) for _ in range(40))}
            for i in range(16)]
    path = write_jsonl(tmp_path / "long.jsonl", rows)
    recipe = load("finetune-tiny", [])
    spec = parse_task("embedding", str(path), [str(path)], text_columns=("q", "p"))
    kind = get("embedding")
    tok = load_tokenizer(str(src))
    training = read_training(spec, recipe.data, kind, recipe.options_for(kind), tok, 128, 16, 0)
    host, _ = next(training.batches(0, bucket_lengths(128)))
    assert sorted(host) == ["attention_mask_0", "attention_mask_1", "input_ids_0", "input_ids_1", "token_type_ids_0",
                            "token_type_ids_1", "valid"]
    longest = [max(len(tok.encode(r[c]).ids) for r in rows) for c in ("q", "p")]  # [CLS] and [SEP] included
    assert longest[0] <= 32 < longest[1] <= 64, longest
    assert host["input_ids_0"].shape == (1, 16, 32) and host["input_ids_1"].shape == (1, 16, 64)
    decode = Tokenizer.from_file(str(src / "tokenizer.json")).decode
    texts = {(decode([int(t) for t in q], skip_special_tokens=True), decode([int(t) for t in p], skip_special_tokens=True))
             for q, p in zip(host["input_ids_0"][0], host["input_ids_1"][0])}
    assert texts == {(r["q"], r["p"]) for r in rows}
