package exec_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/exec"
)

// python returns a Python 3.9+ interpreter: $ROLLOUT_TEST_PYTHON when set
// (to check the helper under another version), else Debian's
// /usr/bin/python3, else python3 on PATH; it skips the test, saying why,
// when there is none.
func python(t testing.TB) string {
	t.Helper()
	var cands []string
	if p := os.Getenv("ROLLOUT_TEST_PYTHON"); p != "" {
		cands = append(cands, p)
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		cands = append(cands, "/usr/bin/python3")
	}
	if p, err := osexec.LookPath("python3"); err == nil {
		cands = append(cands, p)
	}
	for _, p := range cands {
		if osexec.Command(p, "-c", "import sys; sys.exit(sys.version_info < (3, 9))").Run() == nil {
			return p
		}
	}
	t.Skip("environment: no Python 3.9 or newer (python3) on this machine: the exec backend's tests run real Python programs")
	return ""
}

// handler is the test program's command for mode (testdata/handler.py).
func handler(t testing.TB, mode string) []string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("testdata", "handler.py"))
	require.NoError(t, err)
	return []string{python(t), path, mode}
}

// helperEnv puts python/ (rollout_exec.py) on PYTHONPATH.
func helperEnv(t testing.TB, extra ...string) []string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "python"))
	require.NoError(t, err)
	return append([]string{"PYTHONPATH=" + dir}, extra...)
}

// newBackend starts a backend for cfg (Command and Env filled in by the
// caller) and closes it at cleanup.
func newBackend(t *testing.T, cfg exec.Config) *exec.Backend {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug, Output: testWriter{t}})
	}
	b, err := exec.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, b.Close(ctx))
	})
	return b
}

// testWriter sends log lines to t.Log while the test runs.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	defer func() { _ = recover() }() // a log line after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func item(run string, index uint64, payload string) worker.Item {
	id := make([]byte, 32)
	_, _ = rand.Read(id)
	return worker.Item{Run: run, ID: id, Index: index, Payload: []byte(payload), Attempt: 1}
}

func runItem(t *testing.T, b *exec.Backend, it worker.Item) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return b.Run(ctx, it)
}

// completion decodes {"completion": {...}} into a map.
func completion(t *testing.T, res []byte) map[string]any {
	t.Helper()
	var out struct {
		Completion map[string]any `json:"completion"`
	}
	require.NoError(t, json.Unmarshal(res, &out), "%s", res)
	require.NotNil(t, out.Completion, "%s", res)
	return out.Completion
}

func TestEchoEnvironmentAndStdoutHygiene(t *testing.T) {
	b := newBackend(t, exec.Config{
		Command: handler(t, "echo"), Env: helperEnv(t), WorkerID: "w-test", Procs: 2,
		GPUs: []string{"3", "5"},
	})
	var wg sync.WaitGroup
	results := make([][]byte, 8)
	errs := make([]error, 8)
	for i := range 8 {
		wg.Go(func() {
			p := fmt.Sprintf(`{"prompt": "p%d", "n": %d, "sleep": 0.2,
				"print": "noise on stdout"}`, i, i) // a payload with a newline inside: compacted
			results[i], errs[i] = runItem(t, b, item("r", uint64(i), p))
		})
	}
	wg.Wait()
	procs := map[string]bool{}
	for i := range 8 {
		require.NoError(t, errs[i])
		c := completion(t, results[i])
		echo := c["echo"].(map[string]any)
		require.Equal(t, fmt.Sprintf("p%d", i), echo["prompt"])
		require.Equal(t, "w-test", c["worker"])
		want := map[string]string{"0": "3", "1": "5"}[c["proc"].(string)]
		require.Equal(t, want, c["gpu"], "proc %v gets CUDA_VISIBLE_DEVICES from GPUs[proc %% 2]", c["proc"])
		procs[c["proc"].(string)] = true
	}
	require.Len(t, procs, 2, "both programs got items")
	st := b.Stats()
	require.Equal(t, uint64(8), st.Answered)
	require.Equal(t, uint64(2), st.Started)
	require.Equal(t, 2, st.Running)
	require.Zero(t, st.ProtocolErrors, "print() and writes to fd 1 went to stderr, not the protocol")
}

