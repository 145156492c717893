"""Fixtures shared by every test folder. Helpers live in tests/helpers and are imported as
`tests.helpers.<name>` (the repository root is on pytest's path, see pyproject.toml)."""

from tests.helpers.gcs import gcs  # noqa: F401 (the gs:// emulator fixture)


def _configs_of_this_checkout() -> None:
    """jaxbert.configs from this checkout's configs/ folder. An editable install maps the package
    to the folder it was installed from, which in a second git worktree is another checkout's."""
    import importlib.util
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parents[1] / "configs"
    loaded = sys.modules.get("jaxbert.configs")
    if loaded is not None and Path(loaded.__file__).resolve().parent == here:
        return
    spec = importlib.util.spec_from_file_location("jaxbert.configs", here / "__init__.py",
                                                  submodule_search_locations=[str(here)])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["jaxbert.configs"] = module


_configs_of_this_checkout()
