package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/localcluster"
)

// The exec backend end to end: real rollout-worker processes running
// Python programs (worker/exec/testdata/handler.py, examples/exec/*.py)
// against a 3-replica TLS cluster.

// execPython returns a Python 3.9+ interpreter, Debian's /usr/bin/python3
// first (it is the one that sees python3-torch), or skips saying why.
func execPython(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := osexec.LookPath(p); err == nil && osexec.Command(path, "-c", "import sys; sys.exit(sys.version_info < (3, 9))").Run() == nil {
			return path
		}
	}
	t.Skip("environment: no Python 3.9 or newer (python3): the exec backend's end-to-end tests run Python programs")
	return ""
}

// repoPath is path (slash-separated, from the repository's root) as an
// absolute path.
func repoPath(t *testing.T, path string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", filepath.FromSlash(path)))
	require.NoError(t, err)
	return p
}

// execEnv makes the workers started from now on (and their programs)
// find python/rollout_exec.py and carry a marker in their environment, by
// which markedProcs finds every process they leave. Start the cluster
// first: its replicas must not carry the marker.
func execEnv(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	marker := hex.EncodeToString(b)
	t.Setenv("PYTHONPATH", repoPath(t, "python"))
	t.Setenv("ROLLOUT_E2E_EXEC_MARKER", marker)
	return "ROLLOUT_E2E_EXEC_MARKER=" + marker
}

// markedProcs lists the live (not zombie) processes whose environment
// holds marker.
func markedProcs(t *testing.T, marker string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("environment: no /proc to look for leftover processes in: %v", err)
	}
	var out []string
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !strings.Contains(string(env), marker) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && s[i+2] == 'Z' {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out = append(out, e.Name()+": "+strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " "))
	}
	return out
}

// writeLines writes one JSON object a line.
func writeLines(t *testing.T, lines []map[string]any) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "input.jsonl")
	var b strings.Builder
	for _, l := range lines {
		j, err := json.Marshal(l)
		require.NoError(t, err)
		b.Write(j)
		b.WriteByte('\n')
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	return path
}

// echoed returns the payload the echo handler gave back in result.
func echoed(t *testing.T, result []byte) map[string]any {
	t.Helper()
	var r struct {
		Completion struct {
			Echo map[string]any `json:"echo"`
		} `json:"completion"`
	}
	require.NoError(t, json.Unmarshal(result, &r), "%s", result)
	require.NotNil(t, r.Completion.Echo, "%s", result)
	return r.Completion.Echo
}

// TestExecPythonHandlerLeaderKilledExactlyOnce: a Python handler (through
// python/rollout_exec.py) runs a batch on three exec workers while the
// leader is SIGKILLed part-way; every item is done exactly once, with the
// handler's answer for its own payload; the CLI's output carries it; the
// workers leave no process behind.
func TestExecPythonHandlerLeaderKilledExactlyOnce(t *testing.T) {
	py := execPython(t)
	const n = 400
	c := startCluster(t)
	marker := execEnv(t)
	var lines []map[string]any
	for i := range n {
		lines = append(lines, map[string]any{"prompt": fmt.Sprintf("item %d", i), "row": float64(i), "sleep": 0.03})
	}
	input := writeLines(t, lines)
	handler := fmt.Sprintf("%q %q echo", py, repoPath(t, "worker/exec/testdata/handler.py"))
	var workers []*localcluster.Worker
	for i := 1; i <= 3; i++ {
		w, err := c.StartWorker(fmt.Sprintf("w%d", i), "--backend", "exec", "--exec", handler, "--exec-procs", "2")
		require.NoError(t, err)
		workers = append(workers, w)
	}
	out, err := cli(t, c, "submit", "--input", input, "--run", "exec")
	require.NoError(t, err, out)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	oldLeader, oldTerm, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	killed := false
	waitDone(t, c, "exec", n, 3*time.Minute, func(rc *rolloutv1.RunCounters) {
		if !killed && rc.GetDone() >= n/4 {
			require.Less(t, rc.GetDone(), uint64(n), "the run finished before the leader could be killed mid-run")
			require.NoError(t, oldLeader.Kill())
			killed = true
			t.Logf("killed leader %s (term %d) at %d/%d done", oldLeader.ID, oldTerm, rc.GetDone(), n)
		}
	})
	require.True(t, killed)
	rc, err := runStatus(ctx, c, "exec")
	require.NoError(t, err)
	require.Equal(t, uint64(n), rc.GetDone(), "every item done, none dead: %v", rc)

	items := resultItems(t, c, "exec", n)
	for i, it := range items {
		require.Equal(t, uint64(i), it.GetIndex())
		require.Equal(t, rolloutv1.ItemState_ITEM_STATE_DONE, it.GetState())
		require.Equal(t, fmt.Sprintf("item %d", i), echoed(t, it.GetResult())["prompt"], "item %d has its own answer", i)
	}
	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	out, err = cli(t, c, "results", "--run", "exec", "-o", outPath)
	require.NoError(t, err, out)
	f, err := os.Open(outPath)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	i := 0
	for sc.Scan() {
		var got map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &got))
		require.Equal(t, float64(i), got["row"])
		require.Equal(t, fmt.Sprintf("item %d", i), got["completion"].(map[string]any)["echo"].(map[string]any)["prompt"])
		i++
	}
	require.Equal(t, n, i, "one output line per input line")

	completed := 0
	for _, w := range workers {
		sigtermAndWait(t, w, time.Minute)
		completed += parseWorkerLog(t, w).completed
		require.Contains(t, w.Tail(1<<20), "programs stopped: count=2")
	}
	require.Equal(t, n, completed, "accepted completions over all workers")
	require.Empty(t, markedProcs(t, marker), "processes left behind by the workers")
}

