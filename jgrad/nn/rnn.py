"""Recurrent layers: RNN, LSTM, GRU and their cells (``torch.nn``), PyTorch's parameters and equations.

Each layer and direction runs as one op whose jax forward is a ``lax.scan`` over time (one XLA
kernel, the input projection of every step done as one matmul before the scan); its gradient
comes from ``jax.vjp``. Gate order in the weights is PyTorch's: LSTM ``i, f, g, o``; GRU ``r, z, n``.
A ``PackedSequence`` runs padded, with a mask that holds each sequence's state after its last step.

Imports ``_dispatch``, ``_tensor``, ``nn.functional``, ``nn.init``, ``nn.module``, ``nn.parameter``,
``nn.utils.rnn`` and
the op library (``creation``, ``linalg``, ``shape``).
"""
from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp

from ..runtime._dispatch import Op, call
from ..core._tensor import Tensor
from ..ops import linalg
from ..ops.creation import empty, zeros
from ..ops.shape import cat, stack
from . import functional as F, init
from .module import Module
from .parameter import Parameter
from .utils.rnn import PackedSequence, _packed_to_padded, _padded_to_packed

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _mm(a, w):
    return jnp.matmul(a, w.T, precision=linalg._prec())


def _step(mode, xw, h, c, w_hh, b_hh, w_hr):
    """One time step from the input projection ``xw`` (bias included); returns (h, c)."""
    hw = _mm(h, w_hh)
    if b_hh is not None:
        hw = hw + b_hh
    if mode == "LSTM":
        i, f, g, o = jnp.split(xw + hw, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (_mm(h, w_hr) if w_hr is not None else h), c
    if mode == "GRU":
        xr, xz, xn = jnp.split(xw, 3, axis=-1)
        hr, hz, hn = jnp.split(hw, 3, axis=-1)
        r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
        n = jnp.tanh(xn + r * hn)
        return (1 - z) * n + z * h, c
    pre = xw + hw
    return (jnp.tanh(pre) if mode == "RNN_TANH" else jax.nn.relu(pre)), c


def _layer_fwd(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, mask, *, mode, reverse):
    """One layer and direction over a time-major sequence ``x`` (T, B, I): (outputs, h_T, c_T).

    ``mask`` (T, B) (a packed batch, padded): where False, the state passes unchanged and the output is 0, so
    each sequence's final state is that of its last step, in either direction."""
    xw = _mm(x, w_ih)
    if b_ih is not None:
        xw = xw + b_ih

    def body(carry, inp):
        xt, mt = inp
        h, c = _step(mode, xt, carry[0], carry[1], w_hh, b_hh, w_hr)
        if mt is None:
            return (h, c), h
        keep = mt[:, None]
        h = jnp.where(keep, h, carry[0])
        c = jnp.where(keep, c, carry[1]) if mode == "LSTM" else c
        return (h, c), jnp.where(keep, h, jnp.zeros((), h.dtype))

    carry0 = (h0, c0 if c0 is not None else jnp.zeros((), x.dtype))
    (h, c), ys = jax.lax.scan(body, carry0, (xw, mask), reverse=reverse)
    return (ys, h, c) if mode == "LSTM" else (ys, h)


_LAYER_OPS = {mode: Op(f"{name}Backward0", _layer_fwd, num_outputs=3 if mode == "LSTM" else 2)
              for mode, name in (("LSTM", "Lstm"), ("GRU", "Gru"), ("RNN_TANH", "RnnTanh"), ("RNN_RELU", "RnnRelu"))}


# ---- an LSTM layer that keeps its gates ---------------------------------------------------------------------------
# The layer ops above get their gradient from ``jax.vjp`` of the forward, which runs the forward scan again inside the
# backward: a third of an LSTM layer's time (0.6 of 1.8 ms for 20 steps of batch 8, width 64, on the 2-core CPU).
# An LSTM without projection or packing, and a GRU without packing, instead return each step's activated gates
# (and the LSTM's cell state) beside their outputs, as PyTorch's kernels keep a workspace, and their backward is
# one reverse scan over them.
def _lstm_fwd(x, h0, c0, w_ih, w_hh, b_ih, b_hh, *, reverse):
    """``_layer_fwd`` of an LSTM, also returning the activated gates ``[i, f, g, o]`` (T, B, 4H) and the cell
    states (T, B, H) of every step: (outputs, h_T, c_T, gates, cells)."""
    xw = _mm(x, w_ih)
    if b_ih is not None:
        xw = xw + b_ih

    def body(carry, xt):
        h, c = carry
        hw = _mm(h, w_hh)
        if b_hh is not None:
            hw = hw + b_hh
        i, f, g, o = jnp.split(xt + hw, 4, axis=-1)
        i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
        c = f * c + i * g
        h = o * jnp.tanh(c)
        return (h, c), (h, jnp.concatenate([i, f, g, o], -1), c)

    (h, c), (ys, gates, cells) = jax.lax.scan(body, (h0, c0), xw, reverse=reverse)
    return ys, h, c, gates, cells


def _lstm_bwd(ctx, g_ys, g_h, g_c, g_gates, g_cells):
    """The LSTM layer's gradients from its saved gates and cell states (one reverse scan, no forward again). The
    gates' and cells' own gradients (nonzero in a double backward, which differentiates through them) count too."""
    x, h0, c0, w_ih, w_hh, b_ih, b_hh = ctx.saved
    ys, _, _, gates, cells = ctx.outputs
    reverse = ctx.attrs["reverse"]
    zero = jnp.zeros((), ys.dtype)
    g_ys = jnp.broadcast_to(zero, ys.shape) if g_ys is None else g_ys
    g_h = jnp.broadcast_to(zero, h0.shape) if g_h is None else g_h
    g_c = jnp.broadcast_to(zero, c0.shape) if g_c is None else g_c
    # the state each step started from
    if reverse:
        h_prev = jnp.concatenate([ys[1:], h0[None]])
        c_prev = jnp.concatenate([cells[1:], c0[None]])
    else:
        h_prev = jnp.concatenate([h0[None], ys[:-1]])
        c_prev = jnp.concatenate([c0[None], cells[:-1]])

    def body(carry, inp):
        dh_next, dc_next = carry
        gy, gate, c, cp, g_gate, g_cell = inp
        i, f, g, o = jnp.split(gate, 4, axis=-1)
        dh = gy + dh_next
        tc = jnp.tanh(c)
        dc = dc_next + dh * o * (1 - tc * tc)
        if g_cell is not None:
            dc = dc + g_cell
        di, df, dg, do = dc * g, dc * cp, dc * i, dh * tc  # of the activated gates
        if g_gate is not None:
            gi, gf, gg, go = jnp.split(g_gate, 4, axis=-1)
            di, df, dg, do = di + gi, df + gf, dg + gg, do + go
        da = jnp.concatenate([di * i * (1 - i), df * f * (1 - f), dg * (1 - g * g), do * o * (1 - o)], -1)
        return (jnp.matmul(da, w_hh, precision=linalg._prec()), dc * f), da

    (dh0, dc0), da = jax.lax.scan(body, (g_h, g_c), (g_ys, gates, cells, c_prev, g_gates, g_cells),
                                  reverse=not reverse)
    prec = linalg._prec()
    dx = jnp.matmul(da, w_ih, precision=prec)
    dw_ih = jnp.einsum("tbg,tbi->gi", da, x, precision=prec)
    dw_hh = jnp.einsum("tbg,tbh->gh", da, h_prev, precision=prec)
    db = da.sum((0, 1))
    return (dx, dh0, dc0, dw_ih, dw_hh, db if b_ih is not None else None, db if b_hh is not None else None)


_LSTM_SAVING = Op("LstmBackward0", _lstm_fwd, _lstm_bwd, save=range(7), save_outputs=True, num_outputs=5)


def _gru_fwd(x, h0, w_ih, w_hh, b_ih, b_hh, *, reverse):
    """``_layer_fwd`` of a GRU, also returning each step's ``[r, z, n, h W_hn + b_hn]`` (T, B, 4H):
    (outputs, h_T, gates)."""
    xw = _mm(x, w_ih)
    if b_ih is not None:
        xw = xw + b_ih

    def body(h, xt):
        hw = _mm(h, w_hh)
        if b_hh is not None:
            hw = hw + b_hh
        xr, xz, xn = jnp.split(xt, 3, axis=-1)
        hr, hz, hn = jnp.split(hw, 3, axis=-1)
        r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
        n = jnp.tanh(xn + r * hn)
        h = (1 - z) * n + z * h
        return h, (h, jnp.concatenate([r, z, n, hn], -1))

    h, (ys, gates) = jax.lax.scan(body, h0, xw, reverse=reverse)
    return ys, h, gates


def _gru_bwd(ctx, g_ys, g_h, g_gates):
    """The GRU layer's gradients from its saved gates (one reverse scan), as ``_lstm_bwd``."""
    x, h0, w_ih, w_hh, b_ih, b_hh = ctx.saved
    ys, _, gates = ctx.outputs
    reverse = ctx.attrs["reverse"]
    zero = jnp.zeros((), ys.dtype)
    g_ys = jnp.broadcast_to(zero, ys.shape) if g_ys is None else g_ys
    g_h = jnp.broadcast_to(zero, h0.shape) if g_h is None else g_h
    h_prev = jnp.concatenate([ys[1:], h0[None]]) if reverse else jnp.concatenate([h0[None], ys[:-1]])

    def body(dh_next, inp):
        gy, gate, hp, g_gate = inp
        r, z, n, hn = jnp.split(gate, 4, axis=-1)
        dh = gy + dh_next
        dr, dz, dn, dhn = 0, dh * (hp - n), dh * (1 - z), 0  # of the activated gates and of h W_hn + b_hn
        if g_gate is not None:
            gr, gz, gn, ghn = jnp.split(g_gate, 4, axis=-1)
            dr, dz, dn, dhn = gr, dz + gz, dn + gn, ghn
        dan = dn * (1 - n * n)
        dar = (dr + dan * hn) * r * (1 - r)
        daz = dz * z * (1 - z)
        dhw = jnp.concatenate([dar, daz, dan * r + dhn], -1)
        dh_prev = dh * z + jnp.matmul(dhw, w_hh, precision=linalg._prec())
        return dh_prev, (jnp.concatenate([dar, daz, dan], -1), dhw)

    dh0, (dxw, dhw) = jax.lax.scan(body, g_h, (g_ys, gates, h_prev, g_gates), reverse=not reverse)
    prec = linalg._prec()
    dx = jnp.matmul(dxw, w_ih, precision=prec)
    dw_ih = jnp.einsum("tbg,tbi->gi", dxw, x, precision=prec)
    dw_hh = jnp.einsum("tbg,tbh->gh", dhw, h_prev, precision=prec)
    return (dx, dh0, dw_ih, dw_hh, dxw.sum((0, 1)) if b_ih is not None else None,
            dhw.sum((0, 1)) if b_hh is not None else None)


_GRU_SAVING = Op("GruBackward0", _gru_fwd, _gru_bwd, save=range(6), save_outputs=True, num_outputs=3)


def _cell_fwd(x, h, c, w_ih, w_hh, b_ih, b_hh, *, mode):
    xw = _mm(x, w_ih)
    if b_ih is not None:
        xw = xw + b_ih
    h, c = _step(mode, xw, h, c, w_hh, b_hh, None)
    return (h, c) if mode == "LSTM" else h


_CELL_OPS = {mode: Op(f"{name}CellBackward0", _cell_fwd, num_outputs=2 if mode == "LSTM" else 1)
             for mode, name in (("LSTM", "Lstm"), ("GRU", "Gru"), ("RNN_TANH", "RnnTanh"), ("RNN_RELU", "RnnRelu"))}


class RNNBase(Module):
    """The multi-layer, optionally bidirectional recurrent layer behind RNN, LSTM and GRU."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and "
                          f"num_layers={num_layers}", UserWarning, stacklevel=3)
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"hidden_size must be a positive integer, got {hidden_size!r}")
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise ValueError(f"num_layers must be a positive integer, got {num_layers!r}")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        gate = _GATES[mode] * hidden_size
        out = proj_size if proj_size > 0 else hidden_size
        dirs = 2 if bidirectional else 1
        self._flat_weights_names = []
        for layer in range(num_layers):
            layer_in = input_size if layer == 0 else out * dirs
            for direction in range(dirs):
                suffix = "_reverse" if direction == 1 else ""
                shapes = [("weight_ih", (gate, layer_in)), ("weight_hh", (gate, out))]
                if bias:
                    shapes += [("bias_ih", (gate,)), ("bias_hh", (gate,))]
                if proj_size > 0:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                for name, shape in shapes:
                    full = f"{name}_l{layer}{suffix}"
                    setattr(self, full, Parameter(empty(tuple(shape), device=device, dtype=dtype)))
                    self._flat_weights_names.append(full)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as PyTorch."""
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def flatten_parameters(self) -> None:
        """Accepted for PyTorch programs (``LSTM.flatten_parameters()`` after ``DataParallel`` or ``.to()``): cuDNN
        wants one contiguous weight buffer; jgrad's recurrent kernel takes the weights as they are."""

    @property
    def _flat_weights(self):
        return [getattr(self, n) for n in self._flat_weights_names]

    @property
    def all_weights(self):
        return [[getattr(self, n) for n in self._flat_weights_names if n.endswith(f"_l{layer}{sfx}")]
                for layer in range(self.num_layers) for sfx in (("", "_reverse") if self.bidirectional else ("",))]

    def _weights(self, layer, direction):
        sfx = f"_l{layer}" + ("_reverse" if direction else "")
        get = lambda name: getattr(self, name + sfx, None)  # noqa: E731
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh"), get("weight_hr")

    def _hidden(self, input, hx, batch, unbatched):
        dirs = 2 if self.bidirectional else 1
        out = self.proj_size if self.proj_size > 0 else self.hidden_size
        shapes = [(self.num_layers * dirs, batch, out)]
        if self.mode == "LSTM":
            shapes.append((self.num_layers * dirs, batch, self.hidden_size))
        if hx is None:
            return [zeros(tuple(s), dtype=input.dtype, device=input.device) for s in shapes]
        hx = list(hx) if self.mode == "LSTM" else [hx]
        if self.mode == "LSTM" and len(hx) != 2:
            raise ValueError("LSTM expects hx as a tuple (h_0, c_0)")
        names = ("Expected hidden[0] size", "Expected hidden[1] size") if self.mode == "LSTM" else \
            ("Expected hidden size",)
        for i, (h, s) in enumerate(zip(hx, shapes)):
            if unbatched:
                if h.ndim != 2:
                    raise RuntimeError(f"For unbatched 2-D input, hx should also be 2-D but got {h.ndim}-D tensor")
                h = h.unsqueeze(1)
            elif h.ndim != 3:
                raise RuntimeError(f"For batched 3-D input, hx should also be 3-D but got {h.ndim}-D tensor")
            if tuple(h.shape) != s:
                raise RuntimeError(f"{names[i]} {tuple(s)}, got {tuple(h.shape)}")
            hx[i] = h
        return hx

    def forward(self, input, hx=None):
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx)
        if not isinstance(input, Tensor):
            raise TypeError(f"{type(self).__name__} expects a Tensor or a PackedSequence input, got "
                            f"{type(input).__name__}")
        if input.ndim not in (2, 3):
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got {input.ndim}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got "
                               f"{input.shape[-1]}")
        unbatched = input.ndim == 2
        x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first else input)
        state = self._hidden(input, hx, x.shape[1], unbatched)
        output, hidden = self._layers(x, state, None)
        output = output.squeeze(1) if unbatched else (output.transpose(0, 1) if self.batch_first else output)
        if unbatched:
            hidden = [h.squeeze(1) for h in hidden]
        return output, (tuple(hidden) if self.mode == "LSTM" else hidden[0])

    def _forward_packed(self, input, hx):
        """A PackedSequence: run on its padded, time-major form with a mask; pack the output the same way."""
        data, batch_sizes, sorted_indices, unsorted_indices = input
        if data.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got "
                               f"{data.shape[-1]}")
        x, mask = _packed_to_padded(data, batch_sizes)
        if hx is not None and sorted_indices is not None:  # the user's hx is in the batch's own order
            hx = tuple(h.index_select(1, sorted_indices) for h in hx) if self.mode == "LSTM" else \
                hx.index_select(1, sorted_indices)
        state = self._hidden(data, hx, x.shape[1], False)
        output, hidden = self._layers(x, state, mask)
        if unsorted_indices is not None:
            hidden = [h.index_select(1, unsorted_indices) for h in hidden]
        output = PackedSequence(_padded_to_packed(output, batch_sizes), batch_sizes, sorted_indices, unsorted_indices)
        return output, (tuple(hidden) if self.mode == "LSTM" else hidden[0])

    def _layers(self, x, state, mask):
        """Every layer and direction over time-major ``x``: (output (T, B, D * H), [h_n] or [h_n, c_n])."""
        dirs = 2 if self.bidirectional else 1
        op = _LAYER_OPS[self.mode]
        h_n, c_n = [], []
        for layer in range(self.num_layers):
            outs = []
            for direction in range(dirs):
                k = layer * dirs + direction
                w_ih, w_hh, b_ih, b_hh, w_hr = self._weights(layer, direction)
                c0 = state[1][k] if self.mode == "LSTM" else None
                if self.mode == "LSTM" and w_hr is None and mask is None and x.shape[0]:
                    res = call(_LSTM_SAVING, x, state[0][k], c0, w_ih, w_hh, b_ih, b_hh, reverse=bool(direction))
                elif self.mode == "GRU" and mask is None and x.shape[0]:
                    res = call(_GRU_SAVING, x, state[0][k], w_ih, w_hh, b_ih, b_hh, reverse=bool(direction))
                else:
                    res = call(op, x, state[0][k], c0, w_ih, w_hh, b_ih, b_hh, w_hr, mask, mode=self.mode,
                               reverse=bool(direction))
                outs.append(res[0])
                h_n.append(res[1])
                if self.mode == "LSTM":
                    c_n.append(res[2])
            x = outs[0] if dirs == 1 else cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        return x, [stack(h_n, 0)] + ([stack(c_n, 0)] if self.mode == "LSTM" else [])

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s


