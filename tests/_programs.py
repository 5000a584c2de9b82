"""Training programs in the styles of public PyTorch examples, written once against a ``torch``-like module.

Each ``program(T, steps, ...)`` takes ``T`` (``jgrad`` or ``torch``), seeds it, builds its model from NumPy
weights (so jgrad and PyTorch start from the same parameters) and returns the losses it read. Used by
tests/test_programs.py (both execution modes against eager, and how many segments ran compiled) and by
benchmarks/programs.py (per-step time against PyTorch in the same run). Small sizes: fast on a CPU.

- ``lstm_lm``: pytorch/examples' word_language_model: an LSTM over ``source[i:i + bptt]`` (a new offset
  every step, a shorter last batch), the hidden state detached between batches, ``model.zero_grad()``,
  ``clip_grad_norm_`` and a manual SGD update (``p.data.add_(p.grad, alpha=-lr)``), ``loss.item()`` every
  step, the learning rate divided at each epoch's end.
- ``gpt``: a minGPT/nanoGPT-style trainer: causal self-attention with a ``tril`` buffer, AdamW, a cosine
  learning-rate schedule set into ``param_groups``, ``clip_grad_norm_``, ``loss.item()`` every
  ``log_every`` steps, and greedy sampling every ``sample_every`` steps (a growing sequence).
- ``reinforce``: pytorch/examples' REINFORCE: a ``Categorical`` policy sampled per environment step
  (``action.item()``), an episode of a toy environment whose length varies, returns normalized, ``cat`` over
  the episode. Returns the losses and the episode lengths.
- ``gan``: a DCGAN-style loop with two optimizers (Adam), ``detach()`` of the fake batch for the
  discriminator step, BCE losses, both read every step.
- ``seq_lbfgs``: pytorch/examples' time_sequence_prediction: LSTMCells stepped over a sequence in float64, LBFGS
  with a closure that reads the loss, a prediction past the input under ``no_grad``.
- ``mnist``: pytorch/examples' MNIST: two convolutions, max pooling, dropout, ``log_softmax`` + ``nll_loss``,
  Adadelta with a ``StepLR`` schedule stepped at each epoch's end, ``loss.item()`` every ``log_interval`` batches.
"""
import math

import numpy as np


def _init(T, module, rng):
    """Overwrite every parameter with seeded NumPy values (the same in jgrad and PyTorch)."""
    with T.no_grad():
        for p in module.parameters():
            bound = 1.0 / math.sqrt(p.shape[-1] if p.dim() > 1 else p.shape[0])
            p.copy_(T.tensor(rng.uniform(-bound, bound, p.shape).astype(np.float32)))


# ---- LSTM language model -----------------------------------------------------------------
def lstm_lm(T, steps, vocab=24, emb=16, hidden=16, batch=4, bptt=5, epochs_of=None, on_step=None):
    nn = T.nn
    rng = np.random.RandomState(0)
    T.manual_seed(0)

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Embedding(vocab, emb)
            self.rnn = nn.LSTM(emb, hidden, 1)
            self.decoder = nn.Linear(hidden, vocab)

        def forward(self, x, h):
            out, h = self.rnn(self.encoder(x), h)
            return self.decoder(out).view(-1, vocab), h

        def init_hidden(self, bsz):
            w = next(self.parameters())
            return (w.new_zeros(1, bsz, hidden), w.new_zeros(1, bsz, hidden))

    model = LM()
    _init(T, model, rng)
    crit = nn.CrossEntropyLoss()
    n_tokens = epochs_of or (bptt * 6 + 3)  # 6 full batches and a shorter one per epoch
    source = T.tensor(rng.randint(0, vocab, size=(n_tokens, batch)))
    lr, losses, step = 2.0, [], 0
    while step < steps:
        hidden_state = model.init_hidden(batch)
        for i in range(0, source.size(0) - 1, bptt):
            seq_len = min(bptt, source.size(0) - 1 - i)
            data, targets = source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)
            hidden_state = tuple(h.detach() for h in hidden_state)  # repackage_hidden
            model.zero_grad()
            output, hidden_state = model(data, hidden_state)
            loss = crit(output, targets)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            losses.append(loss.item())
            step += 1
            if on_step:
                on_step(step)
            if step == steps:
                return losses
        lr /= 4.0  # annealed at each epoch's end: a Python scalar that changes
    return losses