// TestOpenAIBatchLines: the program gets an OpenAI Batch line's payload as
// it is and answers with the response body; the result is an OpenAI Batch
// result that `rollout results` renders as the line's response.
func TestOpenAIBatchLines(t *testing.T) {
	b := newBackend(t, exec.Config{Command: handler(t, "echo"), Env: helperEnv(t)})
	for _, line := range []string{
		`{"custom_id":"e1","method":"POST","url":"/v1/embeddings","body":{"model":"m","input":["a","b"]}}`,
		`{"custom_id":"c1","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}]}}`,
	} {
		it := item("r", 1, line)
		res, err := runItem(t, b, it)
		require.NoError(t, err)
		r, err := batch.ParseOpenAIResult(res)
		require.NoError(t, err, "%s", res)
		require.Equal(t, 200, r.StatusCode)
		var body struct {
			Echo map[string]any `json:"echo"`
		}
		require.NoError(t, json.Unmarshal(r.Body, &body))
		var want map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &want))
		require.Equal(t, want, body.Echo, "the program got the line as it is")

		var id [32]byte
		copy(id[:], it.ID)
		out, isErr, err := batch.OutputLine(batch.FinishedItem{Payload: it.Payload, ID: it.ID, SampleID: id, Done: true, Result: res})
		require.NoError(t, err)
		require.False(t, isErr)
		require.Contains(t, string(out), `"response":{"status_code":200,"request_id":"","body":{"echo":`)
	}
}

func TestErrorAnswers(t *testing.T) {
	for _, mode := range []string{"echo", "batch"} {
		t.Run(mode, func(t *testing.T) {
			b := newBackend(t, exec.Config{Command: handler(t, mode), Env: helperEnv(t), Inflight: 4})
			_, err := runItem(t, b, item("r", 1, `{"fail": "boom"}`))
			require.ErrorIs(t, err, exec.ErrProgram)
			require.ErrorContains(t, err, "(retryable): ValueError: failing on purpose: boom")
			require.NotErrorIs(t, err, worker.ErrPermanent, "a retryable error is not permanent")
			if mode == "echo" {
				require.ErrorContains(t, err, "Traceback (most recent call last)", "the traceback comes with the error")
				_, err = runItem(t, b, item("r", 2, `{"fail": "permanent", "n": 7}`))
				require.ErrorIs(t, err, exec.ErrProgram)
				require.ErrorContains(t, err, "(not retryable): NotRetryable: bad input 7")
				require.ErrorIs(t, err, worker.ErrPermanent, "the worker reports it failed for good")
			}
			res, err := runItem(t, b, item("r", 3, `{"prompt": "fine"}`))
			require.NoError(t, err)
			require.Equal(t, "fine", completion(t, res)["echo"].(map[string]any)["prompt"])
			require.Equal(t, uint64(1), b.Stats().Started, "an error answer does not restart the program")
		})
	}
}

