"""Classify handwritten digits with PyTorch: a rollout exec handler.

    make exec-digits    # trains the model into .data/digits_torch.pt (and
                        # writes .data/digits_heldout.jsonl, 359 images)
    rollout-worker --id w1 --coord HOST:PORT ... --backend exec \
        --exec "python3 examples/exec/digits_torch.py .data/digits_torch.pt" --exec-inflight 32

Each item's payload has "pixels": the 64 values (0..16) of an 8x8 image;
the result is {"digit": D, "confidence": P}. The model is loaded once per
program, on "cuda" when PyTorch sees a GPU (the worker's --exec-gpus gives
each program its own CUDA_VISIBLE_DEVICES) and on the cpu otherwise, and
classifies the items the worker has sent together in one forward pass
(up to --exec-inflight of them).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import rollout_exec  # noqa: E402
import torch  # noqa: E402

MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", ".data", "digits_torch.pt")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
torch.set_num_threads(int(os.environ.get("DIGITS_THREADS", "1")))
model = torch.jit.load(MODEL, map_location=DEVICE)
model.eval()
print("digits_torch: loaded %s on %s (CUDA_VISIBLE_DEVICES=%s)"
      % (MODEL, DEVICE, os.environ.get("CUDA_VISIBLE_DEVICES", "")), file=sys.stderr, flush=True)


def pixels_of(payload):
    px = payload.get("pixels") if isinstance(payload, dict) else None
    if not isinstance(px, list) or len(px) != 64 or not all(isinstance(v, (int, float)) and 0 <= v <= 16 for v in px):
        raise rollout_exec.NotRetryable('"pixels" must be a list of 64 numbers in [0, 16]')
    return px


def handle_batch(payloads):
    rows, out = [], []
    for p in payloads:
        try:
            rows.append(pixels_of(p))
            out.append(None)
        except rollout_exec.NotRetryable as exc:
            out.append(exc)
    if rows:
        with torch.no_grad():
            probs = torch.softmax(model(torch.tensor(rows, dtype=torch.float32, device=DEVICE)), dim=1)
            conf, digit = probs.max(dim=1)
        answers = iter(zip(digit.tolist(), conf.tolist()))
        for i, o in enumerate(out):
            if o is None:
                d, c = next(answers)
                out[i] = {"digit": d, "confidence": round(c, 4), "device": DEVICE}
    return out


if __name__ == "__main__":
    rollout_exec.serve(handle_batch, batch_size=64)
