"""The PyTorch side of `jaxbert bench`'s end-to-end rows, run in an interpreter of its own that imports
no jax: `python -m jaxbert.bench.torch_e2e {torch-finetune|torch-predict} SPEC_JSON` prints one result
line (REPLY_PREFIX + JSON). jaxbert.bench.e2e starts it and times it from the command to its exit.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

REPLY_PREFIX = "@@e2e "


def read_tsv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def _torch_finetune_main(spec: dict) -> dict:
    import torch
    import transformers
    from torch.utils.data import DataLoader

    torch.manual_seed(42)
    tokenizer = transformers.AutoTokenizer.from_pretrained(spec["src"])
    model = transformers.AutoModelForSequenceClassification.from_pretrained(spec["src"], num_labels=2)

    def encode(path):
        rows = read_tsv(path)
        enc = tokenizer([r["sentence"] for r in rows], truncation=True, max_length=spec["max_length"])
        return [{"input_ids": ids, "attention_mask": am, "token_type_ids": tt, "labels": int(r["label"])}
                for ids, am, tt, r in zip(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"], rows)]

    collate = transformers.DataCollatorWithPadding(tokenizer)
    train = DataLoader(encode(spec["train"]), batch_size=spec["batch"], shuffle=True, collate_fn=collate,
                       generator=torch.Generator().manual_seed(42))
    dev = DataLoader(encode(spec["dev"]), batch_size=spec["batch"], collate_fn=collate)
    no_decay = ("bias", "LayerNorm.weight")
    groups = [{"params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
               "weight_decay": 0.01},
              {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)],
               "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=2e-5, eps=1e-6)
    total = len(train) * spec["epochs"]
    schedule = transformers.get_scheduler("linear", opt, num_warmup_steps=round(0.1 * total),
                                          num_training_steps=total)
    steps, accuracy = 0, None
    for _ in range(spec["epochs"]):
        model.train()
        for batch in train:
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            schedule.step()
            opt.zero_grad()
            steps += 1
        model.eval()
        right = seen = 0
        for batch in dev:
            with torch.no_grad():
                pred = model(**{k: v for k, v in batch.items() if k != "labels"}).logits.argmax(-1)
            right += int((pred == batch["labels"]).sum())
            seen += len(pred)
        accuracy = right / seen
    model.save_pretrained(spec["out"])
    tokenizer.save_pretrained(spec["out"])
    return {"steps": steps, "dev_accuracy": accuracy}


def _torch_predict_main(spec: dict) -> dict:
    import transformers

    rows = [json.loads(line) for line in Path(spec["inputs"]).read_text().splitlines() if line.strip()]
    clf = transformers.pipeline("text-classification", model=spec["model"], tokenizer=spec["model"], device="cpu")
    preds = clf([r["sentence"] for r in rows], batch_size=32, truncation=True)
    Path(spec["out"]).write_text("".join(json.dumps({"id": r["id"], "label": p["label"], "score": p["score"]}) + "\n"
                                         for r, p in zip(rows, preds)))
    return {"examples": len(rows)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    verbs = {"torch-finetune": _torch_finetune_main, "torch-predict": _torch_predict_main}
    if len(argv) != 2 or argv[0] not in verbs:
        print(f"usage: python -m jaxbert.bench.torch_e2e {{{'|'.join(verbs)}}} SPEC_JSON", file=sys.stderr)
        return 2
    print(REPLY_PREFIX + json.dumps(verbs[argv[0]](json.loads(argv[1]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