# ---- GPT trainer -------------------------------------------------------------------------
def gpt(T, steps, vocab=16, block=8, n_embd=16, n_head=2, n_layer=1, batch=4, log_every=3, sample_every=4,
        sample_tokens=4, on_step=None):
    nn, F = T.nn, T.nn.functional
    rng = np.random.RandomState(1)
    T.manual_seed(1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)
            self.register_buffer("bias", T.tril(T.ones(block, block)).view(1, 1, block, block))

        def forward(self, x):
            B, L, C = x.size()
            q, k, v = self.c_attn(x).split(n_embd, dim=2)
            k = k.view(B, L, n_head, C // n_head).transpose(1, 2)
            q = q.view(B, L, n_head, C // n_head).transpose(1, 2)
            v = v.view(B, L, n_head, C // n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :L, :L] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, L, C)
            return self.c_proj(y)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(n_embd), Attention()
            self.ln_2, self.fc, self.proj = nn.LayerNorm(n_embd), nn.Linear(n_embd, 4 * n_embd), nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.proj(F.gelu(self.fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, n_embd), nn.Embedding(block, n_embd)
            self.h = nn.ModuleList([Block() for _ in range(n_layer)])
            self.ln_f, self.lm_head = nn.LayerNorm(n_embd), nn.Linear(n_embd, vocab, bias=False)

        def forward(self, idx, targets=None):
            L = idx.size(1)
            pos = T.arange(0, L, dtype=T.long).unsqueeze(0)
            x = self.wte(idx) + self.wpe(pos)
            for blk in self.h:
                x = blk(x)
            logits = self.lm_head(self.ln_f(x))
            loss = None
            if targets is not None:
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
            return logits, loss

        @T.no_grad()
        def generate(self, idx, max_new_tokens):
            for _ in range(max_new_tokens):
                idx_cond = idx if idx.size(1) <= block else idx[:, -block:]
                logits, _ = self(idx_cond)
                idx_next = logits[:, -1, :].argmax(dim=-1, keepdim=True)
                idx = T.cat((idx, idx_next), dim=1)
            return idx

    model = GPT()
    _init(T, model, rng)
    opt = T.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    data = T.tensor(rng.randint(0, vocab, size=400))
    losses, samples = [], []
    for it in range(steps):
        lr = 1e-2 * 0.5 * (1.0 + math.cos(math.pi * it / steps))  # cosine schedule
        for group in opt.param_groups:
            group["lr"] = lr
        ix = rng.randint(0, len(data) - block - 1, size=batch)
        x = T.stack([data[i:i + block] for i in ix])
        y = T.stack([data[i + 1:i + 1 + block] for i in ix])
        _, loss = model(x, y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        T.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if it % log_every == 0:
            losses.append(loss.item())
        if sample_every and it % sample_every == sample_every - 1:
            model.eval()
            out = model.generate(x[:1, :2], sample_tokens)
            samples.append(out.tolist())
            model.train()
        if on_step:
            on_step(it + 1)
    return losses + [s for sample in samples for s in sample[0]]


# ---- REINFORCE ---------------------------------------------------------------------------
class _Walk:
    """A toy environment: a point on a line, pushed left or right with noise; an episode ends at the edge."""

    def reset(self):
        self.x, self.t = 0.0, 0
        return np.array([self.x, 0.0, 1.0, 0.0], np.float32)

    def __init__(self, seed, horizon=12):
        self.rng, self.horizon = np.random.RandomState(seed), horizon

    def step(self, action):
        self.x += (0.6 if action == 1 else -0.6) + self.rng.normal(0, 0.4)
        self.t += 1
        done = abs(self.x) > 2.0 or self.t >= self.horizon
        obs = np.array([self.x, self.x * self.x, 1.0, self.t / self.horizon], np.float32)
        return obs, 1.0, done


def reinforce(T, episodes, gamma=0.99, hidden=16, horizon=12, on_step=None):
    nn, F = T.nn, T.nn.functional
    rng = np.random.RandomState(2)
    T.manual_seed(2)

    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.affine1, self.affine2 = nn.Linear(4, hidden), nn.Linear(hidden, 2)

        def forward(self, x):
            return F.softmax(self.affine2(F.relu(self.affine1(x))), dim=1)

    policy = Policy()
    _init(T, policy, rng)
    opt = T.optim.Adam(policy.parameters(), lr=1e-2)
    env, eps = _Walk(3, horizon), float(np.finfo(np.float32).eps)
    losses, lengths = [], []
    for _ in range(episodes):
        state, log_probs, rewards = env.reset(), [], []
        done = False
        while not done:
            probs = policy(T.from_numpy(state).float().unsqueeze(0))
            m = T.distributions.Categorical(probs)
            action = m.sample()
            log_probs.append(m.log_prob(action))
            state, reward, done = env.step(action.item())
            rewards.append(reward)
        R, returns = 0.0, []
        for r in rewards[::-1]:
            R = r + gamma * R
            returns.insert(0, R)
        returns = T.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps) if len(rewards) > 1 else returns
        loss = T.cat([-lp * r for lp, r in zip(log_probs, returns)]).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        lengths.append(len(rewards))
        if on_step:
            on_step(len(losses))
    return losses, lengths


# ---- GAN ---------------------------------------------------------------------------------
def gan(T, steps, nz=4, hidden=16, dim=6, batch=8, on_step=None):
    nn = T.nn
    rng = np.random.RandomState(4)
    T.manual_seed(4)
    netG = nn.Sequential(nn.Linear(nz, hidden), nn.ReLU(True), nn.Linear(hidden, dim), nn.Tanh())
    netD = nn.Sequential(nn.Linear(dim, hidden), nn.LeakyReLU(0.2, inplace=True), nn.Linear(hidden, 1), nn.Sigmoid())
    _init(T, netG, rng)
    _init(T, netD, rng)
    crit = nn.BCELoss()
    optD = T.optim.Adam(netD.parameters(), lr=2e-3, betas=(0.5, 0.999))
    optG = T.optim.Adam(netG.parameters(), lr=2e-3, betas=(0.5, 0.999))
    real_label, fake_label = 1.0, 0.0
    losses = []
    for _ in range(steps):
        real = T.tensor(np.tanh(rng.normal(0.5, 0.3, (batch, dim))).astype(np.float32))
        noise = T.tensor(rng.normal(0, 1, (batch, nz)).astype(np.float32))
        # (1) Update D: maximize log(D(x)) + log(1 - D(G(z)))
        netD.zero_grad()
        label = T.full((batch,), real_label)
        errD_real = crit(netD(real).view(-1), label)
        errD_real.backward()
        fake = netG(noise)
        label.fill_(fake_label)
        errD_fake = crit(netD(fake.detach()).view(-1), label)
        errD_fake.backward()
        errD = errD_real + errD_fake
        optD.step()
        # (2) Update G: maximize log(D(G(z)))
        netG.zero_grad()
        label.fill_(real_label)
        errG = crit(netD(fake).view(-1), label)
        errG.backward()
        optG.step()
        losses += [errD.item(), errG.item()]
        if on_step:
            on_step(len(losses) // 2)
    return losses


# ---- MNIST CNN ---------------------------------------------------------------------------
def mnist(T, steps, side=12, batch=8, channels=4, batches_per_epoch=5, log_interval=2, on_step=None):
    nn, F = T.nn, T.nn.functional
    rng = np.random.RandomState(5)
    T.manual_seed(5)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, channels, 3, 1)
            self.conv2 = nn.Conv2d(channels, 2 * channels, 3, 1)
            self.dropout1, self.dropout2 = nn.Dropout(0.25), nn.Dropout(0.5)
            self.fc1 = nn.Linear(2 * channels * ((side - 4) // 2) ** 2, 16)
            self.fc2 = nn.Linear(16, 10)

        def forward(self, x):
            x = F.relu(self.conv2(F.relu(self.conv1(x))))
            x = self.dropout1(F.max_pool2d(x, 2))
            x = self.dropout2(F.relu(self.fc1(T.flatten(x, 1))))
            return F.log_softmax(self.fc2(x), dim=1)

    model = Net()
    _init(T, model, rng)
    opt = T.optim.Adadelta(model.parameters(), lr=1.0)
    sched = T.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    images = rng.normal(0, 1, (batches_per_epoch * batch, 1, side, side)).astype(np.float32)
    labels = rng.randint(0, 10, size=batches_per_epoch * batch)
    losses, step = [], 0
    while step < steps:
        model.train()
        for b in range(batches_per_epoch):
            data = T.tensor(images[b * batch:(b + 1) * batch])
            target = T.tensor(labels[b * batch:(b + 1) * batch])
            opt.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            opt.step()
            if b % log_interval == 0:
                losses.append(loss.item())
            step += 1
            if on_step:
                on_step(step)
            if step == steps:
                return losses
        sched.step()
    return losses


# ---- time-sequence prediction with LBFGS ------------------------------------------------
def seq_lbfgs(T, steps, hidden=8, waves=4, length=12, future=4, max_iter=20, on_step=None):
    """pytorch/examples' time_sequence_prediction: two LSTMCells over a sine wave, one step at a time, fitted with
    LBFGS (a closure that reads the loss, called up to ``max_iter`` times a step: its reads fall where LBFGS's
    line search puts them), then a prediction ``future`` steps past the input under ``no_grad``."""
    nn = T.nn
    rng = np.random.RandomState(6)
    T.manual_seed(6)

    class Sequence(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm1, self.lstm2 = nn.LSTMCell(1, hidden), nn.LSTMCell(hidden, hidden)
            self.linear = nn.Linear(hidden, 1)

        def forward(self, input, future=0):
            outputs = []
            h_t = T.zeros(input.size(0), hidden, dtype=T.double)
            c_t = T.zeros(input.size(0), hidden, dtype=T.double)
            h_t2 = T.zeros(input.size(0), hidden, dtype=T.double)
            c_t2 = T.zeros(input.size(0), hidden, dtype=T.double)
            for input_t in input.split(1, dim=1):
                h_t, c_t = self.lstm1(input_t, (h_t, c_t))
                h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
                output = self.linear(h_t2)
                outputs += [output]
            for _ in range(future):
                h_t, c_t = self.lstm1(output, (h_t, c_t))
                h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
                output = self.linear(h_t2)
                outputs += [output]
            return T.cat(outputs, dim=1)

    x = np.arange(length + 1)[None, :] + rng.randint(-8, 8, (waves, 1))
    data = np.sin(x / 4.0)
    input, target = T.from_numpy(data[:-1, :-1]), T.from_numpy(data[:-1, 1:])
    test_input, test_target = T.from_numpy(data[-1:, :-1]), T.from_numpy(data[-1:, 1:])
    seq = Sequence()
    _init(T, seq, rng)
    seq.double()
    criterion = nn.MSELoss()
    optimizer = T.optim.LBFGS(seq.parameters(), lr=0.8, max_iter=max_iter)
    losses = []
    for i in range(steps):
        def closure():
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            losses.append(loss.item())
            loss.backward()
            return loss
        optimizer.step(closure)
        with T.no_grad():
            pred = seq(test_input, future=future)
            losses.append(criterion(pred[:, :-future], test_target).item())
        if on_step:
            on_step(i + 1)
    return losses


PROGRAMS = {"lstm_lm": lstm_lm, "gpt": gpt, "reinforce": reinforce, "gan": gan, "mnist": mnist,
            "seq_lbfgs": seq_lbfgs}
