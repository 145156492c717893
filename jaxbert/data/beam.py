"""`prepare` on Apache Beam: the corpus read and tokenized by a runner's workers, the rows packed here.

Tokenizing is the cost of preparing data (a few MB/s per core); packing the ids into rows is a
pass over arrays. So a Beam pipeline does the first and this process the second, in two runs:

1. measure: one task per input file reads it and records every document's length in characters
   (and the file's SourceStats). From the lengths this process cuts the chunks exactly where the
   local path cuts them (jaxbert.data.encode.chunk_starts: input order, not worker order).
2. encode: one task per input file reads it again and sends each document to its chunk; the
   chunks are grouped and each is encoded by jaxbert.data.encode.encode_chunk, as the local
   workers do, and staged as one .npz file.

Then the staged chunks are read in chunk order and packed into shards by the same code as the
local path, so the output holds the same bytes for the same inputs and arguments, whatever the
runner and its number of workers. Staged files live under the pipeline's `--temp_location`
(a bucket that every worker reaches, for Dataflow), or a local temporary folder for the
DirectRunner, and are removed at the end.

Pipeline options are checked against Beam's own parser (every PipelineOptions class Beam defines) before
any work: a value of the wrong type or an option Beam does not know is refused in one line, where Beam
would print its usage, or drop the option with a warning (a misspelt Dataflow option would go unnoticed).
`quiet` (`--quiet`) keeps Beam's INFO and WARNING lines off the terminal, its worker processes' too
(their stderr is held back and shown only when the run fails).

apache-beam is an optional dependency (`pip install '.[beam]'`).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shlex
import sys
import tempfile
import threading
import uuid

import numpy as np

from jaxbert import fs
from jaxbert.data.corpus import Corpus, CorpusError
from jaxbert.data.encode import SPLITS, chunk_starts, encode_chunk, init_worker
from jaxbert.errors import InputError, require

# --runner NAME -> Beam's runner class name. "local" (no Beam) is jaxbert.data.prepare's own path.
RUNNERS = {"direct": "DirectRunner", "dataflow": "DataflowRunner", "flink": "FlinkRunner",
           "spark": "SparkRunner"}

_lock = threading.Lock()
_configured: list = [None]  # the config encode_chunk's worker state was set up with, in this process


class BeamError(InputError):
    """Bad runner arguments."""


def import_beam(purpose: str):
    """apache_beam, imported without the warnings Beam logs about Google Cloud clients it may not need;
    an InputError naming the extra that installs it when it is missing."""
    logging.disable(logging.WARNING)
    try:
        return require("apache_beam", "beam", purpose)
    finally:
        logging.disable(logging.NOTSET)


def check_options(args: list[str], runner: str) -> None:
    """BeamError, in one line, for pipeline options Beam's parser refuses (a value of the wrong type) or
    does not know (Beam itself would print its usage, or drop them with a warning)."""
    beam = import_beam(f"preparing data with --runner {runner}")
    options = beam.options.pipeline_options
    base = getattr(options, "_BeamArgumentParser", None)  # Beam's parser class (value-provider options)
    if base is None:  # another Beam release: its own parser runs the pipeline
        return

    class Parser(base):
        def error(self, message):
            if message.startswith("ambiguous option: "):  # as Beam: an unknown prefix of two options
                return
            raise BeamError(f"--pipeline-options: {message} (apache-beam {beam.__version__})")

    parser = Parser(allow_abbrev=False, add_help=False)
    seen = {}
    for cls in options.PipelineOptions.__subclasses__():
        seen.setdefault(str(cls), cls)
    for cls in seen.values():
        cls._add_argparse_args(parser)  # noqa: SLF001 - how Beam's PipelineOptions builds its own parser
    _, unknown = parser.parse_known_args(args)
    if unknown:
        raise BeamError(f"--pipeline-options: apache-beam {beam.__version__} knows no option "
                        f"{' '.join(unknown)} (it would drop it): check its spelling in Beam's pipeline options")


def pipeline_args(runner: str, options: str | None, num_workers: int | None, embedded: bool = False,
                  quiet: bool = False) -> list[str]:
    """Beam's argv for a runner: --runner, the user's pipeline options, and for the DirectRunner
    `num_workers` processes (default 2). BeamError for arguments the run cannot go with: options
    given to the local runner, options Beam refuses or does not know (check_options). quiet: the
    workers log errors only."""
    if runner == "local":
        if options is not None:
            raise BeamError("--pipeline-options are a Beam runner's (--runner direct, dataflow, flink, spark); "
                            "--runner local (this machine's processes, no Beam) takes none: drop them or pick a runner")
        return []
    if runner not in RUNNERS:
        raise BeamError(f"--runner {runner!r} is not one of local, {', '.join(RUNNERS)}")
    try:
        args = shlex.split(options or "")
    except ValueError as e:
        raise BeamError(f"--pipeline-options {options!r}: {e}") from None
    if any(a == "--runner" or a.startswith("--runner=") for a in args):
        raise BeamError("--pipeline-options: give the runner with --runner, not inside the options")
    args = [f"--runner={RUNNERS[runner]}", *args]
    if runner == "direct" and not any(a.startswith("--direct_num_workers") for a in args):
        args += [f"--direct_num_workers={num_workers or 2}", "--direct_running_mode=multi_processing"]
    if not any(a.startswith("--default_sdk_harness_log_level") for a in args):
        # not a line per worker start and stop; under --quiet, not a warning either
        args.append(f"--default_sdk_harness_log_level={'ERROR' if quiet else 'WARNING'}")
    if runner != "direct":
        if embedded:
            raise BeamError(f"--runner {runner}: the embedded corpus is this machine's Python documentation; "
                            "give --input files that the runner's workers can read")
        if _temp_location(args) is None:
            raise BeamError(f"--runner {runner} needs --temp_location in --pipeline-options "
                            "(a bucket every worker reaches, e.g. gs://BUCKET/tmp)")
    check_options(args, runner)
    return args


@contextlib.contextmanager
def _worker_stderr(quiet: bool):
    """Under `quiet`, what Beam's worker processes write to stderr (each logs its start at INFO and
    WARNING, before any option reaches it) goes to a temporary file, shown only when the run fails."""
    if not quiet:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            held.seek(0)
            sys.stderr.write(held.read().decode("utf-8", "replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _temp_location(args: list[str]) -> str | None:
    for i, a in enumerate(args):
        for flag in ("--temp_location", "--tempLocation"):
            if a.startswith(flag + "="):
                return a.split("=", 1)[1]
            if a == flag and i + 1 < len(args):
                return args[i + 1]
    return None


def _save(path, arrays: dict) -> None:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    fs.atomic_write_bytes(path, buf.getvalue())


def _load(path) -> dict:
    with fs.as_path(path).open("rb") as f:
        with np.load(io.BytesIO(f.read()), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}


# --- what the workers run (module-level functions: Beam pickles them by reference) ---

def _measure_part(index: int, corpus: Corpus, stage: str) -> int:
    """Stage part `index`'s document lengths, progress units and SourceStats."""
    part = corpus.part(index)
    lengths, units, error = [], [], ""
    try:
        for doc, u in part:
            lengths.append(len(doc))
            units.append(u)
    except CorpusError as e:  # staged, and raised by the launcher: a bad file is one line, not a task's traceback
        error = str(e)
    stats = json.dumps([s.as_dict() for s in part.stats])
    _save(fs.as_path(stage) / f"part-{index:08d}.npz",
          {"lengths": np.asarray(lengths, np.int64), "units": np.asarray(units, np.int64),
           "stats": np.asarray(stats), "error": np.asarray(error)})
    return index


