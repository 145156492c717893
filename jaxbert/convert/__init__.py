"""Checkpoint conversion: Hugging Face / PyTorch / Flax msgpack <-> jaxbert params.

``from_pretrained`` / ``save_pretrained`` are the user-facing calls;
``state_dict_to_params`` / ``params_to_state_dict`` are the pure mappings
(through the key table in ``table.py``) that other tools build on.
"""

from jaxbert.convert.pretrained import convert, from_pretrained, infer_class, load_checkpoint, resolve_dtype, save_pretrained
from jaxbert.convert.load import match_keys, state_dict_to_params
from jaxbert.convert.readers import open_source, tensor_to_numpy, torch_load
from jaxbert.convert.result import ConversionError, ConversionReport, ConversionWarning
from jaxbert.model.keys import Entry
from jaxbert.model.bert.table import Table
from jaxbert.workdir import is_workdir, tokenizer_path
from jaxbert.convert.writers import iter_state_dict, params_to_state_dict, write_hf, write_jaxbert

__all__ = [
    "ConversionError", "ConversionReport", "ConversionWarning", "Entry", "Table", "convert",
    "from_pretrained", "infer_class", "is_workdir", "iter_state_dict", "load_checkpoint",
    "match_keys", "open_source", "params_to_state_dict", "resolve_dtype", "save_pretrained",
    "state_dict_to_params", "tensor_to_numpy", "tokenizer_path", "torch_load", "write_hf", "write_jaxbert",
]
