"""What a conversion did: loaded, tied, ignored, unused and missing tensors."""

from __future__ import annotations

import collections
import dataclasses
from jaxbert.errors import InputError


class ConversionError(InputError):
    """A checkpoint that cannot be converted; the message names the file or key."""


class ConversionWarning(UserWarning):
    """Params were initialised, or checkpoint tensors left unused."""


@dataclasses.dataclass
class ConversionReport:
    """The outcome of matching a checkpoint against a model class.

    Attributes:
      source: the file or directory read.
      model_class: the jaxbert class the params are for.
      loaded: state-dict keys copied into params.
      tied: (alias key, key) pairs checked equal (tied decoder weight and bias).
      ignored: (key, reason) for buffers such as position_ids.
      unused: (key, reason) for checkpoint tensors the class has no param for.
      missing: (param path, shape) of params the checkpoint lacked, initialised.
      dtypes: count of loaded tensors per dtype name, as stored in the checkpoint.
      cast: the dtype name params were cast to (``dtype=``), or None.
      seconds: wall time of the conversion.
    """

    source: str
    model_class: str
    loaded: list = dataclasses.field(default_factory=list)
    tied: list = dataclasses.field(default_factory=list)
    ignored: list = dataclasses.field(default_factory=list)
    unused: list = dataclasses.field(default_factory=list)
    missing: list = dataclasses.field(default_factory=list)
    dtypes: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    cast: str | None = None
    seconds: float = 0.0

    @property
    def missing_paths(self) -> list[str]:
        return ["/".join(p) for p, _ in self.missing]

    @property
    def unused_keys(self) -> list[str]:
        return [k for k, _ in self.unused]

    def warning(self) -> str | None:
        """The text of the warning a non-strict load gives, or None when all matched."""
        lines = []
        if self.missing:
            lines.append(f"{len(self.missing)} {self.model_class} params were not in {self.source} "
                         "and were initialised randomly:")
            lines += [f"  {'/'.join(p)} {list(s)}" for p, s in self.missing]
        if self.unused:
            lines.append(f"{len(self.unused)} tensors of {self.source} were not used:")
            lines += [f"  {k}: {why}" for k, why in self.unused]
        return "\n".join(lines) or None

    def summary(self) -> str:
        """A few lines for the command line: counts, then every skip with its reason."""
        dtypes = ", ".join(f"{n} {d}" for d, n in sorted(self.dtypes.items()))
        lines = [f"source: {self.source}", f"model class: {self.model_class}",
                 f"loaded: {len(self.loaded)} tensors ({dtypes or 'none'})"
                 + (f", cast to {self.cast}" if self.cast else "")]
        lines += [f"tied: {a} == {k}" for a, k in self.tied]
        lines += [f"ignored: {k} ({why})" for k, why in self.ignored]
        lines += [f"unused: {k} ({why})" for k, why in self.unused]
        lines += [f"initialised (missing from the checkpoint): {'/'.join(p)} {list(s)}"
                  for p, s in self.missing]
        lines.append(f"time: {self.seconds:.2f} s")
        return "\n".join(lines)