// itemFailed matches the exec backend's log line for a failed item.
var itemFailed = regexp.MustCompile(`item failed: run=(\S+) index=(\d+) attempt=\d+ reason="(.*)"`)

// TestExecFaultyHandlers runs a batch through a worker whose program
// misbehaves - it crashes on every 7th item it gets, hangs on every 5th,
// answers every 5th with a line that is not JSON, or with an id it was not
// given. The program is restarted each time, and the run still completes
// exactly once (the items are retried); every failure the worker reported
// names what happened. A second run with --max-failures 1 shows the same
// reasons recorded in the ledger as the items' dead reasons.
func TestExecFaultyHandlers(t *testing.T) {
	py := execPython(t)
	c := startCluster(t)
	marker := execEnv(t)
	handler := repoPath(t, "worker/exec/testdata/handler.py")
	for i, tc := range []struct {
		mode   string
		reason []string
	}{
		{"crash7", []string{"exec: the program exited", "exit status 3", `last stderr line: \"crashing on purpose on item 7\"`}},
		{"hang", []string{"exec: no answer in time", "had no answer within 1s", "killed proc 0"}},
		{"garbage", []string{"exec: protocol error", "a line that is not a JSON object", `this is not json`}},
		{"wrongid", []string{"exec: protocol error", "an answer for id", "which it was not given"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			w, err := c.StartWorker(fmt.Sprintf("w%d", i+1), "--backend", "exec", "--exec", fmt.Sprintf("%q %q %s", py, handler, tc.mode),
				"--exec-procs", "1", "--exec-timeout", "1s", "--heartbeat", "200ms")
			require.NoError(t, err)
			const n = 20
			var lines []map[string]any
			for j := range n {
				lines = append(lines, map[string]any{"prompt": fmt.Sprintf("%s %d", tc.mode, j)})
			}
			run := tc.mode
			out, err := cli(t, c, "submit", "--input", writeLines(t, lines), "--run", run, "--max-failures", "20")
			require.NoError(t, err, out)
			rc := waitDone(t, c, run, n, 2*time.Minute, nil)
			require.Equal(t, uint64(n), rc.GetDone(), "every item done exactly once: %v", rc)
			for j, it := range resultItems(t, c, run, n) {
				var res struct {
					Completion struct {
						Index   float64        `json:"index"`
						Payload map[string]any `json:"payload"`
					} `json:"completion"`
				}
				require.NoError(t, json.Unmarshal(it.GetResult(), &res))
				require.Equal(t, float64(j), res.Completion.Index)
				require.Equal(t, fmt.Sprintf("%s %d", tc.mode, j), res.Completion.Payload["prompt"])
			}

			// The same program, every item allowed one failure only.
			const m = 10
			once := run + "-once"
			out, err = cli(t, c, "submit", "--input", writeLines(t, lines[:m]), "--run", once, "--max-failures", "1")
			require.NoError(t, err, out)
			rc = waitDone(t, c, once, m, 2*time.Minute, nil)
			require.Positive(t, rc.GetDead(), "the program misbehaves at least once in %d items", m)
			for _, it := range resultItems(t, c, once, m) {
				if it.GetState() != rolloutv1.ItemState_ITEM_STATE_DEAD {
					continue
				}
				for _, r := range tc.reason {
					require.Contains(t, it.GetReason(), strings.ReplaceAll(r, `\"`, `"`), "dead reason of item %d", it.GetIndex())
				}
			}

			sigtermAndWait(t, w, time.Minute)
			log := w.Tail(1 << 22)
			failed := itemFailed.FindAllStringSubmatch(log, -1)
			require.NotEmpty(t, failed, "the worker logged its failed items:\n%s", w.Tail(3000))
			for _, f := range failed {
				for _, r := range tc.reason {
					require.Contains(t, f[3], r, "reason of %s#%s", f[1], f[2])
				}
			}
			t.Logf("%s: %d failed attempts, e.g. %s", tc.mode, len(failed), failed[0][3])
			require.Empty(t, markedProcs(t, marker), "processes left behind")
		})
	}
}

