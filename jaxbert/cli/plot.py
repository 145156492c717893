"""`jaxbert plot WORKDIR [--out PNG]`: loss and MLM accuracy curves of a training run.

Without --out the picture is the workdir's own curves.png (replaced: the run wrote it). An --out
that exists is refused before anything is drawn; with --overwrite, only a PNG that `jaxbert plot`
wrote (its Software text says so) is replaced.
"""

from __future__ import annotations

import io
import os

from jaxbert import fs
from jaxbert.train.plot import figure
from jaxbert.workdir import CURVES

SOFTWARE = "jaxbert plot"  # the PNG's Software text: how --overwrite knows the file is ours
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def add_arguments(parser) -> None:
    parser.add_argument("workdir", help="a training workdir (holds metrics.jsonl)")
    parser.add_argument("--out", default=None, help="PNG path (default: WORKDIR/curves.png); an existing file "
                        "is refused")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace --out when it is a PNG an earlier `jaxbert plot` wrote (anything else is refused)")


def written_by_plot(path) -> bool:
    """True for a PNG whose text chunks name `jaxbert plot` as its software."""
    data = fs.as_path(path).read_bytes()
    if not data.startswith(PNG_MAGIC):
        return False
    pos = len(PNG_MAGIC)
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        chunk = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if chunk == b"tEXt" and body.partition(b"\0")[::2] == (b"Software", SOFTWARE.encode()):
            return True
        if chunk == b"IEND":
            break
        pos += 12 + length
    return False


def run(args) -> int:
    default = fs.as_path(args.workdir) / CURVES
    out = default
    if args.out is not None and os.fspath(fs.as_path(args.out)) != os.fspath(default):
        out = fs.check_new_file(args.out, "--out", args.overwrite, ours=written_by_plot)
    fig = figure(args.workdir)
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110, bbox_inches="tight", metadata={"Software": SOFTWARE})
    import matplotlib.pyplot as plt
    plt.close(fig)
    print(fs.atomic_write_bytes(out, png.getvalue()))
    return 0
