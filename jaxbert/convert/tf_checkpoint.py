"""Original TensorFlow BERT checkpoints (google-research/bert), read without TensorFlow.

A checkpoint ``bert_model.ckpt`` is a *tensor bundle*: ``bert_model.ckpt.index``
is a table (TensorFlow's LevelDB-style SSTable) from variable name to a
``BundleEntryProto`` (dtype, shape, shard, offset, size), and
``bert_model.ckpt.data-00000-of-00001`` holds the raw tensor bytes. This module
parses the table and the few proto fields it needs by hand, and names the
tensors as transformers' ``load_tf_weights_in_bert`` does
(``bert/encoder/layer_0/attention/self/query/kernel`` ->
``bert.encoder.layer.0.attention.self.query.weight``, transposed), so the rest
of the converter treats it as any PyTorch state dict. A family whose checkpoints
are named otherwise gives its own map (``Family.tf_names``: ELECTRA's pretraining
bundles hold the discriminator and the generator), applied by ``for_model``.
"""

from __future__ import annotations

import math
import struct
from glob import escape as glob_escape
from pathlib import Path
from typing import Iterator

import ml_dtypes
import numpy as np

from jaxbert.convert.crc32c import crc32c, mask
from jaxbert.convert.result import ConversionError
from jaxbert.model.bert.tf_names import SKIPPED_PARTS, tf_name_to_key  # noqa: F401 (BERT's names, the default)
from jaxbert.model.families import family_of

INDEX_SUFFIX = ".index"
_MAGIC = 0xdb4775248b80fb57  # the table format's footer magic
_FOOTER = 48
_MAX_SHARDS = 100_000  # the data files' names count shards in five digits
# tensorflow/core/framework/types.proto DataType -> NumPy
_DTYPES = {1: np.float32, 2: np.float64, 3: np.int32, 4: np.uint8, 5: np.int16, 6: np.int8, 9: np.int64,
           10: np.bool_, 14: ml_dtypes.bfloat16, 17: np.uint16, 19: np.float16, 22: np.uint32, 23: np.uint64}

# ---- protobuf wire format (only varint, fixed and length-delimited fields occur) ----

def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a serialized message; value is an int or the raw bytes."""
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = struct.unpack_from("<Q", buf, pos)[0], pos + 8
        elif wire == 5:
            value, pos = struct.unpack_from("<I", buf, pos)[0], pos + 4
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, value


def parse_entry(buf: bytes) -> dict:
    """BundleEntryProto -> {dtype, shape, shard_id, offset, size, crc32c (masked, or None), slices}."""
    entry = {"dtype": 0, "shape": (), "shard_id": 0, "offset": 0, "size": 0, "crc32c": None, "slices": 0}
    for number, value in _fields(buf):
        if number == 1:
            entry["dtype"] = value
        elif number == 2:  # TensorShapeProto: repeated Dim dim = 2 { int64 size = 1 }
            dims = [dict(_fields(d)).get(1, 0) for n, d in _fields(value) if n == 2]
            entry["shape"] = tuple(dims)
        elif number in (3, 4, 5):
            entry[{3: "shard_id", 4: "offset", 5: "size"}[number]] = value
        elif number == 6:
            entry["crc32c"] = value
        elif number == 7:
            entry["slices"] += 1
    return entry


# ---- the table (SSTable) ----------------------------------------------------------

def _block(data: bytes, handle: bytes, where: str) -> bytes:
    offset, pos = _varint(handle, 0)
    size, _ = _varint(handle, pos)
    if offset + size + 5 > len(data):
        raise ValueError(f"{where}: block [{offset}, +{size}] runs past the end of the file")
    # trailer: compression type, then the masked crc32c of the block and that type byte
    (stored,) = struct.unpack_from("<I", data, offset + size + 1)
    if mask(crc32c(data[offset:offset + size + 1])) != stored:
        raise ValueError(f"the table block at byte {offset} ({size} bytes) fails its crc32c checksum: corrupt")
    if data[offset + size] != 0:
        raise ValueError(f"{where}: compressed blocks are not supported (type {data[offset + size]})")
    return data[offset:offset + size]


def _block_entries(block: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Prefix-compressed (key, value) pairs of one block, before its restart array."""
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    end = len(block) - 4 * (num_restarts + 1)
    pos, key = 0, b""
    while pos < end:
        shared, pos = _varint(block, pos)
        unshared, pos = _varint(block, pos)
        vlen, pos = _varint(block, pos)
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        yield key, block[pos:pos + vlen]
        pos += vlen


