"""Fixtures shared by every test folder. Helpers live in tests/helpers and are imported as
`tests.helpers.<name>` (the repository root is on pytest's path, see pyproject.toml)."""

import os
import shutil
import sys
import tempfile
from importlib import metadata

import pytest

from tests.helpers.gcs import gcs  # noqa: F401 (the gs:// emulator fixture)

# transformers 5's save_pretrained draws a "Writing model shards" bar on stderr; the tests that read a
# one-line error off capsys after saving a model would count it. Read when huggingface_hub is imported.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
# `jaxbert train` run in-process by a test would switch the worker's malloc to keep every freed block for the rest
# of the run (jaxbert.train.allocator), under every later test. (The workers' peak memory did not move with this:
# docs/benchmarks.md.)
os.environ.setdefault("JAXBERT_MALLOC", "system")

# JAXBERT_TEST_COMPILE_CACHE=on (or a folder) shares one persistent compilation cache for the whole run: the
# process pytest starts makes the folder (or uses the one given, and leaves it behind) and sets these variables,
# the xdist workers and every child process the tests start inherit them, and so a step that several tests (or
# their children) compile with the same HLO is compiled once and read back after. The same HLO, options and devices
# give the same executable, so what a test computes does not change; it saved 9% of the suite's time (26 min 56 s
# against 29 min 32 s on 2 cores). Off by default: CI's first run with it on lost a worker to a segmentation fault
# near the end (cause not found; this machine ran it clean twice), while without it CI passed many times.
CACHE_ENV = "JAXBERT_TEST_COMPILE_CACHE"
JAX_CACHE_VARS = {"JAX_COMPILATION_CACHE_DIR": None, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                  "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
# Two processes that miss the same key both write it, and a third can read the file half-written: jax then
# warns and compiles it again. Not a fault, and a child's stderr the tests read must not carry it.
PARTIAL_READ = "Error reading persistent compilation cache entry"
_MADE = pytest.StashKey[str]()  # the folder this process made, removed when the run ends

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
    config.addinivalue_line("markers", "fresh_compile: compiles without the run's persistent compilation "
                                       "cache (tests/conftest.py), for a test that must see XLA compile")
    _no_worker_restart(config)
    _share_compile_cache(config)


def _no_worker_restart(config):
    """A worker that dies (a segfault, the OOM killer) ends the run at once, naming the test it ran
    ("worker 'gw0' crashed while running ..."). pytest-xdist 3.8 restarts it otherwise, and under
    --dist loadfile the restarted worker can be handed an already-finished file as an empty unit and
    wait for it forever (pytest-xdist issues 1323, 1378): the run then hangs until CI's time runs out.
    An explicit --max-worker-restart still wins."""
    if getattr(config.option, "numprocesses", None) and getattr(config.option, "maxworkerrestart", 0) is None:
        config.option.maxworkerrestart = "0"


def _share_compile_cache(config):
    path = os.environ.get(CACHE_ENV)
    if path in (None, "", "off"):
        return
    if path == "on":  # the process pytest started (xdist's controller or a run without -n): make the folder
        path = tempfile.mkdtemp(prefix="jaxbert-xla-cache-")
        os.environ[CACHE_ENV] = path
        config.stash[_MADE] = path
    for name, value in JAX_CACHE_VARS.items():
        os.environ[name] = path if value is None else os.environ.get(name, value)
    warn = os.environ.get("PYTHONWARNINGS")
    if PARTIAL_READ not in (warn or ""):
        os.environ["PYTHONWARNINGS"] = ",".join(filter(None, (warn, f"ignore:{PARTIAL_READ}")))
    config.addinivalue_line("filterwarnings", f"ignore:{PARTIAL_READ}")
    if "jax" in sys.modules:  # imported already (a plugin): its config read the variables before they were set
        import jax
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs",
                          float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))
        jax.config.update("jax_persistent_cache_min_entry_size_bytes",
                          int(os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"]))



def pytest_unconfigure(config):
    """The cache folder goes with the run that made it (after xdist's workers have stopped)."""
    path = config.stash.get(_MADE, None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


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


@pytest.fixture(autouse=True)
def _fresh_compile(request, monkeypatch):
    """A test marked fresh_compile compiles without the run's cache, its child processes too."""
    if request.node.get_closest_marker("fresh_compile") is None or not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        yield
        return
    import jax
    from jax._src import compilation_cache
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    yield
    jax.config.update("jax_enable_compilation_cache", True)
    compilation_cache.reset_cache()


@pytest.fixture(scope="session")
def _xla_cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("xla-cache")


@pytest.fixture
def compile_cache(request):
    """JAX's persistent compilation cache for one test: the run's (above), or with it off, a folder shared by
    this worker's tests that ask for it, so that a step compiled again in-process (a stopped run resumed,
    the same tiny recipe in another test) is read back instead."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        yield
        return
    import jax
    from jax._src import compilation_cache
    keys = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
            "jax_persistent_cache_min_entry_size_bytes")
    saved = {k: getattr(jax.config, k) for k in keys}
    for k, v in zip(keys, (str(request.getfixturevalue("_xla_cache_dir")), 0, 0)):
        jax.config.update(k, v)
    compilation_cache.reset_cache()
    yield
    for k, v in saved.items():
        jax.config.update(k, v)
    compilation_cache.reset_cache()
