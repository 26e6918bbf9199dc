"""A test program for the exec backend. argv[1] picks its behaviour.

Modes that use the rollout_exec helper (python/ on PYTHONPATH):
  echo      result {"echo": payload, "proc", "pid", "gpu", "worker"}; a payload
            with "print" prints it to stdout first (which must not reach the
            protocol), one with "sleep" (seconds) sleeps, one with "fail"
            raises ValueError (NotRetryable when "fail" is "permanent")
  batch     like echo, through serve(batch_size=4), with "batch" = batch length
  spawn     echo, after starting a grandchild (sleep 600) whose pid it reports
  noterm    echo, ignoring SIGTERM (Close must SIGKILL it)
  slowstart echo, after 1.5 s of start-up (loading a model, say)

Raw modes (they speak the protocol themselves):
  crash7    answers, but exits with status 3 on the 7th item it receives
  hang      answers, but never answers the 5th item it receives
  hangfirst never answers its first item
  garbage   answers, but writes a line that is not JSON for the 5th item
  wrongid   answers, but answers the 5th item with an id it was not given
  halfline  answers, but dies (status 5) halfway through the 5th answer line
  dup       answers every item twice
  big       answers with a result of "size" bytes (payload "size")
  reverse   reads $HANDLER_K requests, then answers them in reverse order
  exit1     says "ImportError: no module named nonexistent" on stderr, exits 1
"""

import json
import os
import signal
import subprocess
import sys
import time


def echo(payload):
    if isinstance(payload, dict):
        if "print" in payload:
            print(payload["print"], flush=True)
            os.write(1, b"raw write to fd 1\n")
            if sys.stdin.read() != "" or os.read(0, 10) != b"":
                raise RuntimeError("standard input is not empty: it should be the protocol's alone")
        if "sleep" in payload:
            time.sleep(float(payload["sleep"]))
        if payload.get("fail") == "permanent":
            import rollout_exec
            raise rollout_exec.NotRetryable("bad input " + str(payload.get("n")))
        if "fail" in payload:
            raise ValueError("failing on purpose: " + str(payload["fail"]))
    return {"echo": payload, "proc": os.environ.get("ROLLOUT_PROC"), "pid": os.getpid(),
            "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "worker": os.environ.get("ROLLOUT_WORKER_ID")}


def raw(mode):
    n = 0
    held = []
    k = int(os.environ.get("HANDLER_K", "1"))
    for line in sys.stdin:
        req = json.loads(line)
        n += 1
        ans = {"id": req["id"], "result": {"n": n, "index": req["index"], "payload": req["payload"]}}
        if mode == "crash7" and n == 7:
            sys.stderr.write("crashing on purpose on item %d\n" % n)
            sys.stderr.flush()
            os._exit(3)
        if (mode == "hang" and n == 5) or (mode == "hangfirst" and n == 1):
            sys.stderr.write("hanging on purpose\n")
            sys.stderr.flush()
            time.sleep(3600)
        if mode == "halfline" and n == 5:
            sys.stdout.write('{"id": "' + req["id"][:10])
            sys.stdout.flush()
            os._exit(5)
        if mode == "garbage" and n == 5:
            sys.stdout.write("this is not json\n")
            sys.stdout.flush()
            continue
        if mode == "wrongid" and n == 5:
            ans["id"] = "ff" + req["id"][2:] if not req["id"].startswith("ff") else "00" + req["id"][2:]
        if mode == "big":
            ans["result"] = {"blob": "x" * int(req["payload"]["size"])}
        if mode == "reverse":
            held.append(ans)
            if len(held) < k:
                continue
            for a in reversed(held):
                sys.stdout.write(json.dumps(a) + "\n")
            sys.stdout.flush()
            held = []
            continue
        out = json.dumps(ans) + "\n"
        sys.stdout.write(out)
        if mode == "dup":
            sys.stdout.write(out)
        sys.stdout.flush()


def main():
    mode = sys.argv[1]
    if mode == "exit1":
        sys.stderr.write("Traceback (most recent call last):\nImportError: no module named nonexistent\n")
        sys.exit(1)
    if mode in ("crash7", "hang", "hangfirst", "halfline", "garbage", "wrongid", "dup", "big", "reverse"):
        raw(mode)
        return
    import rollout_exec
    print("a line printed at start-up, after importing rollout_exec: it goes to stderr")
    if mode == "spawn":
        child = subprocess.Popen(["sleep", "600"])
        sys.stderr.write("grandchild pid %d\n" % child.pid)
        sys.stderr.flush()

        def handle(payload):
            r = echo(payload)
            r["grandchild"] = child.pid
            return r
        rollout_exec.serve(handle)
        return
    if mode == "slowstart":
        time.sleep(1.5)
        rollout_exec.serve(echo)
        return
    if mode == "noterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.close(0)  # it does not exit at EOF either: it ignores the worker
        while True:
            time.sleep(1)
    if mode == "batch":
        def handle_batch(payloads):
            out = []
            for p in payloads:
                if isinstance(p, dict) and "fail" in p:
                    out.append(ValueError("failing on purpose: " + str(p["fail"])))
                    continue
                r = echo(p)
                r["batch"] = len(payloads)
                out.append(r)
            return out
        rollout_exec.serve(handle_batch, batch_size=4)
        return
    rollout_exec.serve(echo)


if __name__ == "__main__":
    main()
