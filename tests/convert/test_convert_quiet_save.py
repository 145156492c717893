"""`jaxbert convert ... --to jaxbert` prints what it did and no Orbax note naming a temporary folder
(issue 50.23): that one absl warning is filtered around jaxbert's own save, and only there."""

from __future__ import annotations

import logging

import pytest

from jaxbert.cli.main import main
from tests.helpers.hf_models import tiny_hf_model

pytest.importorskip("torch")


def test_convert_to_jaxbert_prints_no_ocdbt_merge_note(tmp_path, capfd, caplog):
    tiny_hf_model("BertModel").save_pretrained(tmp_path / "hf")
    capfd.readouterr()
    with caplog.at_level(logging.INFO, logger="absl"):
        assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "jb"), "--to", "jaxbert"]) == 0
    out, err = capfd.readouterr()
    assert f"wrote jaxbert directory {tmp_path / 'jb'}" in out
    assert "OCDBT" not in err and ".tmp-" not in err, err
    assert not [r for r in caplog.records if "OCDBT" in r.getMessage()]
    # the filter is gone once the save is done: absl's other warnings still reach the log
    with caplog.at_level(logging.WARNING, logger="absl"):
        logging.getLogger("absl").warning("Skipping merge of OCDBT checkpoints: a later note")
    assert [r.getMessage() for r in caplog.records][-1] == "Skipping merge of OCDBT checkpoints: a later note"
