"""The errors every jaxbert verb maps to an exit code.

The bottom layer of the package: anything may import it, it imports nothing of jaxbert.
A library function raises one of these with a message that names the file, key or value
at fault; ``jaxbert.cli`` prints that message as one line on stderr and exits with the
class's ``exit_code``:

  0  success
  1  a check ran and failed (parity outside tolerance)       CheckFailed
  2  bad input or usage (a file, key or value is wrong)       InputError
  3  the run diverged (NaN/Inf loss or parameters)            Diverged
"""

from __future__ import annotations

import importlib

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_DIVERGED = 0, 1, 2, 3

EXIT_CODES_HELP = ("exit codes: 0 success, 1 a check failed, 2 bad input or usage "
                   "(one line on stderr names the file, key or value), 3 the run diverged")


class JaxbertError(Exception):
    """Base of every error a verb reports as one line."""

    exit_code = EXIT_BAD_INPUT


class InputError(JaxbertError, ValueError):
    """A file, key or value given by the user is wrong; the message names it."""

    exit_code = EXIT_BAD_INPUT


class ConfigError(InputError):
    """An invalid model config value; the message names the field."""


class CheckFailed(JaxbertError):
    """A check ran to completion and its verdict is "no"."""

    exit_code = EXIT_CHECK_FAILED


class Diverged(JaxbertError, RuntimeError):
    """Training produced a non-finite loss or parameter."""

    exit_code = EXIT_DIVERGED


# jaxbert is not on PyPI: an extra installs from a clone of the repository (pip install '.[extra]').
# torch is pinned first, so that pip does not pick a build for another CUDA or a newer, untested release.
TORCH_PIN = "torch==2.13.0"


def install_hint(extra: str) -> str:
    """The command that installs an extra, run in a clone of jaxbert."""
    return f"pip install {TORCH_PIN} '.[torch]'" if extra == "torch" else f"pip install '.[{extra}]'"


def require(module: str, extra: str, purpose: str):
    """Import an optional dependency, or raise an InputError naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise InputError(f"{purpose} needs {module.split('.')[0]}: {install_hint(extra)} "
                         f"(in a clone of jaxbert)") from None
