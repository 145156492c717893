"""`jaxbert tokenizer train --input ... --vocab-size N --output DIR [--kind bpe]`: a BERT WordPiece
tokenizer, or a byte-level BPE as ModernBERT's."""

from __future__ import annotations

from jaxbert.data.tokenizer import TOKENIZER_KINDS, load_tokenizer, train_tokenizer


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    t = sub.add_parser("train", help="train a WordPiece (or --kind bpe: byte-level BPE) tokenizer that "
                                     "transformers' AutoTokenizer loads")
    t.add_argument("--input", nargs="+", default=None, metavar="PATH",
                   help="text/jsonl/parquet files, globs, folders (default: the embedded Python docs corpus)")
    t.add_argument("--vocab-size", type=int, required=True)
    t.add_argument("--output", required=True, help="folder for tokenizer.json, the configs and (WordPiece) vocab.txt")
    t.add_argument("--kind", choices=tuple(TOKENIZER_KINDS), default="wordpiece",
                   help="wordpiece (BERT's, default) or bpe (byte-level, as ModernBERT's: cased, no token types, "
                        "exact decoding)")
    t.add_argument("--cased", action="store_true",
                   help="keep case (default: lower-case, like bert-base-uncased; a bpe tokenizer is always cased)")
    t.add_argument("--text-field", default="text")
    t.add_argument("--min-frequency", type=int, default=2)
    t.add_argument("--overwrite", action="store_true",
                   help="replace OUTPUT when it is an earlier jaxbert tokenizer (anything else is refused)")


def run(args) -> int:
    out = train_tokenizer(args.input, args.vocab_size, args.output, lowercase=not args.cased,
                          text_field=args.text_field, min_frequency=args.min_frequency,
                          overwrite=args.overwrite, kind=args.kind)
    tok = load_tokenizer(out)
    kind = TOKENIZER_KINDS[args.kind]
    cased = args.cased or not kind.word_pieces  # the byte-level BPE never lower-cases
    print(f"{out}: {kind.name} vocabulary of {tok.get_vocab_size():,} tokens "
          f"({'cased' if cased else 'lower-cased'})")
    return 0
