"""Param-tree helpers: flatten/unflatten and the scanned-layout test, on hand-made trees."""

import numpy as np

from jaxbert.model.params import flatten, is_scanned, scan_params, stacked, unflatten, unscan_params


def _tree():
    layer = lambda v: {"dense": {"kernel": np.full((2, 3), v), "bias": np.full(3, v)}}  # noqa: E731
    return {"bert": {"encoder": {"layer": {"0": layer(0.0), "1": layer(1.0)}}, "pooler": {"b": np.ones(1)}}}


def test_flatten_paths_and_round_trip():
    tree = _tree()
    flat = flatten(tree)
    assert sorted(flat)[0] == ("bert", "encoder", "layer", "0", "dense", "bias")
    assert len(flat) == 5
    assert set(flatten(tree, sep="/")) == {"/".join(p) for p in flat}
    back = unflatten(flatten(tree, sep="/"), sep="/")
    assert all(np.array_equal(back_v, flat[p]) for p, back_v in flatten(back).items())
    assert unflatten({("a", "b"): 1, ("a", "c"): 2}) == {"a": {"b": 1, "c": 2}}


def test_is_scanned_on_both_layouts():
    tree = _tree()
    assert not is_scanned(tree) and not stacked(tree["bert"]["encoder"]["layer"])
    scanned = scan_params(tree)
    assert is_scanned(scanned) and is_scanned({"params": scanned})
    kernel = scanned["bert"]["encoder"]["layer"]["dense"]["kernel"]
    assert kernel.shape == (2, 2, 3) and float(kernel[1, 0, 0]) == 1.0
    assert not is_scanned(unscan_params(scanned)) and not is_scanned({"embeddings": {"x": np.ones(1)}})