// TestBatchHandler: serve(batch_size=4) gets the items already sent
// together (Inflight 4), and one failing element fails its item alone.
func TestBatchHandler(t *testing.T) {
	b := newBackend(t, exec.Config{Command: handler(t, "batch"), Env: helperEnv(t), Inflight: 4})
	var wg sync.WaitGroup
	var mu sync.Mutex
	maxBatch := 0.0
	for round := range 3 {
		for i := range 4 {
			wg.Go(func() {
				p := fmt.Sprintf(`{"prompt": "p%d"}`, i)
				if i == 2 {
					p = `{"fail": "element"}`
				}
				res, err := runItem(t, b, item("r", uint64(round*4+i), p))
				if i == 2 {
					require.ErrorIs(t, err, exec.ErrProgram)
					require.ErrorContains(t, err, "failing on purpose: element")
					return
				}
				require.NoError(t, err)
				c := completion(t, res)
				require.Equal(t, fmt.Sprintf("p%d", i), c["echo"].(map[string]any)["prompt"])
				mu.Lock()
				maxBatch = max(maxBatch, c["batch"].(float64))
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	require.GreaterOrEqual(t, maxBatch, 1.0)
	t.Logf("largest batch seen: %v", maxBatch)
}

// TestAnswersInAnyOrder: a program holding four items answers them in
// reverse; each answer reaches its own item.
func TestAnswersInAnyOrder(t *testing.T) {
	b := newBackend(t, exec.Config{Command: handler(t, "reverse"), Env: []string{"HANDLER_K=4"}, Inflight: 4})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			res, err := runItem(t, b, item("r", uint64(i), fmt.Sprintf(`{"k": %d}`, i)))
			require.NoError(t, err)
			c := completion(t, res)
			require.Equal(t, float64(i), c["index"])
			require.Equal(t, float64(i), c["payload"].(map[string]any)["k"])
		})
	}
	wg.Wait()
}

// TestFaults runs items one at a time through a program that misbehaves
// on one of them: that item fails with a reason naming what happened, the
// program is restarted, and every other item gets its own result.
func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		timeout time.Duration
		bad     int // the index that fails
		want    error
		reason  []string
	}{
		{"crash7", 0, 6, exec.ErrExited, []string{"exit status 3", `last stderr line: "crashing on purpose on item 7"`, "holding 1 item(s)"}},
		{"hang", 2 * time.Second, 4, exec.ErrTimeout, []string{"item 4 of run \"r\" had no answer within 2s", "killed proc 0"}},
		{"garbage", 0, 4, exec.ErrProtocol, []string{"a line that is not a JSON object", `"this is not json"`}},
		{"wrongid", 0, 4, exec.ErrProtocol, []string{"an answer for id", "which it was not given"}},
		{"halfline", 0, 4, exec.ErrExited, []string{"exit status 5"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			b := newBackend(t, exec.Config{Command: handler(t, tc.mode), Timeout: tc.timeout, RestartBackoff: 10 * time.Millisecond})
			// The restarted program would misbehave again on its own 5th
			// (7th) item: stop before.
			for i := range tc.bad + 4 {
				res, err := runItem(t, b, item("r", uint64(i), fmt.Sprintf(`{"i": %d}`, i)))
				if i == tc.bad {
					require.ErrorIs(t, err, tc.want)
					for _, r := range tc.reason {
						require.ErrorContains(t, err, r)
					}
					require.Nil(t, res)
					continue
				}
				require.NoError(t, err, "item %d", i)
				require.Equal(t, float64(i), completion(t, res)["index"])
			}
			require.Equal(t, uint64(2), b.Stats().Started, "the program was restarted once")
		})
	}
}

// TestStartUpAllowance: a program that takes longer than Timeout to start
// is not killed for it (StartTimeout); one that never answers its first
// item is, once the allowance and the timeout have passed, with a reason
// that says so.
func TestStartUpAllowance(t *testing.T) {
	b := newBackend(t, exec.Config{Command: handler(t, "slowstart"), Env: helperEnv(t), Timeout: 500 * time.Millisecond, StartTimeout: time.Minute})
	res, err := runItem(t, b, item("r", 0, `{"prompt": "late"}`))
	require.NoError(t, err)
	require.Equal(t, "late", completion(t, res)["echo"].(map[string]any)["prompt"])
	require.Equal(t, uint64(1), b.Stats().Started)

	b = newBackend(t, exec.Config{Command: handler(t, "hangfirst"), Timeout: 300 * time.Millisecond, StartTimeout: 300 * time.Millisecond})
	start := time.Now()
	_, err = runItem(t, b, item("r", 0, `{}`))
	require.ErrorIs(t, err, exec.ErrTimeout)
	require.ErrorContains(t, err, "after a start-up allowance of 300ms: the program had answered nothing yet")
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
}

// TestDuplicateAnswer: a second answer for an id is a protocol error; the
// first answer stands and no item gets another's result.
func TestDuplicateAnswer(t *testing.T) {
	b := newBackend(t, exec.Config{Command: handler(t, "dup"), RestartBackoff: 10 * time.Millisecond})
	for i := range 6 {
		res, err := runItem(t, b, item("r", uint64(i), `{}`))
		if err != nil {
			require.ErrorIs(t, err, exec.ErrProtocol)
			require.ErrorContains(t, err, "a second answer for id")
			continue
		}
		require.Equal(t, float64(i), completion(t, res)["index"])
	}
	require.Positive(t, b.Stats().ProtocolErrors)
}