class RNN(RNNBase):
    """Elman RNN: ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` (or ReLU)."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size, num_layers,
                         bias, batch_first, dropout, bidirectional, 0, device, dtype)


class LSTM(RNNBase):
    """Long short-term memory; ``forward(input, (h_0, c_0)) -> (output, (h_n, c_n))``."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype)


class GRU(RNNBase):
    """Gated recurrent unit; ``forward(input, h_0) -> (output, h_n)``."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0,
                         device, dtype)


class _CellBase(Module):
    _mode = ""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        gate = _GATES[self._mode] * hidden_size
        self.weight_ih = Parameter(empty(gate, input_size, device=device, dtype=dtype))
        self.weight_hh = Parameter(empty(gate, hidden_size, device=device, dtype=dtype))
        if bias:
            self.bias_ih = Parameter(empty(gate, device=device, dtype=dtype))
            self.bias_hh = Parameter(empty(gate, device=device, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def _run(self, input, hx):
        if input.ndim not in (1, 2):
            raise ValueError(f"{type(self).__name__}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        unbatched = input.ndim == 1
        x = input.unsqueeze(0) if unbatched else input
        states = [] if hx is None else (list(hx) if self._mode == "LSTM" else [hx])
        if hx is None:
            n = 2 if self._mode == "LSTM" else 1
            states = [zeros(x.shape[0], self.hidden_size, dtype=input.dtype, device=input.device) for _ in range(n)]
        elif unbatched:
            states = [h.unsqueeze(0) for h in states]
        c = states[1] if self._mode == "LSTM" else None
        out = call(_CELL_OPS[self._mode], x, states[0], c, self.weight_ih, self.weight_hh, self.bias_ih,
                   self.bias_hh, mode=self._mode)
        if unbatched:
            out = tuple(o.squeeze(0) for o in out) if isinstance(out, tuple) else out.squeeze(0)
        return out

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        return s


class RNNCell(_CellBase):
    """One Elman RNN step: ``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (or ReLU)."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        self.nonlinearity = nonlinearity
        self._mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        super().__init__(input_size, hidden_size, bias, device, dtype)

    def forward(self, input, hx=None):
        return self._run(input, hx)


class LSTMCell(_CellBase):
    """One LSTM step: ``forward(input, (h, c)) -> (h', c')``."""

    _mode = "LSTM"

    def forward(self, input, hx=None):
        return self._run(input, hx)


class GRUCell(_CellBase):
    """One GRU step: ``forward(input, h) -> h'``."""

    _mode = "GRU"

    def forward(self, input, hx=None):
        return self._run(input, hx)
