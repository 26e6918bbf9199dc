"""rollout_exec: run your own Python function as a rollout worker's backend.

Write a function that takes one item's payload (the input line, a dict) and
returns its result (a dict), and hand it to serve():

    import rollout_exec

    def handle(payload):
        return {"words": len(payload["prompt"].split())}

    rollout_exec.serve(handle)

and start workers that run it:

    rollout-worker --id w1 --coord HOST:PORT ... --backend exec --exec "python3 handler.py"

The worker starts --exec-procs copies of the program and keeps them running;
the ledger's guarantees (exactly-once results, retries, stealing, drain) are
the worker's business, the program only computes.

serve() speaks the worker's line protocol on standard input and output: one
JSON object a line in,

    {"id": "<sample id hex>", "run": "...", "index": N, "payload": {...}}

and one a line out for each item, in any order:

    {"id": "...", "result": {...}}
    {"id": "...", "error": "...", "retryable": true}

An exception raised by the function becomes an error answer whose text is
the exception and its traceback; raise NotRetryable to say that trying again
cannot help. A result that is not a dict of JSON values is an error answer
too. Importing this module reserves the real standard input and output for
the protocol: from then on anything the program prints - print(), a
library's progress bars, even C code writing to file descriptor 1 - goes to
standard error, which the worker logs (import it before anything prints; a
stray line on the real standard output is a protocol error), and reading
standard input (input(), sys.stdin) finds it empty. serve() returns
when standard input ends (the worker is stopping), so the script exits 0.

With batch_size=N the function takes a list of up to N payloads (as many as
the worker has already sent, so run the worker with --exec-inflight N) and
returns a list of as many results, in order; an element that is an
Exception instance fails that item alone.

The environment says where the program runs: ROLLOUT_WORKER_ID, ROLLOUT_PROC
(0, 1, ... for the worker's copies) and, with the worker's --exec-gpus,
CUDA_VISIBLE_DEVICES (one device for each copy).

Standard library only; Python 3.9 or newer. One file: copy it next to your
script or put its directory on PYTHONPATH.
"""

import json
import os
import select
import sys
import traceback

__all__ = ["serve", "NotRetryable"]

# The most of an error text sent to the worker (the ledger keeps 4 KiB of a
# failure reason; the summary comes first so that it survives the cut).
_MAX_ERROR = 16 * 1024


class NotRetryable(Exception):
    """Raise it from a handler to fail an item with "retryable": false."""


class _Lines:
    """Lines of a file descriptor, without blocking when asked not to."""

    def __init__(self, fd):
        self._fd = fd
        self._buf = bytearray()
        self._eof = False

    def _fill(self, block):
        if self._eof:
            return False
        if not block:
            ready, _, _ = select.select([self._fd], [], [], 0)
            if not ready:
                return False
        chunk = os.read(self._fd, 1 << 16)
        if not chunk:
            self._eof = True
        else:
            self._buf += chunk
        return True

    def next(self, block=True):
        """The next line without its newline; None at the end of input, or
        when block is False and no whole line has arrived yet."""
        while True:
            i = self._buf.find(b"\n")
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[: i + 1]
                return line
            if self._eof:
                if self._buf:
                    line = bytes(self._buf)
                    self._buf.clear()
                    return line
                return None
            if not self._fill(block) and not block:
                return None


def _error_text(exc):
    summary = "%s: %s" % (type(exc).__name__, exc)
    if exc.__traceback__ is None:
        return summary  # an exception returned, not raised
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    text = summary + "\n" + tb
    if len(text) > _MAX_ERROR:
        text = text[: _MAX_ERROR // 4] + "\n...\n" + text[-(_MAX_ERROR * 3 // 4):]
    return text


def _dumps(obj):
    return json.dumps(obj, ensure_ascii=True, allow_nan=False, separators=(",", ":"))


class _Out:
    def __init__(self, stream):
        self._stream = stream

    def result(self, item_id, result):
        if not isinstance(result, dict):
            self.error(item_id, "the handler returned %s, want a dict (a JSON object)" % type(result).__name__, False)
            return
        try:
            line = _dumps({"id": item_id, "result": result})
        except (TypeError, ValueError) as exc:
            self.error(item_id, "the handler's result is not JSON: %s" % exc, False)
            return
        self._write(line)

    def error(self, item_id, message, retryable=True):
        self._write(_dumps({"id": item_id, "error": str(message), "retryable": bool(retryable)}))

    def failed(self, item_id, exc):
        self.error(item_id, _error_text(exc), not isinstance(exc, NotRetryable))

    def _write(self, line):
        self._stream.write(line + "\n")
        self._stream.flush()


def _reserve_stdio():
    """The real standard input (a file descriptor) and output (a file), for
    the protocol alone: from now on file descriptor 1 and sys.stdout go to
    standard error, and file descriptor 0 and sys.stdin read /dev/null."""
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    in_fd = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(os.devnull)
    return in_fd, os.fdopen(out_fd, "w", encoding="utf-8", newline="\n")


# Reserved at import, before the handler's module (or the libraries it
# loads) can print or read.
_PROTOCOL_IN, _PROTOCOL_OUT = _reserve_stdio()


def _decode(line):
    """(id, payload) of a request line, or None (said on stderr) when it is
    not one."""
    try:
        req = json.loads(line)
        item_id = req["id"]
        if not isinstance(item_id, str):
            raise ValueError("id is not a string")
        return item_id, req.get("payload")
    except (ValueError, KeyError, TypeError) as exc:
        print("rollout_exec: ignoring a request that is not one (%s): %r" % (exc, line[:120]), file=sys.stderr, flush=True)
        return None


def serve(handle, batch_size=None, _stdin_fd=None, _stdout=None):
    """Answer the worker's requests with handle until standard input ends.

    handle(payload) returns the item's result, a dict; with batch_size=N,
    handle(payloads) takes a list of up to N payloads and returns a list of
    as many results (an Exception instance fails its item alone). An
    exception fails the item (every item of the batch) with its traceback;
    NotRetryable marks the failure as not worth retrying.
    """
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError("batch_size must be a positive int, got %r" % (batch_size,))
    out = _Out(_stdout if _stdout is not None else _PROTOCOL_OUT)
    lines = _Lines(_stdin_fd if _stdin_fd is not None else _PROTOCOL_IN)
    while True:
        line = lines.next(block=True)
        if line is None:
            return
        if not line.strip():
            continue
        req = _decode(line)
        if req is None:
            continue
        if batch_size is None:
            item_id, payload = req
            try:
                result = handle(payload)
            except Exception as exc:  # noqa: BLE001 - every failure is an answer
                out.failed(item_id, exc)
                continue
            out.result(item_id, result)
            continue
        batch = [req]
        while len(batch) < batch_size:
            more = lines.next(block=False)
            if more is None:
                break
            if more.strip():
                req = _decode(more)
                if req is not None:
                    batch.append(req)
        _run_batch(handle, batch, out)


def _run_batch(handle, batch, out):
    try:
        results = handle([payload for _, payload in batch])
        if not isinstance(results, (list, tuple)) or len(results) != len(batch):
            raise NotRetryable("the batch handler returned %s for %d payloads, want a list of %d results"
                               % (type(results).__name__ if not isinstance(results, (list, tuple)) else "%d results" % len(results),
                                  len(batch), len(batch)))
    except Exception as exc:  # noqa: BLE001
        for item_id, _ in batch:
            out.failed(item_id, exc)
        return
    for (item_id, _), result in zip(batch, results):
        if isinstance(result, Exception):
            out.failed(item_id, result)
        else:
            out.result(item_id, result)
