"""Count the words of each item's prompt: the smallest rollout exec handler.

    rollout-worker --id w1 --coord HOST:PORT ... --backend exec --exec "python3 examples/exec/wordcount.py"

Each input line's payload is a dict with a "prompt" string (plus whatever
else the line holds); the result is {"words": N, "chars": N, "longest": W}.
"""

import os
import sys

# rollout_exec.py lives in the repository's python/ directory.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import rollout_exec  # noqa: E402


def handle(payload):
    text = payload["prompt"]
    words = text.split()
    return {"words": len(words), "chars": len(text), "longest": max(words, key=len) if words else ""}


if __name__ == "__main__":
    rollout_exec.serve(handle)