def read_index(path: Path) -> tuple[dict, dict]:
    """(header fields, {tensor name: entry dict}) of a bundle's .index file."""
    data = path.read_bytes()
    try:
        if len(data) < _FOOTER or struct.unpack_from("<Q", data, len(data) - 8)[0] != _MAGIC:
            raise ValueError("no table footer (not a TensorFlow checkpoint index)")
        footer = data[len(data) - _FOOTER:]
        _, pos = _varint(footer, _varint(footer, 0)[1])  # skip the metaindex handle
        index_handle = footer[pos:]
        header, entries = {}, {}
        for _, data_handle in _block_entries(_block(data, index_handle, str(path))):
            for key, value in _block_entries(_block(data, data_handle, str(path))):
                if key == b"":  # BundleHeaderProto: num_shards = 1, endianness = 2
                    header = {n: v for n, v in _fields(value) if n in (1, 2)}
                else:
                    entries[key.decode("utf-8")] = parse_entry(value)
    except (ValueError, struct.error, UnicodeDecodeError) as e:
        raise ConversionError(f"{path}: not a readable TensorFlow checkpoint index ({e})") from e
    return {"num_shards": header.get(1, 1), "big_endian": header.get(2, 0) == 1}, entries


def checkpoint_prefix(path: Path) -> Path | None:
    """The bundle prefix (``.../bert_model.ckpt``) for a folder, an .index file or a prefix; else None."""
    if path.is_dir():
        found = sorted(p for p in path.glob(f"*{INDEX_SUFFIX}") if p.is_file())
        if len(found) > 1:
            raise ConversionError(f"{path} holds several TensorFlow checkpoints ({', '.join(p.name for p in found)}); "
                                  "pass the one to read, e.g. DIR/model.ckpt-1000")
        return found[0].with_suffix("") if found else None
    if path.name.endswith(INDEX_SUFFIX) and path.is_file():
        return path.with_suffix("")
    if not path.exists() and path.with_name(path.name + INDEX_SUFFIX).is_file():
        return path
    return None


