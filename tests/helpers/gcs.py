"""A Google Cloud Storage emulator (PyPI gcp-storage-emulator) on 127.0.0.1 for the tests.

One in-memory server per test session, on a free loopback port, stopped at exit. The
`gcs` fixture points gcsfs (STORAGE_EMULATOR_HOST) and TensorStore/Orbax
(TENSORSTORE_GCS_HTTP_URL) at it, in this process and in the children the tests start,
and returns a GcsEmulator whose `url(name)` is a fresh gs:// prefix in its bucket.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest

BUCKET = "jaxbert-test"

# The emulator's media downloads lack the x-goog-generation header that GCS sends and that
# TensorStore reads back (OCDBT's manifest updates are conditional on it); this wrapper adds it.
_SERVER = """
import sys
from gcp_storage_emulator.handlers import objects
plain = objects.download
def download(request, response, storage, *args, **kwargs):
    try:
        obj = storage.get_file_obj(request.params["bucket_name"], request.params["object_id"])
        response["x-goog-generation"] = str(obj["generation"])
        response["x-goog-metageneration"] = str(obj["metageneration"])
    except Exception:
        pass  # not found: the plain handler answers 404
    return plain(request, response, storage, *args, **kwargs)
objects.download = download
from gcp_storage_emulator.__main__ import main
main(sys.argv[1:])
"""


class GcsEmulator:
    def __init__(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, "start", "--host", "127.0.0.1", "--port",
             str(self.port), "--in-memory", "--default-bucket", BUCKET, "-q"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("the GCS emulator did not start")
                time.sleep(0.1)
        self.env = {"STORAGE_EMULATOR_HOST": self.endpoint, "TENSORSTORE_GCS_HTTP_URL": self.endpoint,
                    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
        os.environ.update(self.env)

    def url(self, name: str) -> str:
        return f"gs://{BUCKET}/{name}-{uuid.uuid4().hex[:8]}"

    def fs(self):
        import fsspec
        fs = fsspec.filesystem("gs")
        fs.invalidate_cache()
        return fs

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


_EMULATOR: GcsEmulator | None = None


@pytest.fixture(scope="session")
def gcs() -> GcsEmulator:
    global _EMULATOR
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"  # read when gcsfs is imported
    pytest.importorskip("gcsfs")
    pytest.importorskip("gcp_storage_emulator")
    if _EMULATOR is None:
        _EMULATOR = GcsEmulator()
        atexit.register(_EMULATOR.stop)
    return _EMULATOR
