"""``torch.nn.utils.rnn`` helpers for padded batches of sequences (``PackedSequence`` is not supported).

Imports ``ops.shape``.
"""
from __future__ import annotations

from ...ops.shape import pad, stack

__all__ = ["pad_sequence", "unpad_sequence"]


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stack tensors of shape ``(L_i, *)`` into ``(L_max, B, *)`` (``batch_first``: ``(B, L_max, *)``), padded."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        extra = longest - s.shape[0]
        widths = [0, 0] * (s.ndim - 1) + ([0, extra] if padding_side == "right" else [extra, 0])
        padded.append(pad(s, widths, value=padding_value) if extra else s)
    return stack(padded, 0 if batch_first else 1)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of sequences ``pad_sequence`` stacked, cut back to ``lengths``."""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    lengths = lengths.tolist() if hasattr(lengths, "tolist") else list(lengths)
    return [seq[:int(n)] for seq, n in zip(padded_sequences, lengths)]
