"""With transformers 5 (which the [torch] extra allows): convert both ways bit for bit, parity passes.

The test extra installs transformers 5, so this runs in README's test command; `.ci/run` sets
JAXBERT_EXPECT_TRANSFORMERS5=1 for that run, which turns the skip into a failure should pip resolve a 4.x.
Elsewhere (a venv with transformers 4.x, as .ci/run's second one) it skips.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
if int(transformers.__version__.split(".")[0]) < 5:
    if os.environ.get("JAXBERT_EXPECT_TRANSFORMERS5"):
        raise RuntimeError(f"JAXBERT_EXPECT_TRANSFORMERS5 is set but transformers is {transformers.__version__}")
    pytest.skip(f"needs transformers 5 (README's test command installs it; this venv has {transformers.__version__})",
                allow_module_level=True)

import torch  # noqa: E402

from tests.helpers.hf_models import tiny_hf_model  # noqa: E402
from jaxbert.cli.main import main  # noqa: E402


def test_transformers5_checkpoint_round_trip_is_bit_exact_and_parity_passes(tmp_path, capsys):
    hf = tiny_hf_model("BertForMaskedLM", seed=5)
    hf.save_pretrained(tmp_path / "hf")
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "jx"), "--to", "jaxbert"]) == 0
    assert main(["convert", str(tmp_path / "jx"), str(tmp_path / "back"), "--to", "hf"]) == 0
    back = transformers.BertForMaskedLM.from_pretrained(tmp_path / "back").eval()
    theirs, ours = hf.state_dict(), back.state_dict()
    assert set(theirs) == set(ours)
    for key, value in theirs.items():
        assert torch.equal(value, ours[key]), key
    capsys.readouterr()
    assert main(["parity", str(tmp_path / "hf")]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "mlm logits" in out
    ids = np.array([[2, 7, 9, 11, 4]])
    with torch.no_grad():
        assert torch.equal(hf(torch.tensor(ids)).logits, back(torch.tensor(ids)).logits)