func TestResultLimits(t *testing.T) {
	b := newBackend(t, exec.Config{Command: handler(t, "big"), MaxResultBytes: 1000, RestartBackoff: 10 * time.Millisecond})
	_, err := runItem(t, b, item("r", 0, `{"size": 100}`))
	require.NoError(t, err)
	_, err = runItem(t, b, item("r", 1, `{"size": 2000}`))
	require.ErrorIs(t, err, exec.ErrProtocol)
	require.ErrorContains(t, err, "over the limit of 1000")
	_, err = runItem(t, b, item("r", 2, `{"size": 100000}`))
	require.ErrorIs(t, err, exec.ErrProtocol)
	require.ErrorContains(t, err, "a line over the limit of")
	_, err = runItem(t, b, item("r", 3, `{"size": 10}`))
	require.NoError(t, err)
}

// TestExitAtStart: a program that cannot start (an import fails) fails the
// items it is given with its exit status and the error it printed; it is
// restarted with a growing backoff.
func TestExitAtStart(t *testing.T) {
	b := newBackend(t, exec.Config{Command: handler(t, "exit1"), RestartBackoff: 20 * time.Millisecond, MaxRestartBackoff: 100 * time.Millisecond})
	for i := range 3 {
		_, err := runItem(t, b, item("r", uint64(i), `{}`))
		require.ErrorIs(t, err, exec.ErrExited)
		require.ErrorContains(t, err, "exit status 1")
		require.ErrorContains(t, err, `last stderr line: "ImportError: no module named nonexistent"`)
	}
	require.GreaterOrEqual(t, b.Stats().Started, uint64(3))
}

func TestBadPayloadAndConfig(t *testing.T) {
	b := newBackend(t, exec.Config{Command: handler(t, "echo"), Env: helperEnv(t)})
	_, err := runItem(t, b, item("r", 0, `not json`))
	require.ErrorIs(t, err, exec.ErrBadPayload)
	require.ErrorContains(t, err, "item 0 of run \"r\"")

	_, err = exec.New(exec.Config{Command: []string{"/nonexistent/program", "x"}})
	require.ErrorContains(t, err, `starting "/nonexistent/program"`)
	for _, tc := range []struct {
		cfg  exec.Config
		want string
	}{
		{exec.Config{}, "Command is required"},
		{exec.Config{Command: []string{"x"}, Procs: -1}, "Procs must be >= 0"},
		{exec.Config{Command: []string{"x"}, Timeout: -1}, "Timeout must be >= 0"},
		{exec.Config{Command: []string{"x"}, GPUs: []string{"0", "1 2"}}, `GPUs[1] "1 2" is not a device`},
		{exec.Config{Command: []string{"x"}, Env: []string{"NOEQUALS"}}, `Env[0] "NOEQUALS" is not KEY=VALUE`},
		{exec.Config{Command: []string{"x"}, Dir: "/nonexistent/dir"}, "Dir:"},
	} {
		_, err := exec.New(tc.cfg)
		require.ErrorIs(t, err, exec.ErrInvalidConfig)
		require.ErrorContains(t, err, tc.want)
	}
}

