"""Progress of a long data step: tqdm's bar on a terminal (or a notebook's widget); where the
stream is piped to a file, plain lines instead, about every 30 s and one at the end with the
time taken, so a log gets a few short lines and never a pile of carriage-return updates."""

from __future__ import annotations

import sys
import time

from tqdm.asyncio import tqdm as console_tqdm
from tqdm.auto import tqdm as auto_tqdm

NOTEBOOK = auto_tqdm is not console_tqdm  # tqdm.auto picked the notebook widget


def is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def progress_bar(total: int, desc: str, unit: str = "it", unit_scale: bool = False, file=None,
                 disable: bool = False, every_s: float = 30.0):
    """tqdm's bar, or on a stream that is not a terminal a `LineProgress` with the same calls
    (update, set_postfix, n, close); disable: no output at all."""
    file = file if file is not None else sys.stderr
    if disable or NOTEBOOK or is_terminal(file):
        return auto_tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, file=file,
                         disable=disable, dynamic_ncols=True)
    return LineProgress(total, desc, unit, unit_scale, file, every_s)


class LineProgress:
    """A line every `every_s` seconds of work (none for a short job), and one at close:
    "prepare: 12.3MB in 3.2 s (3.8MB/s), docs=655, rows=8817"."""

    def __init__(self, total: int, desc: str, unit: str, unit_scale: bool, file, every_s: float):
        self.total, self.desc, self.unit, self.unit_scale = total, desc, unit, unit_scale
        self.file, self.every_s, self.n, self.postfix = file, every_s, 0, {}
        self.t0 = self._last = time.monotonic()
        self.closed = False

    def _amount(self, n: float) -> str:
        if self.unit_scale:
            return console_tqdm.format_sizeof(n, self.unit)
        return f"{n:,.0f} {self.unit}"

    def _line(self, text: str) -> None:
        extra = "".join(f", {k}={v}" for k, v in self.postfix.items())
        print(f"{self.desc}: {text}{extra}", file=self.file, flush=True)

    def _done(self) -> str:
        if self.total and self.n < self.total:
            return f"{self._amount(self.n)} of {self._amount(self.total)} ({self.n / self.total:.0%})"
        return self._amount(self.n)

    def update(self, n: float = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self._last >= self.every_s and not self.closed:
            self._last = now
            self._line(f"{self._done()} after {now - self.t0:.1f} s")

    def set_postfix(self, refresh: bool = True, **kwargs) -> None:
        self.postfix = kwargs

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        elapsed = time.monotonic() - self.t0
        rate = f" ({self._amount(self.n / elapsed)}/s)" if elapsed > 0 and self.n else ""
        self._line(f"{self._done()} in {elapsed:.1f} s{rate}")