// TestExecDrainWithProgramsInFlightLeavesNoProcess: SIGTERM to an exec
// worker whose programs are busy with long items (each program has started
// a process of its own too) nacks the in-flight items, stops the programs
// (SIGTERM to their process groups) and exits 0, and no process of the
// worker's is left - no program, no grandchild.
func TestExecDrainWithProgramsInFlightLeavesNoProcess(t *testing.T) {
	py := execPython(t)
	c := startCluster(t)
	marker := execEnv(t)
	const n = 6
	var lines []map[string]any
	for i := range n {
		lines = append(lines, map[string]any{"prompt": fmt.Sprintf("slow %d", i), "sleep": 300, "print": fmt.Sprintf("working on slow item %d", i)})
	}
	w, err := c.StartWorker("w1", "--backend", "exec", "--exec", fmt.Sprintf("%q %q spawn", py, repoPath(t, "worker/exec/testdata/handler.py")),
		"--exec-procs", "2", "--drain-timeout", "2s", "--exec-grace", "5s", "--heartbeat", "200ms")
	require.NoError(t, err)
	out, err := cli(t, c, "submit", "--input", writeLines(t, lines), "--run", "drain")
	require.NoError(t, err, out)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The worker, its two programs and their two grandchildren; two items
	// in flight, two waiting.
	require.Eventually(t, func() bool {
		ws := ledgerWorker(ctx, c, "drain", "w1")
		return ws != nil && ws.GetRunning() == 4 && len(markedProcs(t, marker)) == 5
	}, time.Minute, 50*time.Millisecond, "w1 holds 4 items (2 x --concurrency) and runs two on two programs; processes: %v", markedProcs(t, marker))
	require.Eventually(t, func() bool {
		log := w.Tail(1 << 20)
		return strings.Count(log, "grandchild pid") == 2 && strings.Count(log, "working on slow item") == 2
	}, time.Minute, 50*time.Millisecond, "both programs are working on an item")

	took := sigtermAndWait(t, w, 30*time.Second)
	t.Logf("w1 exited %v after SIGTERM", took.Round(time.Millisecond))
	s := parseWorkerLog(t, w)
	require.True(t, s.deregistered)
	require.Zero(t, s.completed)
	// It held 2 x --concurrency (2) items: two in flight, two waiting.
	require.Len(t, s.nackedItems, 4, "the in-flight and the unstarted items were nacked")
	log := w.Tail(1 << 20)
	require.Contains(t, log, "in_flight=2 cancelled=2", "two items were in flight on the programs when the drain began")
	require.Contains(t, log, "programs stopped: count=2")
	require.Less(t, strings.Index(log, "drain finished"), strings.Index(log, "programs stopped"), "the programs are stopped after the drain's nacks")
	require.NotContains(t, log, "sending SIGKILL", "the programs exited on SIGTERM")
	require.Empty(t, markedProcs(t, marker), "processes left behind by the drained worker")

	rc, err := runStatus(ctx, c, "drain")
	require.NoError(t, err)
	require.Equal(t, uint64(n), rc.GetPending(), "every item is pending again: %v", rc)
}

