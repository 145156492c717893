"""`jaxbert data prepare ...` (tokenize a corpus into shards) and `jaxbert data inspect DIR`."""

from __future__ import annotations

import json

from jaxbert import fs
from jaxbert.data.beam import RUNNERS
from jaxbert.data.loader import metadata
from jaxbert.data.prepare import prepare
from jaxbert.data.remote import open_rows
from jaxbert.data.tokenizer import load_tokenizer


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = sub.add_parser("prepare", help="tokenize a corpus into packed, memory-mappable shards")
    q.add_argument("--input", nargs="+", default=None, metavar="PATH",
                   help="text/jsonl/parquet files, globs, folders or datasets.save_to_disk folders "
                        "(default: the embedded Python documentation corpus)")
    q.add_argument("--tokenizer", required=True, help="tokenizer.json, vocab.txt or a model folder")
    q.add_argument("--output", required=True, help="folder to write (replaced only when complete)")
    q.add_argument("--max-length", type=int, default=128)
    q.add_argument("--format", choices=("mlm", "nsp"), default="mlm",
                   help="mlm: documents packed into full rows; nsp: sentence pairs for BertForPreTraining")
    q.add_argument("--validation-fraction", type=float, default=0.01)
    q.add_argument("--text-field", default="text", help="field/column holding the text (jsonl, parquet, arrow)")
    q.add_argument("--seed", type=int, default=0, help="seed of the nsp pairing")
    q.add_argument("--num-workers", type=int, default=None,
                   help="processes (default: every core; with --runner direct: its processes, default 2)")
    q.add_argument("--short-seq-prob", type=float, default=0.1, help="nsp: share of pairs with a shorter target")
    q.add_argument("--packing", choices=("stream", "documents", "none"), default="stream",
                   help="mlm rows: stream (documents joined with [SEP], cut into rows; default), documents "
                        "(whole documents share rows, with segment ids: attention and positions stay within "
                        "each), none (one document per padded row)")
    q.add_argument("--runner", default="local", choices=("local", *RUNNERS),
                   help="local: worker processes on this machine (default); direct, dataflow, flink, spark: "
                        "an Apache Beam runner (pip install '.[beam]'), same output files")
    q.add_argument("--pipeline-options", default=None, metavar="OPTIONS",
                   help="the Beam runner's pipeline options as one string, given with '=': --pipeline-options=\"--project=P "
                        "--region=R --temp_location=gs://BUCKET/tmp\" (remote runners need --temp_location); checked "
                        "against Beam's own options before any work, and refused with --runner local")
    q.add_argument("--quiet", action="store_true", help="no progress output (a bar, or plain lines when piped), nor Beam's log lines")
    q.add_argument("--overwrite", action="store_true",
                   help="replace OUTPUT when it is an earlier prepared dataset (anything else is refused)")
    i = sub.add_parser("inspect", help="print a prepared folder's metadata and its first rows decoded")
    i.add_argument("dir")
    i.add_argument("--rows", type=int, default=2)


def run(args) -> int:
    if args.action == "prepare":
        meta = prepare(args.input, args.tokenizer, args.output, max_length=args.max_length,
                       format=args.format, validation_fraction=args.validation_fraction,
                       text_field=args.text_field, seed=args.seed, num_workers=args.num_workers,
                       short_seq_prob=args.short_seq_prob, progress=not args.quiet,
                       overwrite=args.overwrite, packing=args.packing, runner=args.runner,
                       pipeline_options=args.pipeline_options)
        c, s = meta["counts"], meta["splits"]
        how = f", packing {meta['packing']}" if "packing" in meta else ""
        print(f"{args.output}: {c['documents']:,} documents, {c['tokens']:,} tokens -> "
              f"{s['train']['examples']:,} train and {s['validation']['examples']:,} validation rows of "
              f"{meta['max_length']} ({meta['format']}{how}, {meta['dtype']}, vocab {meta['vocab_size']:,})")
        return 0

    meta = metadata(args.dir)
    print(json.dumps({k: v for k, v in meta.items() if k not in ("sources", "splits")}, indent=2))
    folder = fs.as_path(args.dir)
    tok = load_tokenizer(fs.local_copy(folder / "tokenizer.json"))
    rows = open_rows(folder / meta["splits"]["train"]["shards"][0]["file"])
    for row in rows[: args.rows]:
        print(repr(tok.decode(row.tolist(), skip_special_tokens=False)))
    return 0
