"""A word-level LSTM language model in the style of pytorch/examples' word_language_model, on a built-in text.

Truncated backpropagation through time: the hidden state is detached between batches
(``repackage_hidden``), gradients are clipped, and the update is a manual SGD step on ``p.data``, as in
the original. The same file runs on PyTorch: change the one import line below to ``import torch``.

    python examples/gallery/lstm_language_model.py --epochs 10
"""
import argparse
import math

import jgrad as torch  # the one line to switch: `import torch` runs this file on PyTorch

nn = torch.nn
F = torch.nn.functional

TEXT = """the cat sat on the mat . the dog sat on the log . a cat saw a dog and the dog saw a cat .
the mat was red and the log was brown . a bird sat on the dog and the cat saw the bird .
the bird sang and the dog slept on the mat while the cat sat on the log ."""


class Dictionary:
    def __init__(self):
        self.word2idx, self.idx2word = {}, []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


class Corpus:
    def __init__(self, text=TEXT):
        self.dictionary = Dictionary()
        words = text.split() + ["<eos>"]
        self.train = torch.tensor([self.dictionary.add_word(w) for w in words], dtype=torch.int64)


class RNNModel(nn.Module):
    """Embedding -> LSTM -> Linear decoder, with dropout."""

    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.5):
        super().__init__()
        self.ntoken, self.nhid, self.nlayers = ntoken, nhid, nlayers
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout if nlayers > 1 else 0.0)
        self.decoder = nn.Linear(nhid, ntoken)
        self.init_weights()

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def batchify(data, bsz, device):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous().to(device)


def repackage_hidden(h):
    """Detach the hidden state from the history of the previous batch."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


def train_epoch(args, model, train_data, lr, ntokens):
    """One pass over ``train_data``; returns the batch losses (tensors)."""
    model.train()
    criterion = nn.NLLLoss()
    hidden = model.init_hidden(args.batch_size)
    losses = []
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        data, targets = get_batch(train_data, i, args.bptt)
        model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        losses.append(loss.detach())
    return losses


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="A word-level LSTM language model")
    parser.add_argument("--emsize", type=int, default=32)
    parser.add_argument("--nhid", type=int, default=32)
    parser.add_argument("--nlayers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=5.0)
    parser.add_argument("--clip", type=float, default=0.25)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--bptt", type=int, default=8)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1111)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
    corpus = Corpus()
    train_data = batchify(corpus.train, args.batch_size, device)
    ntokens = len(corpus.dictionary)
    model = RNNModel(ntokens, args.emsize, args.nhid, args.nlayers, args.dropout).to(device)
    lr = args.lr
    for epoch in range(1, args.epochs + 1):
        losses = train_epoch(args, model, train_data, lr, ntokens)
        loss = torch.stack(losses).mean().item()
        print(f"| epoch {epoch:3d} | lr {lr:02.2f} | loss {loss:5.2f} | ppl {math.exp(loss):8.2f}")
    return model


if __name__ == "__main__":
    main()
