"""Model FLOPs for MFU (Kaplan et al.; PaLM appendix B)."""

from __future__ import annotations

from jaxbert.model.config import BertConfig

# Peak dense bf16 TFLOP/s by accelerator, for MFU.
# Order matters: the first name found in device_kind wins ("TPU v5 lite" is a v5e).
PEAK_TFLOPS = {"TPU v3": 123, "TPU v4": 275, "TPU v5 lite": 197, "TPU v5e": 197, "TPU v5p": 459,
               "TPU v5": 459, "A100": 312, "H100": 989, "H200": 989}


def non_embedding_params(cfg: BertConfig) -> int:
    """Matmul weights of the encoder layers: 4 H^2 (Q, K, V, O) + 2 H I per layer."""
    H, I = cfg.hidden_size, cfg.intermediate_size
    return cfg.num_hidden_layers * (4 * H * H + 2 * H * I)


def train_flops_per_token(cfg: BertConfig, seq_len: int, head_fraction: float = 1.0) -> float:
    """6 N + 12 L H T + 6 (H V + H^2) f: forward and backward of one token.

    head_fraction f is 1 when the MLM head runs at every position, and the
    share of gathered positions (M / T) when only masked positions go through it.
    """
    H, V, L = cfg.hidden_size, cfg.vocab_size, cfg.num_hidden_layers
    return (6 * non_embedding_params(cfg) + 12 * L * H * seq_len
            + 6 * (H * V + H * H) * head_fraction)


def forward_flops_per_token(cfg: BertConfig, seq_len: int, head_fraction: float = 1.0) -> float:
    """A third of the training FLOPs: the forward pass alone."""
    return train_flops_per_token(cfg, seq_len, head_fraction) / 3


def peak_flops(device_kind: str) -> float | None:
    """Peak bf16 FLOP/s of a known accelerator from its device_kind string, else None."""
    for name, tflops in PEAK_TFLOPS.items():
        if name.lower().replace(" ", "") in device_kind.lower().replace(" ", ""):
            return tflops * 1e12
    return None
