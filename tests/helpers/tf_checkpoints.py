"""A tiny original-format TensorFlow BERT checkpoint: its variables, and how it was made.

``tf_variables`` gives the variables (names as google-research/bert saves them,
values from a NumPy seed, so they can be checked without TensorFlow).
``write_tf_checkpoint`` writes them with TensorFlow's own Saver (needs
tensorflow-cpu) and ``reference_outputs`` loads that checkpoint with
transformers' ``load_tf_weights_in_bert``. tests/fixtures/tf_bert is what these
wrote; regenerate it with ``python tests/helpers/tf_checkpoints.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tf_bert"
CONFIG = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
          "hidden_size": 8, "initializer_range": 0.02, "intermediate_size": 16, "max_position_embeddings": 16,
          "num_attention_heads": 2, "num_hidden_layers": 2, "type_vocab_size": 2, "vocab_size": 32}
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(27)]
# Variables that also get Adam slots in the fixture (the releases carry them for every weight).
WITH_SLOTS = ("bert/embeddings/LayerNorm/gamma", "cls/predictions/output_bias")


def tf_variables(seed: int = 0) -> dict[str, np.ndarray]:
    """name -> float32 value of every BertForPreTraining variable, plus Adam slots and global_step."""
    c, rng = CONFIG, np.random.default_rng(seed)
    H, I, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    shapes = {"bert/embeddings/word_embeddings": (V, H),
              "bert/embeddings/position_embeddings": (c["max_position_embeddings"], H),
              "bert/embeddings/token_type_embeddings": (c["type_vocab_size"], H),
              "bert/embeddings/LayerNorm/gamma": (H,), "bert/embeddings/LayerNorm/beta": (H,)}
    for i in range(c["num_hidden_layers"]):
        p = f"bert/encoder/layer_{i}"
        for name in ("query", "key", "value"):
            shapes[f"{p}/attention/self/{name}/kernel"] = (H, H)  # TF kernels are [in, out]
            shapes[f"{p}/attention/self/{name}/bias"] = (H,)
        shapes.update({f"{p}/attention/output/dense/kernel": (H, H), f"{p}/attention/output/dense/bias": (H,),
                       f"{p}/attention/output/LayerNorm/gamma": (H,), f"{p}/attention/output/LayerNorm/beta": (H,),
                       f"{p}/intermediate/dense/kernel": (H, I), f"{p}/intermediate/dense/bias": (I,),
                       f"{p}/output/dense/kernel": (I, H), f"{p}/output/dense/bias": (H,),
                       f"{p}/output/LayerNorm/gamma": (H,), f"{p}/output/LayerNorm/beta": (H,)})
    shapes.update({"bert/pooler/dense/kernel": (H, H), "bert/pooler/dense/bias": (H,),
                   "cls/predictions/transform/dense/kernel": (H, H), "cls/predictions/transform/dense/bias": (H,),
                   "cls/predictions/transform/LayerNorm/gamma": (H,),
                   "cls/predictions/transform/LayerNorm/beta": (H,),
                   "cls/predictions/output_bias": (V,),
                   "cls/seq_relationship/output_weights": (2, H),  # [out, in], unlike the kernels
                   "cls/seq_relationship/output_bias": (2,)})
    out = {}
    for name, shape in shapes.items():
        value = rng.normal(0.0, 0.5, shape).astype(np.float32)
        if name.endswith("gamma"):
            value += 1.0
        out[name] = value
    for name in WITH_SLOTS:
        out[f"{name}/adam_m"] = rng.normal(0.0, 0.01, out[name].shape).astype(np.float32)
        out[f"{name}/adam_v"] = rng.uniform(0.0, 1e-4, out[name].shape).astype(np.float32)
    out["global_step"] = np.array(1000, np.int64)
    return out


def write_tf_checkpoint(folder: Path, seed: int = 0) -> Path:
    """bert_config.json, vocab.txt and bert_model.ckpt.{index,data-00000-of-00001}, by TensorFlow's Saver."""
    import tensorflow as tf
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bert_config.json").write_text(json.dumps(CONFIG, indent=2, sort_keys=True) + "\n")
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in VOCAB))
    graph = tf.Graph()
    with graph.as_default():
        variables = [tf.compat.v1.Variable(v, name=n) for n, v in tf_variables(seed).items()]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, str(folder / "bert_model.ckpt"), write_meta_graph=False)
    (folder / "checkpoint").unlink(missing_ok=True)  # the Saver's bookkeeping file; not part of a release
    return folder / "bert_model.ckpt"