// TestCancelledItemKeepsItsSlot: an item whose context ends returns at
// once; its program keeps the slot until it answers, and the late answer is
// dropped.
func TestCancelledItemKeepsItsSlot(t *testing.T) {
	b := newBackend(t, exec.Config{Command: handler(t, "echo"), Env: helperEnv(t)})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := b.Run(ctx, item("r", 0, `{"sleep": 0.5}`))
		errc <- err
	}()
	require.Eventually(t, func() bool { return b.Stats().Held == 1 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	require.Equal(t, 1, b.Stats().Held, "the program keeps the cancelled item until it answers")
	require.Eventually(t, func() bool { return b.Stats().Held == 0 }, 10*time.Second, 5*time.Millisecond)
	res, err := runItem(t, b, item("r", 1, `{"prompt": "next"}`))
	require.NoError(t, err)
	require.Equal(t, "next", completion(t, res)["echo"].(map[string]any)["prompt"])
	require.Zero(t, b.Stats().ProtocolErrors, "the late answer for the cancelled item is no protocol error")
}

// TestSameIDTwoRuns: two runs may hold items with the same sample id; a
// program never holds both at once, so each gets its own answer.
func TestSameIDTwoRuns(t *testing.T) {
	b := newBackend(t, exec.Config{Command: handler(t, "echo"), Env: helperEnv(t), Inflight: 2})
	a, c := item("a", 0, `{"run": "a", "sleep": 0.1}`), item("c", 0, `{"run": "c", "sleep": 0.1}`)
	c.ID = a.ID
	var wg sync.WaitGroup
	for _, it := range []worker.Item{a, c} {
		wg.Go(func() {
			res, err := runItem(t, b, it)
			require.NoError(t, err)
			require.Equal(t, it.Run, completion(t, res)["echo"].(map[string]any)["run"])
		})
	}
	wg.Wait()
}

// procsWithMarker lists the processes whose environment holds marker (the
// programs, and whatever they started: the environment is inherited).
func procsWithMarker(t *testing.T, marker string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("environment: no /proc to look for leftover processes in: %v", err)
	}
	var out []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !strings.Contains(string(env), marker) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			s := string(stat)
			if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && s[i+2] == 'Z' {
				continue // a zombie: dead, its parent not yet told
			}
		}
		out = append(out, pid)
	}
	return out
}

func newMarker() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "ROLLOUT_EXEC_TEST_MARKER=" + hex.EncodeToString(b)
}

// TestCloseWithItemsInFlightLeavesNoProcess: Close while every program is
// busy (and each has started a grandchild) fails the items with ErrClosed
// and leaves no process behind: programs and grandchildren alike.
func TestCloseWithItemsInFlightLeavesNoProcess(t *testing.T) {
	marker := newMarker()
	b, err := exec.New(exec.Config{Command: handler(t, "spawn"), Env: helperEnv(t, marker), Procs: 2, StopGrace: 5 * time.Second})
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { _, errs[i] = runItem(t, b, item("r", uint64(i), `{"sleep": 60}`)) })
	}
	// Two programs and two grandchildren.
	require.Eventually(t, func() bool { return len(procsWithMarker(t, marker)) == 4 }, 20*time.Second, 10*time.Millisecond,
		"processes with the marker: %v", procsWithMarker(t, marker))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, b.Close(ctx))
	wg.Wait()
	for _, err := range errs {
		require.ErrorIs(t, err, exec.ErrClosed)
	}
	require.Less(t, time.Since(start), 5*time.Second, "the programs exited on SIGTERM, before the grace period")
	require.Empty(t, procsWithMarker(t, marker), "no process outlives Close")
	_, err = runItem(t, b, item("r", 9, `{}`))
	require.ErrorIs(t, err, exec.ErrClosed)
}

// TestCloseKillsProgramsIgnoringSIGTERM: a program that ignores SIGTERM and
// the end of its input is SIGKILLed after StopGrace.
func TestCloseKillsProgramsIgnoringSIGTERM(t *testing.T) {
	marker := newMarker()
	b, err := exec.New(exec.Config{Command: handler(t, "noterm"), Env: helperEnv(t, marker), StopGrace: 300 * time.Millisecond})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(procsWithMarker(t, marker)) == 1 }, 20*time.Second, 10*time.Millisecond)
	// Let it install its SIGTERM handler: it closes its stdin when it has.
	pid := b.Pids()[0]
	require.Eventually(t, func() bool {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if fd.Name() == "0" {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "the program closed its stdin")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, b.Close(ctx))
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "SIGKILL only after the grace period")
	require.Empty(t, procsWithMarker(t, marker))
}

