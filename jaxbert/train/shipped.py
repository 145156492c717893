"""The training recipes shipped with jaxbert (packaged as jaxbert.configs/train), by name."""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path

from jaxbert import fs


def recipe_path(name_or_path: str) -> Path:
    """A file path, or the name of a recipe shipped in configs/train/."""
    if fs.is_url(name_or_path):
        return fs.as_path(name_or_path)
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or os.sep in str(name_or_path):
        return path
    return Path(str(resources.files("jaxbert.configs").joinpath("train", f"{name_or_path}.yaml")))


def recipe_names() -> dict[str, str]:
    """Name -> first comment line of every recipe shipped with jaxbert."""
    names = {}
    for entry in sorted(resources.files("jaxbert.configs").joinpath("train").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            header = []
            for line in entry.read_text().splitlines():
                if not line.startswith("#"):
                    break
                header.append(line.lstrip("# ").strip())
            text = " ".join(header).split(": ", 1)[-1]  # the header starts "NAME: ..."
            names[entry.name[:-5]] = re.split(r"(?<! al)(?<!e\.g)\.(?:\s|$)", text, maxsplit=1)[0]
    return names
