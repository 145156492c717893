"""A class jaxbert has and no transformers version has (DeBERTa-v3's discriminator) is refused by parity in one
line that says so and names the encoder class to compare instead; it is not told to upgrade transformers."""

import pytest

from jaxbert.errors import InputError
from jaxbert.model.deberta_v2.config import DebertaV2Config
from jaxbert.parity.compare import torch_model


def test_parity_on_jaxberts_own_class_names_the_encoder_to_compare_instead():
    config = DebertaV2Config(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=32)
    module = type("DebertaV2ForReplacedTokenDetection", (), {"config": config})()
    with pytest.raises(InputError) as e:
        torch_model(module, {})
    message = str(e.value)
    assert "jaxbert's own class" in message and "--model-class DebertaV2Model" in message
    assert "pip install" not in message and "\n" not in message