def reference_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    ids = rng.integers(5, CONFIG["vocab_size"], (2, 9))
    ids[:, 0] = 2
    types = np.zeros_like(ids)
    types[:, 5:] = 1
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    ids[1, 6:] = 0
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def reference_outputs(prefix: Path) -> dict[str, np.ndarray]:
    """transformers' own TF conversion (load_tf_weights_in_bert, needs TensorFlow) on reference_inputs."""
    import torch
    import transformers
    model = transformers.BertForPreTraining(transformers.BertConfig(**CONFIG))
    transformers.load_tf_weights_in_bert(model, model.config, str(prefix))
    model.eval()
    inputs = reference_inputs()
    with torch.no_grad():
        out = model(**{k: torch.tensor(v) for k, v in inputs.items()}, output_hidden_states=True)
    return dict(inputs, prediction_logits=out.prediction_logits.numpy(),
                seq_relationship_logits=out.seq_relationship_logits.numpy(),
                last_hidden_state=out.hidden_states[-1].numpy())


if __name__ == "__main__":
    prefix = write_tf_checkpoint(FIXTURE)
    np.savez(FIXTURE / "reference.npz", **reference_outputs(prefix))
    print(sorted(p.name for p in FIXTURE.iterdir()))


# ---- a tensor bundle written from the format alone (no TensorFlow, no code shared with the reader) ----

def _pb_varint(n: int) -> bytes:
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        out += bytes([low | (0x80 if n else 0)])
        if not n:
            return out


def _pb_field(number: int, value) -> bytes:
    """A varint field (int) or a length-delimited one (bytes) of a protobuf message."""
    if isinstance(value, int):
        return _pb_varint(number << 3) + _pb_varint(value)
    return _pb_varint(number << 3 | 2) + _pb_varint(len(value)) + value


def write_bundle(prefix: Path, variables: dict[str, np.ndarray]) -> Path:
    """``prefix.index`` + ``prefix.data-00000-of-00001`` holding ``variables`` (float32 / int64), laid out as
    TensorFlow's BundleWriter does: the tensors' bytes back to back in name order, an SSTable index (one data
    block with the header under the empty key, one index block, the 48-byte footer), masked crc32c everywhere."""
    from tests.helpers.tfevents import masked_crc
    dtypes = {np.dtype(np.float32): 1, np.dtype(np.int64): 9}
    data, rows = b"", [(b"", _pb_field(1, 1))]  # BundleHeaderProto: num_shards 1, little endian
    for name in sorted(variables):
        raw = np.ascontiguousarray(variables[name]).tobytes()
        shape = b"".join(_pb_field(2, _pb_field(1, d)) for d in variables[name].shape)
        entry = (_pb_field(1, dtypes[variables[name].dtype]) + _pb_field(2, shape) + _pb_field(4, len(data))
                 + _pb_field(5, len(raw)) + _pb_varint(6 << 3 | 5) + masked_crc(raw).to_bytes(4, "little"))
        rows.append((name.encode(), entry))
        data += raw
    out = b""

    def block(pairs) -> bytes:  # every key written whole (no shared prefix), one restart point at 0
        nonlocal out
        body = b"".join(_pb_varint(0) + _pb_varint(len(k)) + _pb_varint(len(v)) + k + v for k, v in pairs)
        body += (0).to_bytes(4, "little") + (1).to_bytes(4, "little")
        handle = _pb_varint(len(out)) + _pb_varint(len(body))
        out += body + b"\0" + masked_crc(body + b"\0").to_bytes(4, "little")
        return handle

    data_handle = block(rows)
    meta_handle = block([])
    index_handle = block([(rows[-1][0] + b"\xff", data_handle)])
    handles = meta_handle + index_handle
    prefix.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{prefix}.data-00000-of-00001").write_bytes(data)
    Path(f"{prefix}.index").write_bytes(out + handles + b"\0" * (40 - len(handles))
                                        + (0xdb4775248b80fb57).to_bytes(8, "little"))
    return prefix