// torchPython returns Debian's Python with PyTorch, or skips saying why
// (under CI=true, where make test installs it, it fails instead).
func torchPython(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	out, err := osexec.Command(py, "-c", "import torch; print(torch.__version__)").CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("PyTorch does not import under %s (make exec-digits installs Debian's python3-torch): %v: %s", py, err, lastLine(string(out)))
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("environment: " + msg)
	}
	return py
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// TestExecDigitsTorch: the PyTorch example end to end - the model `make
// exec-digits` trains (trained here into a temporary directory when it is
// missing) classifies the 359 held-out digits through two exec workers and
// the cluster; the answers in `rollout results` are at least 90% right.
func TestExecDigitsTorch(t *testing.T) {
	py := torchPython(t)
	data := repoPath(t, ".data/digits.csv.gz")
	if _, err := os.Stat(data); err != nil {
		msg := fmt.Sprintf("the digits data set is missing (run make data): %v", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("environment: " + msg)
	}
	model, inputs := repoPath(t, ".data/digits_torch.pt"), repoPath(t, ".data/digits_heldout.jsonl")
	_, errM := os.Stat(model)
	_, errI := os.Stat(inputs)
	if errM != nil || errI != nil {
		dir := t.TempDir()
		model, inputs = filepath.Join(dir, "digits_torch.pt"), filepath.Join(dir, "digits_heldout.jsonl")
		out, err := osexec.Command(py, repoPath(t, "examples/exec/digits_train.py"), "--data", data, "--model", model, "--inputs", inputs).CombinedOutput()
		require.NoError(t, err, "%s", out)
		t.Logf("%s", out)
	}
	c := startCluster(t)
	marker := execEnv(t)
	handler := fmt.Sprintf("%q %q %q", py, repoPath(t, "examples/exec/digits_torch.py"), model)
	var workers []*localcluster.Worker
	for i := 1; i <= 2; i++ {
		w, err := c.StartWorker(fmt.Sprintf("w%d", i), "--backend", "exec", "--exec", handler, "--exec-procs", "1", "--exec-inflight", "32")
		require.NoError(t, err)
		workers = append(workers, w)
	}
	out, err := cli(t, c, "submit", "--input", inputs, "--run", "digits")
	require.NoError(t, err, out)
	const n = 359
	rc := waitDone(t, c, "digits", n, 3*time.Minute, nil)
	require.Equal(t, uint64(n), rc.GetDone(), "%v", rc)

	outPath := filepath.Join(t.TempDir(), "out.jsonl")
	out, err = cli(t, c, "results", "--run", "digits", "-o", outPath)
	require.NoError(t, err, out)
	f, err := os.Open(outPath)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	right, total := 0, 0
	for sc.Scan() {
		var line struct {
			Label      int `json:"label"`
			Completion struct {
				Digit      *int    `json:"digit"`
				Confidence float64 `json:"confidence"`
				Device     string  `json:"device"`
			} `json:"completion"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), "%s", sc.Bytes())
		require.NotNil(t, line.Completion.Digit, "%s", sc.Bytes())
		require.Contains(t, []string{"cpu", "cuda"}, line.Completion.Device)
		if *line.Completion.Digit == line.Label {
			right++
		}
		total++
	}
	require.NoError(t, sc.Err())
	require.Equal(t, n, total)
	acc := float64(right) / float64(total)
	t.Logf("PyTorch digits through rollout: %d/%d right, accuracy %.4f", right, total, acc)
	require.GreaterOrEqual(t, acc, 0.90)
	for _, w := range workers {
		sigtermAndWait(t, w, time.Minute)
	}
	require.Empty(t, markedProcs(t, marker), "processes left behind")
}
