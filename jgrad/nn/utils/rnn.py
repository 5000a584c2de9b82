"""``torch.nn.utils.rnn``: padded batches of sequences (``pad_sequence``, ``unpad_sequence``) and packed ones
(``PackedSequence``, ``pack_padded_sequence``, ``pad_packed_sequence``, ``pack_sequence``, ``unpack_sequence``).

A ``PackedSequence`` holds PyTorch's fields: ``data`` (the time steps of every sequence, longest first, step
by step), ``batch_sizes`` (an int64 tensor: how many sequences are still running at each step) and the
``sorted_indices`` / ``unsorted_indices`` permutations. Packing and unpacking are one ``index_select`` each, with
the index built on the host from the lengths (which PyTorch also requires on the CPU), so gradients flow
through both. RNN, LSTM and GRU accept a ``PackedSequence`` (``nn.rnn``).

Imports ``ops.creation`` and ``ops.shape``.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ...ops.creation import full, tensor
from ...ops.shape import cat, pad, stack

__all__ = ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence", "unpad_sequence",
           "pack_sequence", "unpack_sequence", "invert_permutation"]


class PackedSequence(namedtuple("PackedSequence_", ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])):
    """A batch of variable-length sequences, packed (build it with ``pack_padded_sequence``/``pack_sequence``)."""

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None and sorted_indices is not None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:  # PackedSequence(data, batch_sizes) given as one tuple, as PyTorch allows
            data, batch_sizes = data
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def _with_data(self, data):
        return type(self)(data, self.batch_sizes, self.sorted_indices, self.unsorted_indices)

    def to(self, *args, **kwargs):
        """The same sequence with ``data`` (and the index tensors, but not ``batch_sizes``) moved/cast by ``Tensor.to``."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        idx = [None if t is None else t.to(device=data.device) for t in (self.sorted_indices, self.unsorted_indices)]
        return type(self)(data, self.batch_sizes, *idx)

    def cpu(self):
        return self.to("cpu")

    def float(self):
        return self._with_data(self.data.float())

    def double(self):
        return self._with_data(self.data.double())

    def half(self):
        return self._with_data(self.data.half())

    @property
    def is_cuda(self):
        return self.data.is_cuda


def invert_permutation(permutation):
    """The inverse permutation (None stays None)."""
    if permutation is None:
        return None
    p = np.asarray(permutation.tolist(), np.int64)
    inv = np.empty_like(p)
    inv[p] = np.arange(p.size)
    return tensor(inv, device=permutation.device)


def _host_sizes(batch_sizes):
    return np.asarray(batch_sizes.tolist() if hasattr(batch_sizes, "tolist") else batch_sizes, np.int64)


def _padded_to_packed(padded, batch_sizes):
    """Time-major ``padded`` (T, B, *) -> packed ``data`` (sum(batch_sizes), *)."""
    bs = _host_sizes(batch_sizes)
    b = padded.shape[1]
    idx = np.concatenate([t * b + np.arange(n) for t, n in enumerate(bs)])
    flat = padded.reshape((-1,) + tuple(padded.shape[2:]))
    return flat.index_select(0, tensor(idx, device=padded.device))


def _packed_to_padded(data, batch_sizes, padding_value=0.0, total_length=None):
    """Packed ``data`` -> (time-major padded (T, B, *), mask (T, B): the steps that exist)."""
    bs = _host_sizes(batch_sizes)
    t_max, b = len(bs), int(bs[0])
    steps = total_length if total_length is not None else t_max
    mask = np.arange(b)[None, :] < np.concatenate([bs, np.zeros(steps - t_max, np.int64)])[:, None]
    offsets = np.concatenate([[0], np.cumsum(bs)[:-1]])
    idx = np.full((steps, b), data.shape[0], np.int64)  # missing steps read the appended padding row
    for t, n in enumerate(bs):
        idx[t, :n] = offsets[t] + np.arange(n)
    rows = cat([data, full((1,) + tuple(data.shape[1:]), padding_value, dtype=data.dtype, device=data.device)], 0)
    padded = rows.index_select(0, tensor(idx.reshape(-1), device=data.device))
    return padded.reshape((steps, b) + tuple(data.shape[1:])), tensor(mask, device=data.device)


def _lengths(lengths):
    if hasattr(lengths, "tolist"):
        lengths = lengths.tolist()
    return np.asarray(lengths, np.int64).reshape(-1)


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Pack a padded batch (T, B, *) (``batch_first``: (B, T, *)) of sequences of ``lengths``."""
    n = _lengths(lengths)
    if enforce_sorted:
        if np.any(n[:-1] < n[1:]):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
                               "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to "
                               "sidestep this requirement if you do not need ONNX exportability.")
        sorted_indices = None
    else:
        order = np.argsort(-n, kind="stable")
        n = n[order]
        sorted_indices = tensor(order, device=input.device)
        input = input.index_select(0 if batch_first else 1, sorted_indices)
    if n.size and n[-1] <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' that "
                           "is <= 0")
    if batch_first:
        input = input.transpose(0, 1)
    if n.size != input.shape[1]:
        raise ValueError(f"Expected `len(lengths)` to be equal to batch_size, but got {n.size} "
                         f"(batch_size={input.shape[1]})")
    if n[0] > input.shape[0]:
        raise RuntimeError(f"Expected a sequence of length at most {input.shape[0]}, but got lengths {n.tolist()}")
    batch_sizes = (n[None, :] > np.arange(n[0])[:, None]).sum(1)
    return PackedSequence(_padded_to_packed(input, batch_sizes), tensor(batch_sizes), sorted_indices)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """Undo ``pack_padded_sequence``: (padded batch, lengths (int64, in the batch's original order))."""
    bs = _host_sizes(sequence.batch_sizes)
    if total_length is not None:
        if total_length < len(bs):
            raise ValueError("Expected total_length to be at least the length of the longest sequence in input, but "
                             f"got total_length={total_length} and max sequence length being {len(bs)}")
    padded, _ = _packed_to_padded(sequence.data, bs, padding_value, total_length)
    lengths = (bs[None, :] > np.arange(bs[0])[:, None]).sum(1)
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(1, sequence.unsorted_indices)
        lengths = lengths[np.asarray(sequence.unsorted_indices.tolist(), np.int64)]
    return (padded.transpose(0, 1) if batch_first else padded), tensor(lengths)


def pack_sequence(sequences, enforce_sorted=True):
    """Pack a list of tensors (L_i, *) (longest first unless ``enforce_sorted=False``)."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """Undo ``pack_sequence``: the list of sequences, in their original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)


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