class TFCheckpointSource:
    """A TF bundle as (state-dict key, array in PyTorch layout) pairs; see convert.readers.Source.

    Every entry that will be read is checked against its data file when opened (before
    anything is allocated for it), and each tensor's bytes against the crc32c that
    TensorFlow stored for them when read.
    """

    def __init__(self, prefix: Path):
        self.prefix = prefix
        self.description = str(prefix)
        self.meta: dict = {}
        header, entries = read_index(prefix.with_name(prefix.name + INDEX_SUFFIX))
        self.big_endian = header["big_endian"]
        self.files = self._data_files(header["num_shards"])
        self._entries, self._sizes = entries, {i: f.stat().st_size for i, f in self.files.items()}
        self._make_plan({name: tf_name_to_key(name) for name in entries})
        dir_ = prefix.parent
        cfg = next((dir_ / n for n in ("config.json", "bert_config.json") if (dir_ / n).is_file()), None)
        self.config_path = cfg

    def _make_plan(self, names: dict) -> None:
        """Which tensors to read and as what, from {TF name: (key or None, transpose?, why skipped)}; a name
        missing from ``names`` maps to nothing and is refused."""
        prefix, self.skipped, self._plan = self.prefix, [], {}
        for name in sorted(self._entries):
            entry = self._entries[name]
            if name not in names:
                raise ConversionError(f"{prefix}: the variable {name} maps to no weight of this model's layout; "
                                      "refusing rather than dropping it")
            key, transpose, why = names[name]
            if key is None:
                self.skipped.append((name, why))
            elif entry["slices"]:
                raise ConversionError(f"{prefix}: {name} is stored in slices (a partitioned variable); "
                                      "not supported")
            elif entry["dtype"] not in _DTYPES:
                self.skipped.append((name, f"TensorFlow dtype {entry['dtype']} is not a numeric tensor"))
            elif key in self._plan:
                raise ConversionError(f"{prefix}: {self._plan[key][0]} and {name} both map to {key}; "
                                      "one of them would be dropped")
            else:
                self._check_entry(name, entry, self._sizes)
                self._plan[key] = (name, entry, transpose)
        # declared shapes in PyTorch layout: checked against the model before anything is read
        self.shapes = {k: e["shape"][::-1] if t else e["shape"] for k, (_, e, t) in self._plan.items()}

    def for_model(self, config, model_class: str | None) -> "TFCheckpointSource":
        """Names the tensors as the config's family reads its TF checkpoints (Family.tf_names, for the class
        ``model_class`` or the one the config names); BERT's names where the family has no such map."""
        family = family_of(config)
        if family.tf_names is not None:
            name = model_class or family.infer_class(config, []) or ""
            self._make_plan(family.tf_names(sorted(self._entries), name))
        return self

    def _data_files(self, num_shards: int) -> dict[int, Path]:
        prefix = self.prefix
        present = sorted(p.name for p in prefix.parent.glob(f"{glob_escape(prefix.name)}.data-*-of-*"))
        if not 1 <= num_shards <= min(_MAX_SHARDS, max(len(present), 1)):
            raise ConversionError(f"{prefix}{INDEX_SUFFIX}: its header declares {num_shards} data shards, "
                                  f"but {len(present)} data files are present ({', '.join(present[:3]) or 'none'})")
        files = {i: prefix.with_name(f"{prefix.name}.data-{i:05d}-of-{num_shards:05d}") for i in range(num_shards)}
        for f in files.values():
            if not f.is_file():
                raise ConversionError(f"{prefix}: its data file {f.name} is missing")
        return files

    def _check_entry(self, name: str, entry: dict, sizes: dict[int, int]) -> None:
        """Shard, shape, byte count and extent of one entry, from the index alone."""
        dtype = np.dtype(_DTYPES[entry["dtype"]])
        shape, where = entry["shape"], f"{self.prefix}{INDEX_SUFFIX}: {name}"
        if entry["shard_id"] not in self.files:
            raise ConversionError(f"{where} is in data shard {entry['shard_id']}, but the checkpoint's shards are "
                                  f"0..{len(self.files) - 1} ({', '.join(f.name for f in self.files.values())})")
        if any(d >= 2**63 for d in shape):  # a negative int64 as the varint stores it
            raise ConversionError(f"{where} has a negative dimension in its shape")
        nbytes = math.prod(shape) * dtype.itemsize  # exact: Python integers do not overflow
        if nbytes >= 2**63 or nbytes != entry["size"]:
            raise ConversionError(f"{where}: {dtype.name} {list(shape)} needs {nbytes} bytes, "
                                  f"its entry holds {entry['size']}")
        path = self.files[entry["shard_id"]]
        if entry["offset"] + entry["size"] > sizes[entry["shard_id"]]:
            raise ConversionError(f"{path}: {name} runs past the end of the file ({entry['size']} bytes at "
                                  f"{entry['offset']}, the file has {sizes[entry['shard_id']]})")

    def keys(self) -> list[str]:
        return list(self._plan)

    def items(self) -> Iterator[tuple[str, np.ndarray]]:
        for key, (name, entry, transpose) in self._plan.items():
            yield key, self._read(name, entry, transpose)

    def _read(self, name: str, entry: dict, transpose: bool) -> np.ndarray:
        dtype = np.dtype(_DTYPES[entry["dtype"]])
        path = self.files[entry["shard_id"]]
        raw = np.fromfile(path, np.uint8, entry["size"], offset=entry["offset"])
        if raw.size != entry["size"]:
            raise ConversionError(f"{path}: {name} runs past the end of the file")
        if entry["crc32c"] is not None and mask(crc32c(raw)) != entry["crc32c"]:
            raise ConversionError(f"{path}: {name} fails its crc32c checksum (its bytes are not what "
                                  "TensorFlow wrote): corrupt checkpoint")
        array = raw.view(dtype.newbyteorder(">") if self.big_endian else dtype)
        array = array.astype(dtype, copy=False).reshape(entry["shape"])
        return array.T if transpose else array