def _route_part(index: int, corpus: Corpus, first_doc: np.ndarray, starts: np.ndarray):
    """(chunk index, (part index, documents, progress units)) for the pieces of chunks in part `index`."""
    doc = int(first_doc[index])
    current, docs, units = None, [], 0
    for text, u in corpus.part(index):
        chunk = int(np.searchsorted(starts, doc, side="right")) - 1
        if chunk != current and docs:
            yield current, (index, docs, units)
            docs, units = [], 0
        current = chunk
        docs.append(text)
        units += u
        doc += 1
    if docs:
        yield current, (index, docs, units)


def _encode_staged(item, config: dict, starts: np.ndarray, stage: str) -> int:
    """Encode one chunk from its pieces (in part order) and stage the result."""
    chunk, pieces = item
    pieces = sorted(pieces, key=lambda p: p[0])
    docs = [d for _, part_docs, _ in pieces for d in part_docs]
    units = sum(u for _, _, u in pieces)
    with _lock:  # encode_chunk's tokenizer is per process; set it up once
        if _configured[0] != config:
            init_worker(config)
            _configured[0] = config
    res = encode_chunk((chunk, docs, int(starts[chunk]), units))
    arrays = {"header": np.asarray([res["index"], res["units"], res["documents"]], np.int64)}
    for split in SPLITS:
        for i, value in enumerate(res[split]):
            arrays[f"{split}_{i}"] = np.asarray(value)
    _save(fs.as_path(stage) / f"chunk-{chunk:08d}.npz", arrays)
    return chunk


