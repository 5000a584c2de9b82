"""A variational autoencoder in the style of pytorch/examples' VAE, on small synthetic binary images.

Each 4x4 image is one of a few stroke patterns with pixels flipped at random; the VAE learns a
2-dimensional latent code. The same file runs on PyTorch: change the one import line below to
``import torch``.

    python examples/gallery/vae.py --epochs 5
"""
import argparse

import numpy as np

import jgrad as torch  # the one line to switch: `import torch` runs this file on PyTorch

nn = torch.nn
F = torch.nn.functional

D, H, Z = 16, 12, 2  # image pixels, hidden units, latent dimensions


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(D, H)
        self.fc21 = nn.Linear(H, Z)
        self.fc22 = nn.Linear(H, Z)
        self.fc3 = nn.Linear(Z, H)
        self.fc4 = nn.Linear(H, D)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, D))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    """Reconstruction (binary cross-entropy) plus the KL divergence to the unit Gaussian, summed."""
    bce = F.binary_cross_entropy(recon_x, x.view(-1, D), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def make_dataset(n, seed):
    rng = np.random.default_rng(seed)
    patterns = np.array([[1, 1, 1, 1] + [0] * 12, [1, 0, 0, 0] * 4, [0] * 12 + [1, 1, 1, 1],
                         [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]], dtype=np.float32)
    images = patterns[rng.integers(0, len(patterns), n)]
    flip = rng.random(images.shape) < 0.05
    images = np.where(flip, 1 - images, images).astype(np.float32).reshape(n, 1, 4, 4)
    return torch.utils.data.TensorDataset(torch.tensor(images), torch.zeros(n, dtype=torch.int64))


def train(args, model, device, train_loader, optimizer, epoch):
    """One epoch; returns the batch losses (tensors)."""
    model.train()
    losses = []
    for batch_idx, (data, _) in enumerate(train_loader):
        data = data.to(device)
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    total = torch.stack(losses).sum().item()
    print(f"====> Epoch: {epoch} Average loss: {total / len(train_loader.dataset):.4f}")
    return losses


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="A small VAE")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
    train_loader = torch.utils.data.DataLoader(make_dataset(256, args.seed), batch_size=args.batch_size,
                                               shuffle=True)
    model = VAE().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        with torch.no_grad():
            sample = model.decode(torch.randn(4, Z, device=device))
        print("samples:", [format(v, ".2f") for v in sample[0, :4].tolist()])
    return model


if __name__ == "__main__":
    main()
