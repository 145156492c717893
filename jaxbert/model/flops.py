"""Model FLOPs for MFU: 6 N + 12 L H T + 6 (H V + H^2) f per trained token (Kaplan et al.; PaLM appendix B).

L T is the keys a query attends summed over the layers: a family with sliding-window layers
(ModernBERT) counts only the window there."""

from __future__ import annotations

from jaxbert.model.config import BertConfig
from jaxbert.model.families import family_of


def non_embedding_params(cfg: BertConfig) -> int:
    """Matmul weights of the encoder layers: 4 H^2 (Q, K, V, O) + 2 H I per layer, or the family's own count."""
    own = family_of(cfg).non_embedding_params
    if own is not None:
        return own(cfg)
    H, I = cfg.hidden_size, cfg.intermediate_size
    return cfg.num_hidden_layers * (4 * H * H + 2 * H * I)


def attended_positions(cfg: BertConfig, seq_len: int) -> int:
    """Keys a query attends, summed over the layers: L * T, or the family's own count."""
    own = family_of(cfg).attended_positions
    return own(cfg, seq_len) if own is not None else cfg.num_hidden_layers * seq_len


def train_flops_per_token(cfg: BertConfig, seq_len: int, head_fraction: float = 1.0) -> float:
    """6 N + 12 L H T + 6 (H V + H^2) f: forward and backward of one token.

    head_fraction f is 1 when the MLM head runs at every position, and the
    share of gathered positions (M / T) when only masked positions go through it.
    """
    H, V = cfg.hidden_size, cfg.vocab_size
    return (6 * non_embedding_params(cfg) + 12 * H * attended_positions(cfg, seq_len)
            + 6 * (H * V + H * H) * head_fraction)


def forward_flops_per_token(cfg: BertConfig, seq_len: int, head_fraction: float = 1.0) -> float:
    """A third of the training FLOPs: the forward pass alone."""
    return train_flops_per_token(cfg, seq_len, head_fraction) / 3