// TestProgramsDieWithTheWorker: a worker process SIGKILLed without Close
// takes its programs with it (Linux's parent-death signal).
func TestProgramsDieWithTheWorker(t *testing.T) {
	if os.Getenv("ROLLOUT_EXEC_TEST_WORKER") == "1" {
		return // the helper's own run of this test
	}
	py := python(t)
	marker := newMarker()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := osexec.Command(exe, "-test.run=^TestMain$")
	cmd.Env = append(os.Environ(), "ROLLOUT_EXEC_TEST_WORKER=1", "ROLLOUT_EXEC_TEST_PYTHON="+py, marker)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(t, func() bool { return len(procsWithMarker(t, marker)) >= 3 }, 20*time.Second, 10*time.Millisecond,
		"the helper worker and its two programs run")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	require.Eventually(t, func() bool { return len(procsWithMarker(t, marker)) == 0 }, 20*time.Second, 10*time.Millisecond,
		"programs outlived their worker: %v", procsWithMarker(t, marker))
}

func TestMain(m *testing.M) {
	if os.Getenv("ROLLOUT_EXEC_TEST_WORKER") == "1" {
		os.Exit(helperWorker())
	}
	os.Exit(m.Run())
}

// helperWorker is the process TestProgramsDieWithTheWorker kills: a
// backend with two programs, never closed.
func helperWorker() int {
	path, _ := filepath.Abs(filepath.Join("testdata", "handler.py"))
	pydir, _ := filepath.Abs(filepath.Join("..", "..", "python"))
	_, err := exec.New(exec.Config{Command: []string{os.Getenv("ROLLOUT_EXEC_TEST_PYTHON"), path, "echo"}, Env: []string{"PYTHONPATH=" + pydir}, Procs: 2})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper worker:", err)
		return 1
	}
	time.Sleep(time.Hour) // until killed
	return 0
}

func TestBackoffConfigDefaults(t *testing.T) {
	require.NoError(t, exec.Config{Command: []string{"x"}}.Validate())
	require.True(t, errors.Is(exec.Config{Command: []string{"x"}, Inflight: 1 << 20}.Validate(), exec.ErrInvalidConfig))
}

// TestHelperIsPython39: python/rollout_exec.py and the examples parse with
// Python 3.9's grammar (ast's feature_version; the whole test suite also
// passes with ROLLOUT_TEST_PYTHON set to a Python 3.9 interpreter).
func TestHelperIsPython39(t *testing.T) {
	py := python(t)
	for _, f := range []string{"../../python/rollout_exec.py", "../../examples/exec/wordcount.py", "../../examples/exec/digits_torch.py", "../../examples/exec/digits_train.py", "testdata/handler.py"} {
		out, err := osexec.Command(py, "-c", "import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1], feature_version=(3, 9))", f).CombinedOutput()
		require.NoError(t, err, "%s: %s", f, out)
	}
}

// BenchmarkRoundTrip measures one item's trip through a program that
// answers at once (a raw Python loop): one at a time, and eight in flight
// on one program.
func BenchmarkRoundTrip(b *testing.B) {
	for _, inflight := range []int{1, 8} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			be, err := exec.New(exec.Config{Command: handler(b, "reverse"), Env: []string{"HANDLER_K=1"}, Inflight: inflight})
			require.NoError(b, err)
			defer func() { require.NoError(b, be.Close(context.Background())) }()
			it := item("r", 0, `{"prompt": "hello"}`)
			ctx := context.Background()
			b.ResetTimer()
			var wg sync.WaitGroup
			per := (b.N + inflight - 1) / inflight
			for range inflight {
				wg.Go(func() {
					for range per {
						cp := it
						cp.ID = make([]byte, 32)
						_, _ = rand.Read(cp.ID)
						if _, err := be.Run(ctx, cp); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// escapeScript is a program that leaves two processes outside its process
// group before it execs the echo handler: `setsid sleep 1000` (its own
// child, in a session of its own) and, by a double fork, another whose
// parent exits at once. Each writes its pid to $ESCAPE_DIR.
const escapeScript = `setsid sleep 1000 </dev/null >/dev/null 2>&1 &
echo $! > "$ESCAPE_DIR/setsid.$ROLLOUT_PROC"
( setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > "$ESCAPE_DIR/double.$ROLLOUT_PROC" ) &
exec "$@"`

// escapedPids starts a backend running escapeScript in front of handler
// mode and returns it with the two escaped pids of proc 0 once they run.
func escapedPids(t *testing.T, mode string, cfg exec.Config) (*exec.Backend, int, int) {
	t.Helper()
	if _, err := osexec.LookPath("setsid"); err != nil {
		// util-linux's setsid is on every Linux CI machine: never skip there.
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true requires the escaped-process tests: no setsid command: %v", err)
		}
		t.Skipf("environment: no setsid command on this machine (util-linux): %v; with CI=true this fails", err)
	}
	dir := t.TempDir()
	cfg.Command = append([]string{"sh", "-c", escapeScript, "escape"}, handler(t, mode)...)
	cfg.Env = helperEnv(t, "ESCAPE_DIR="+dir)
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug, Output: testWriter{t}})
	b, err := exec.New(cfg)
	require.NoError(t, err)
	pids := make([]int, 2)
	for i, name := range []string{"setsid.0", "double.0"} {
		require.Eventually(t, func() bool {
			data, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				return false
			}
			_, err = fmt.Sscanf(string(data), "%d", &pids[i])
			return err == nil && alive(pids[i])
		}, 20*time.Second, 10*time.Millisecond, "the program's %s process runs", name)
	}
	return b, pids[0], pids[1]
}

// alive: pid names a process that has not ended (a zombie has ended).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true // no /proc: kill(pid, 0) says it is there
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// ppid is pid's parent process id from /proc.
func ppid(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(stat)
	var state string
	var pp int
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		_, _ = fmt.Sscanf(s[i+1:], " %s %d", &state, &pp)
	}
	return pp
}

