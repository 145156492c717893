"""Fixtures shared by every test folder. Helpers live in tests/helpers and are imported as
`tests.helpers.<name>` (the repository root is on pytest's path, see pyproject.toml)."""

import os
from importlib import metadata

import pytest

from tests.helpers.gcs import gcs  # noqa: F401 (the gs:// emulator fixture)

# transformers 5's save_pretrained draws a "Writing model shards" bar on stderr; the tests that read a
# one-line error off capsys after saving a model would count it. Read when huggingface_hub is imported.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

EXPECT4 = "JAXBERT_EXPECT_TRANSFORMERS4"
EXPECT5 = "JAXBERT_EXPECT_TRANSFORMERS5"


def _transformers_major():
    """transformers' major version from its metadata (importing it here would slow every run), or None."""
    try:
        return int(metadata.version("transformers").split(".")[0])
    except (metadata.PackageNotFoundError, ValueError):
        return None


def pytest_configure(config):
    """JAXBERT_EXPECT_TRANSFORMERS4 / 5 (set by .ci/run) refuse a run on another transformers major: there
    the tests that need it (the transformers4 marks; EuroBERT's and test_convert_transformers5.py on 5)
    would skip instead of running."""
    major = _transformers_major()
    for name, want in ((EXPECT4, 4), (EXPECT5, 5)):
        if os.environ.get(name) and major != want:
            raise pytest.UsageError(f"{name} is set but transformers is "
                                    f"{metadata.version('transformers') if major else 'not installed'}")


def pytest_collection_modifyitems(config, items):
    """Skip the tests marked transformers4 (see tests/helpers/transformers4.py) on transformers >= 5."""
    major = _transformers_major()
    if major is None or major < 5:
        return
    for item in items:
        mark = item.get_closest_marker("transformers4")
        if mark is not None:
            why = mark.args[0] if mark.args else "an API removed in transformers 5"
            item.add_marker(pytest.mark.skip(reason=f"needs transformers 4.x ({why}); "
                                                    "CI runs it in its transformers-4.57 venv"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With JAXBERT_EXPECT_TRANSFORMERS4 set, a transformers4 test that skips (a missing package, an
    importorskip) fails instead: that venv exists to run them."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get(EXPECT4) and report.skipped and item.get_closest_marker("transformers4") is not None:
        report.outcome = "failed"
        report.longrepr = f"{EXPECT4} is set but this transformers4 test skipped: {report.longrepr}"


@pytest.fixture(scope="session")
def _xla_cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("xla-cache")


@pytest.fixture
def compile_cache(_xla_cache_dir):
    """JAX's persistent compilation cache on for one test, in a folder shared by this worker's tests that
    ask for it: a step compiled again in-process (a stopped run resumed, the same tiny recipe in another
    test) is read back instead (as tests/helpers/runs.child_env does for child processes). The same HLO
    and options give the same executable, so what the test computes does not change."""
    import jax
    from jax._src import compilation_cache
    keys = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
            "jax_persistent_cache_min_entry_size_bytes")
    saved = {k: getattr(jax.config, k) for k in keys}
    for k, v in zip(keys, (str(_xla_cache_dir), 0, 0)):
        jax.config.update(k, v)
    compilation_cache.reset_cache()
    yield
    for k, v in saved.items():
        jax.config.update(k, v)
    compilation_cache.reset_cache()
