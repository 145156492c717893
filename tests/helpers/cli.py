"""What a refused command must print: exactly one line on stderr, the verb's error prefix, no traceback."""

from __future__ import annotations


def one_line(captured, verb: str, *needles: str) -> str:
    """captured: capsys.readouterr(); the line, after asserting each needle is in it."""
    lines = captured.err.strip().splitlines()
    assert "Traceback" not in captured.err + captured.out
    assert len(lines) == 1 and lines[0].startswith(f"jaxbert {verb}: error: "), captured.err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]
