"""Progress output piped to a file: a few plain lines with counts and timings, never a carriage return."""

import io
import re

from tqdm.std import tqdm

from jaxbert.cli.main import main as cli_main
from jaxbert.terminal import LineProgress, progress_bar

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz") + ["."]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_piped_prepare_prints_one_compact_line(tmp_path, capsys):
    """`jaxbert data prepare` with its output captured (not a terminal): no bar, one closing line."""
    (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c.\n\nd e.\n")
    rc = cli_main(["data", "prepare", "--input", str(corpus), "--tokenizer", str(tmp_path / "vocab.txt"),
                   "--output", str(tmp_path / "out"), "--max-length", "8", "--validation-fraction", "0"])
    assert rc == 0
    captured = capsys.readouterr()
    assert "\r" not in captured.err + captured.out
    lines = [line for line in captured.err.splitlines() if line.startswith("prepare:")]
    size = corpus.stat().st_size
    assert len(lines) == 1, captured.err
    assert re.fullmatch(rf"prepare: {size}\.0B in \d+\.\d s \(.+B/s\), docs=2, rows=2", lines[0]), lines[0]
    assert "2 documents, 7 tokens -> 2 train and 0 validation rows of 8" in captured.out


def test_line_progress_reports_every_so_often_and_at_the_end():
    out = io.StringIO()
    bar = progress_bar(10, "count", unit="doc", file=out, every_s=0.0)  # a line at every update
    assert isinstance(bar, LineProgress)
    bar.set_postfix(rows=3, refresh=False)
    bar.update(4)
    bar.update(bar.total - bar.n)
    bar.close()
    bar.close()  # a second close (prepare's finally after a failure) prints nothing more
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 3
    assert re.fullmatch(r"count: 4 doc of 10 doc \(40%\) after \d+\.\d s, rows=3", lines[0]), lines[0]
    assert re.fullmatch(r"count: 10 doc after \d+\.\d s, rows=3", lines[1]), lines[1]
    assert re.fullmatch(r"count: 10 doc in \d+\.\d s \([\d,]+ doc/s\), rows=3", lines[2]), lines[2]


def test_a_terminal_gets_the_bar_and_disable_prints_nothing():
    term = _Terminal()
    bar = progress_bar(10, "count", file=term)
    assert isinstance(bar, tqdm)
    bar.close()
    quiet = io.StringIO()
    bar = progress_bar(10, "count", file=quiet, disable=True)
    bar.update(10)
    bar.close()
    assert quiet.getvalue() == ""
