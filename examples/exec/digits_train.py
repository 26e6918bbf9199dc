"""Train the small PyTorch model that examples/exec/digits_torch.py serves.

    python3 examples/exec/digits_train.py --data .data/digits.csv.gz \
        --model .data/digits_torch.pt --inputs .data/digits_heldout.jsonl

(`make exec-digits` runs it.) The digits data set (`make data`) is 1,797
images of 8x8 pixels (values 0..16) with their labels; as in rollout's own
training runs, sample i is held out when i % 5 == 4. This trains a
64-64-10 MLP on the other 1,438 (seeded: the same file gives the same
model), saves it as TorchScript (the handler loads it without this code),
and with --inputs writes the 359 held-out images as a rollout input file:
one line each, {"prompt": "digit N", "pixels": [64 ints], "label": L}.
"""

import argparse
import csv
import gzip
import json
import os
import sys

import torch

FEATURES, CLASSES, HELD_OUT_EVERY = 64, 10, 5


def load(path):
    train, held = [], []
    with gzip.open(path, "rt") as f:
        for i, row in enumerate(csv.reader(f)):
            if not row:
                continue
            if len(row) != FEATURES + 1:
                sys.exit("%s: line %d has %d fields, want %d" % (path, i + 1, len(row), FEATURES + 1))
            pixels, label = [int(v) for v in row[:FEATURES]], int(row[FEATURES])
            (held if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else train).append((pixels, label))
    return train, held


class MLP(torch.nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(FEATURES, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, CLASSES))

    def forward(self, x):
        # x: pixels in 0..16, shape (N, 64)
        return self.net(x / 16.0)


def tensors(samples):
    x = torch.tensor([p for p, _ in samples], dtype=torch.float32)
    y = torch.tensor([label for _, label in samples], dtype=torch.long)
    return x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="digits.csv.gz (make data)")
    ap.add_argument("--model", required=True, help="where to save the TorchScript model")
    ap.add_argument("--inputs", help="also write the held-out images as a rollout input file here")
    ap.add_argument("--epochs", type=int, default=300)
    args = ap.parse_args()

    train, held = load(args.data)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = tensors(train)
    for _ in range(args.epochs):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    model.eval()
    hx, hy = tensors(held)
    with torch.no_grad():
        acc = (model(hx).argmax(dim=1) == hy).float().mean().item()
    os.makedirs(os.path.dirname(os.path.abspath(args.model)), exist_ok=True)
    tmp = args.model + ".tmp"
    torch.jit.save(torch.jit.script(model), tmp)
    os.replace(tmp, args.model)
    print("digits_train: %d training images, final loss %.4f, held-out accuracy %.4f (%d images); saved %s"
          % (len(train), loss.item(), acc, len(held), args.model))
    if args.inputs:
        tmp = args.inputs + ".tmp"
        with open(tmp, "w") as f:
            for n, (pixels, label) in enumerate(held):
                f.write(json.dumps({"prompt": "digit %d" % n, "pixels": pixels, "label": label}) + "\n")
        os.replace(tmp, args.inputs)
        print("digits_train: wrote %d input lines to %s" % (len(held), args.inputs))


if __name__ == "__main__":
    main()
