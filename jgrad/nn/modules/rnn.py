"""``torch.nn.modules.rnn``: recurrent layers, re-exported from where jgrad defines them."""
from ..rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell  # noqa: F401
from ..rnn import _CellBase as RNNCellBase  # noqa: F401

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]