def _unstage(arrays: dict, fmt: str) -> dict:
    index, units, documents = (int(v) for v in arrays["header"])
    res = {"index": index, "units": units, "documents": documents}
    for split in SPLITS:
        if fmt == "mlm":
            res[split] = (arrays[f"{split}_0"], arrays[f"{split}_1"])
        else:
            rows, a_len, labels, ntok, ndocs = (arrays[f"{split}_{i}"] for i in range(5))
            res[split] = (rows, a_len, labels, int(ntok), int(ndocs))
    return res


class BeamEncoder:
    """The encoded chunks of a corpus, made by a Beam runner; iterate it for them in chunk order.

    `stats` holds the corpus's SourceStats (as `Corpus.stats` after a local pass) once the
    measure run is done (at construction).
    """

    def __init__(self, corpus: Corpus, config: dict, runner: str, options: str | None = None,
                 num_workers: int | None = None, quiet: bool = False):
        self.beam = import_beam(f"preparing data with --runner {runner}")
        self.quiet = quiet
        self.args = pipeline_args(runner, options, num_workers, embedded=corpus.sources is None, quiet=quiet)
        temp = _temp_location(self.args)
        self.corpus, self.config = corpus, config
        self.stage = (fs.as_path(temp) / f"jaxbert-prepare-{uuid.uuid4().hex}" if temp is not None
                      else fs.as_path(tempfile.mkdtemp(prefix="jaxbert-prepare-")))
        self.stage.mkdir(parents=True, exist_ok=True)
        try:
            self._measure()
        except BaseException:
            self.close()
            raise

    def _run(self, build) -> None:
        """Run one pipeline."""
        beam = self.beam
        options = beam.options.pipeline_options.PipelineOptions(self.args)
        # Beam logs every worker's start and stop
        logging.disable(logging.CRITICAL)
        try:
            with _worker_stderr(self.quiet), beam.Pipeline(options=options) as p:
                build(p)
        finally:
            logging.disable(logging.NOTSET)

    def _measure(self) -> None:
        beam, corpus, stage = self.beam, self.corpus, str(self.stage)
        n = corpus.num_parts()
        self._run(lambda p: (p | "parts" >> beam.Create(range(n))
                             | "measure" >> beam.Map(_measure_part, corpus, stage)))
        parts = [_load(self.stage / f"part-{i:08d}.npz") for i in range(n)]
        for part in parts:  # the first bad file in input order, as the local path would meet it
            if str(part["error"]):
                raise CorpusError(str(part["error"]))
        counts = np.asarray([len(p["lengths"]) for p in parts], np.int64)
        self.first_doc = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        lengths = np.concatenate([p["lengths"] for p in parts]) if parts else np.zeros(0, np.int64)
        self.stats = [s for p in parts for s in json.loads(str(p["stats"]))]
        if len(lengths) == 0:
            where = "the embedded corpus" if corpus.inputs is None else ", ".join(map(str, corpus.inputs))
            raise CorpusError(f"empty corpus: no documents in {where}")
        self.starts = chunk_starts(lengths)

    def __iter__(self):
        beam, corpus, stage = self.beam, self.corpus, str(self.stage)
        n, first_doc, starts, config = corpus.num_parts(), self.first_doc, self.starts, self.config
        self._run(lambda p: (p | "parts" >> beam.Create(range(n))
                             | "route" >> beam.FlatMap(_route_part, corpus, first_doc, starts)
                             | "chunks" >> beam.GroupByKey()
                             | "encode" >> beam.Map(_encode_staged, config, starts, stage)))
        for chunk in range(len(starts)):
            yield _unstage(_load(self.stage / f"chunk-{chunk:08d}.npz"), config["format"])

    def close(self) -> None:
        """Remove the staged files (this run's own folder)."""
        if self.stage.exists():
            self.stage.rmtree()
