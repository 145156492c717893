"""The tokenizer files that travel with a converted checkpoint.

``jaxbert convert`` writes them beside the weights it writes, byte for byte, so that
an HF -> jaxbert -> HF round trip keeps the tokenizer and ``jaxbert fill-mask`` works
on either directory. They come from the folder that holds the source checkpoint, or
for a training workdir from its run's tokenizer (``workdir.tokenizer_path``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from jaxbert import fs
from jaxbert.workdir import is_workdir, tokenizer_path

# WordPiece (BERT), byte-level BPE (RoBERTa) and SentencePiece (XLM-R; DeBERTa-v3's spm.model) files, and the configs beside them.
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "merges.txt", "sentencepiece.bpe.model", "spm.model")


def tokenizer_files(src) -> list:
    """The tokenizer files that belong to the checkpoint ``src`` (paths, local or URLs); [] if none."""
    if is_workdir(src):
        folder = tokenizer_path(src)
        if folder is None:
            return []
        folder = fs.as_path(folder)
    else:
        path = fs.as_path(src)
        folder = path if path.is_dir() else path.parent  # a file, or a TF checkpoint prefix
    if not folder.is_dir():
        return []
    return [folder / n for n in TOKENIZER_FILES if (folder / n).is_file()]


def copy_tokenizer(files: list, directory) -> list[str]:
    """Copy ``files`` (from tokenizer_files) into ``directory``, a folder being filled; their names."""
    for f in files:
        shutil.copyfile(fs.local_copy(f), Path(directory) / f.name)  # a URL: from a local copy
    return [f.name for f in files]
