"""Model FLOPs for MFU: 6 N + 12 L H T + 6 (H V + H^2) f per trained token (Kaplan et al.; PaLM appendix B).

L T is the keys a query attends summed over the layers: a family with sliding-window layers
(ModernBERT) counts only the window there."""

from __future__ import annotations

from jaxbert.model.bert.config import BertConfig
from jaxbert.model.families import family_of


def non_embedding_params(cfg: BertConfig) -> int:
    """Matmul weights of the encoder layers, as the family counts them (BERT: 4 H^2 + 2 H I per layer)."""
    return family_of(cfg).non_embedding_params(cfg)


def attended_positions(cfg: BertConfig, seq_len: int) -> int:
    """Keys a query attends, summed over the layers, as the family counts them (BERT: L * T)."""
    return family_of(cfg).attended_positions(cfg, seq_len)


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
