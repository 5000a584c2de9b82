"""A small CNN classifier in the style of pytorch/examples' MNIST program, on a synthetic image set.

Each 10x10 image holds one bright square in one of four places, plus noise; the network learns which
place. The same file runs on PyTorch: change the one import line below to ``import torch``.

    python examples/gallery/cnn_classifier.py --epochs 2
"""
import argparse

import numpy as np

import jgrad as torch  # the one line to switch: `import torch` runs this file on PyTorch

nn = torch.nn
F = torch.nn.functional


class Net(nn.Module):
    def __init__(self, dropout=0.25, num_classes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout = nn.Dropout(dropout)
        self.fc1 = nn.Linear(16 * 3 * 3, 32)
        self.fc2 = nn.Linear(32, num_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def make_dataset(n, seed):
    """``n`` images (1x10x10, float32) and their labels (int64), from NumPy: the same on every backend."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, n)
    images = rng.normal(0.0, 0.3, (n, 1, 10, 10)).astype(np.float32)
    for img, k in zip(images, labels):
        r, c = divmod(int(k), 2)
        img[0, 1 + 5 * r:4 + 5 * r, 1 + 5 * c:4 + 5 * c] += 2.0
    return torch.utils.data.TensorDataset(torch.tensor(images), torch.tensor(labels))


def train(args, model, device, train_loader, optimizer, epoch):
    """One epoch; returns the batch losses (tensors, read once at the end of the epoch)."""
    model.train()
    losses = []
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        if args.log_interval and batch_idx % args.log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]\tLoss: "
                  f"{loss.item():.6f}")
    return losses


def test(model, device, test_loader):
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    print(f"Test set: Average loss: {test_loss:.4f}, Accuracy: {correct}/{len(test_loader.dataset)}")
    return test_loss, correct


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="A small CNN classifier")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--dropout", type=float, default=0.25)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--no-shuffle", action="store_true")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
    train_loader = torch.utils.data.DataLoader(make_dataset(320, args.seed), batch_size=args.batch_size,
                                               shuffle=not args.no_shuffle)
    test_loader = torch.utils.data.DataLoader(make_dataset(160, args.seed + 1), batch_size=64)
    model = Net(args.dropout).to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()
    return model


if __name__ == "__main__":
    main()