// TestCloseEndsEscapedDescendants: processes a program started that left
// its process group (setsid, a double fork) are the worker's (it is their
// subreaper) and end with Close, reaped: no process and no zombie is left.
func TestCloseEndsEscapedDescendants(t *testing.T) {
	b, setsidPid, doublePid := escapedPids(t, "echo", exec.Config{StopGrace: 5 * time.Second})
	t.Cleanup(func() { _ = syscall.Kill(setsidPid, syscall.SIGKILL); _ = syscall.Kill(doublePid, syscall.SIGKILL) })
	_, err := runItem(t, b, item("r", 0, `{"x": 1}`))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return ppid(doublePid) == os.Getpid() }, 20*time.Second, 10*time.Millisecond,
		"the double-forked process is reparented to the worker (its subreaper), not to init: ppid %d", ppid(doublePid))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, b.Close(ctx))
	for _, pid := range []int{setsidPid, doublePid} {
		require.Eventually(t, func() bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }, 20*time.Second, 10*time.Millisecond,
			"process %d a program left outside its group is gone and reaped after Close", pid)
	}
}

// TestRestartEndsEscapedDescendants: a program that exits takes what it
// left outside its process group with it, as it does its group.
func TestRestartEndsEscapedDescendants(t *testing.T) {
	b, setsidPid, doublePid := escapedPids(t, "crash7", exec.Config{})
	t.Cleanup(func() {
		_ = syscall.Kill(setsidPid, syscall.SIGKILL)
		_ = syscall.Kill(doublePid, syscall.SIGKILL)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, b.Close(ctx))
	})
	for i := range 7 {
		_, _ = runItem(t, b, item("r", uint64(i), `{}`))
	}
	for _, pid := range []int{setsidPid, doublePid} {
		require.Eventually(t, func() bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }, 20*time.Second, 10*time.Millisecond,
			"process %d of a program that exited is gone and reaped", pid)
	}
}

// TestEscapedZombiesAreReaped: a process a program left outside its group
// that ends while the worker runs is reaped (no zombie accumulates).
func TestEscapedZombiesAreReaped(t *testing.T) {
	b, _, doublePid := escapedPids(t, "echo", exec.Config{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, b.Close(ctx))
	})
	require.Eventually(t, func() bool { return ppid(doublePid) == os.Getpid() }, 20*time.Second, 10*time.Millisecond,
		"the double-forked process is the worker's child now: ppid %d", ppid(doublePid))
	require.NoError(t, syscall.Kill(doublePid, syscall.SIGTERM))
	require.Eventually(t, func() bool { return errors.Is(syscall.Kill(doublePid, 0), syscall.ESRCH) }, 20*time.Second, 10*time.Millisecond,
		"the ended process was reaped while the backend runs")
	_, err := runItem(t, b, item("r", 0, `{"x": 1}`))
	require.NoError(t, err)
}
