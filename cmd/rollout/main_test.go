package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/client/runs/runstest"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// writeInput writes n valid lines (with a blank line after the first) and
// returns the path (see runstest.WriteInput).
func writeInput(t *testing.T, n int) string {
	t.Helper()
	path, err := runstest.WriteInput(t.TempDir(), n)
	require.NoError(t, err)
	return path
}

// submitFile submits the input at path to the fake as run (test setup).
func submitFile(t *testing.T, fake *fakeCoord, run, path string) {
	t.Helper()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files = run, []string{path}
	_, err := runs.Submit(context.Background(), fake, cfg)
	require.NoError(t, err)
}

// cliResult is the outcome of one in-process CLI run.
type cliResult struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, fake *fakeCoord, args ...string) cliResult {
	t.Helper()
	var out, errOut bytes.Buffer
	a := newApp(&out, &errOut, false)
	if fake != nil {
		a.connect = connectFake(fake, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	full := withInsecure(args)
	code := a.execute(ctx, full)
	stderr := errOut.String()
	if len(full) > len(args) {
		// The helper added --insecure; it also takes away its announcement.
		stderr = strings.Replace(stderr, insecureWarning+"\n", "", 1)
	}
	return cliResult{code: code, stdout: out.String(), stderr: stderr}
}

// withInsecure prepends --insecure to args that give no TLS flags: the
// fake coordinator has no transport, and the CLI refuses to connect
// without TLS or --insecure.
func withInsecure(args []string) []string {
	for _, a := range args {
		if strings.HasPrefix(a, "--tls-") || a == "--insecure" || a == "--insecure=false" {
			return args
		}
	}
	return append([]string{"--insecure"}, args...)
}

func TestExitCodesForUsage(t *testing.T) {
	in := writeInput(t, 2)
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"no command", nil, "no command given"},
		{"unknown command", []string{"bogus"}, `unknown command "bogus"`},
		{"unknown flag", []string{"status", "--coord", "127.0.0.1:1", "--bogus"}, "unknown flag: --bogus"},
		{"missing input or config", []string{"submit", "--coord", "127.0.0.1:1"}, "submit needs --config RUN.toml, or --input FILE.jsonl with --run NAME"},
		{"input without run", []string{"submit", "--coord", "127.0.0.1:1", "--input", in}, "submit needs --config"},
		{"config and input", []string{"submit", "--coord", "127.0.0.1:1", "--config", "x.toml", "--input", in}, "cannot be used together"},
		{"negative stale-after", []string{"submit", "--coord", "127.0.0.1:1", "--run", "r", "--input", in, "--stale-after", "-1s"}, "--stale-after"},
		{"negative max-errors", []string{"submit", "--coord", "127.0.0.1:1", "--run", "r", "--input", in, "--max-errors", "-1"}, "--max-errors"},
		{"results without run", []string{"results", "--coord", "127.0.0.1:1"}, "results needs --config"},
		{"watch without run", []string{"status", "--coord", "127.0.0.1:1", "--watch"}, "--watch needs --run"},
		{"missing coord", []string{"status"}, `"coord" not set`},
		{"bad coord", []string{"status", "--coord", "localhost"}, `--coord "localhost": not host:port`},
		{"bad coord port", []string{"status", "--coord", "h:99999"}, "port"},
		{"empty coord", []string{"status", "--coord", ","}, "--coord needs at least one host:port"},
		{"partial tls", []string{"status", "--coord", "127.0.0.1:1", "--tls-ca", "ca.pem"}, "must be given together"},
		{"bad timeout", []string{"status", "--coord", "127.0.0.1:1", "--timeout", "0s"}, "--timeout must be positive"},
		{"bad log level", []string{"status", "--coord", "127.0.0.1:1", "--log-level", "loud"}, "--log-level"},
		{"empty run", []string{"results", "--coord", "127.0.0.1:1", "--run", "", "-o", "x"}, "--run must name the run"},
		{"padded run", []string{"submit", "--coord", "127.0.0.1:1", "--run", " r", "--input", in}, "leading or trailing spaces"},
		{"bad chunk", []string{"submit", "--coord", "127.0.0.1:1", "--run", "r", "--input", in, "--chunk-items", "0"}, "--chunk-items"},
		{"extra args", []string{"status", "--coord", "127.0.0.1:1", "extra"}, "unknown command"},
		{"demo with tls", []string{"demo", "--tls-ca", "a", "--tls-cert", "b", "--tls-key", "c"}, "makes its own certificates"},
		{"demo kill-at", []string{"demo", "--bin", t.TempDir(), "--kill-at", "1.5"}, "--kill-at"},
		{"demo workers", []string{"demo", "--bin", t.TempDir(), "--workers", "0"}, "--workers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFakeCoord()
			r := runCLI(t, fake, tt.args...)
			require.Equal(t, exitUsage, r.code, "stderr: %s", r.stderr)
			require.Contains(t, r.stderr, tt.want)
			require.Contains(t, r.stderr, "--help' for usage")
			require.Empty(t, fake.Submits, "a usage error must change nothing")
		})
	}
}

func TestHelpExitsZero(t *testing.T) {
	r := runCLI(t, nil, "submit", "--help")
	require.Equal(t, exitOK, r.code)
	require.Contains(t, r.stdout, "--wait")
	require.Contains(t, r.stdout, "--tls-ca")
}

func TestSubmitInvalidInputSubmitsNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.jsonl")
	content := strings.Join([]string{
		`{"prompt": "fine"}`,
		`{"prompt": 42}`,
		``,
		`not json`,
		`["array"]`,
		`{"prompt": "ok"}`,
	}, "\n") + "\n"
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	fake := newFakeCoord()
	r := runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--input", path, "--run", "bad")
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, path+`:2: "prompt" must be a string, got a number`)
	require.Contains(t, r.stderr, path+":4: not valid JSON")
	require.Contains(t, r.stderr, path+":5: not a JSON object (got an array)")
	require.NotContains(t, r.stderr, path+":1:")
	require.NotContains(t, r.stderr, path+":3:")
	require.Contains(t, r.stderr, "3 invalid line(s) of 6; nothing was submitted")
	require.Empty(t, fake.Submits)
	require.Empty(t, fake.Runs)
}

func TestSubmitMissingFile(t *testing.T) {
	fake := newFakeCoord()
	r := runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--input", filepath.Join(t.TempDir(), "nope.jsonl"), "--run", "r")
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, "input: open")
	require.Contains(t, r.stderr, "nope.jsonl")
}

func TestSubmitWaitThroughCLI(t *testing.T) {
	path := writeInput(t, 12)
	fake := newFakeCoord()
	fake.OnStatus = func(f *fakeCoord) {
		// Each poll finishes four more items.
		done := uint64(0)
		for _, it := range f.Runs["w"].Items {
			if it.GetState() == rolloutv1.ItemState_ITEM_STATE_DONE {
				done++
			}
		}
		f.FinishLocked("w", done, min(done+4, 12), "")
	}
	r := runCLI(t, fake, "submit", "--coord", "127.0.0.1:1,127.0.0.1:2", "--input", path, "--run", "w",
		"--wait", "--interval", "10ms")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `submitted run "w": 12 items in 1 chunk: 12 created`)
	require.Contains(t, r.stdout, "12/12 done, 0 dead (100.0%)")
	require.Contains(t, r.stdout, "finished in")
	require.NotContains(t, r.stdout, "\r", "no terminal: plain lines")
	require.GreaterOrEqual(t, fake.Statuses, 3)
	require.True(t, fake.Closed)
}

func TestSubmitWaitFailsOnDeadItems(t *testing.T) {
	path := writeInput(t, 4)
	fake := newFakeCoord()
	fake.OnStatus = func(f *fakeCoord) {
		f.FinishLocked("d", 0, 3, "")
		f.FinishLocked("d", 3, 4, "backend exploded")
	}
	r := runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--input", path, "--run", "d", "--wait", "--interval", "10ms")
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, `run "d" finished with 1 dead item(s) of 4`)
}

func TestClientConfigFromFlags(t *testing.T) {
	fake := newFakeCoord()
	var got coordclient.Config
	var out, errOut bytes.Buffer
	a := newApp(&out, &errOut, false)
	a.connect = connectFake(fake, &got)
	code := a.execute(context.Background(), []string{"--insecure", "status", "--coord", "127.0.0.1:1, 127.0.0.1:2", "--coord", "127.0.0.1:1,127.0.0.1:3", "--timeout", "4s"})
	require.Equal(t, exitOK, code, errOut.String())
	require.Equal(t, []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}, got.Addrs, "split, trimmed, de-duplicated")
	require.Equal(t, 4*time.Second, got.CallTimeout)
	require.Nil(t, got.TLS)
	require.NoError(t, got.Validate())
}

func TestTLSFilesMissing(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, newFakeCoord(), "status", "--coord", "127.0.0.1:1", "--tls-ca", filepath.Join(dir, "ca.pem"),
		"--tls-cert", filepath.Join(dir, "c.pem"), "--tls-key", filepath.Join(dir, "k.pem"))
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, "--tls-ca")
}

func TestStatus(t *testing.T) {
	fake := newFakeCoord()
	path := writeInput(t, 10)
	submitFile(t, fake, "alpha", path)
	submitFile(t, fake, "beta", path)
	fake.Finish("alpha", 0, 7, "")
	fake.Finish("alpha", 7, 8, "boom")
	fake.Workers = []*rolloutv1.WorkerStatus{
		{Id: "w2", Running: 5, RunningLong: 2, OwnerLost: 1, Backlog: 1, ItemsPerSec: 12.34, LastHeartbeatUnixMs: 1_000_000 - 1500, Kinds: []string{"batch", "train"}},
		{Id: "w1", Running: 0, Lost: true, LastHeartbeatUnixMs: 1_000_000 - 65_000, Completed: 40},
	}

	r := runCLI(t, fake, "status", "--coord", "127.0.0.1:1")
	require.Equal(t, exitOK, r.code, r.stderr)
	lines := strings.Split(r.stdout, "\n")
	require.Equal(t, "leader c1, term 2", lines[0])
	require.Regexp(t, `RUN\s+TENANT\s+PRI\s+SHARE\s+TOTAL\s+PENDING\s+RUNNING\s+\(ON TIME\s+LONG\s+OWNER LOST\)\s+DONE\s+DEAD\s+FAILURES`, r.stdout)
	require.Regexp(t, `alpha\s+default\s+3\s+-\s+10\s+2\s+0\s+0\s+0\s+0\s+7\s+1\s+0`, r.stdout)
	require.Regexp(t, `beta\s+default\s+3\s+-\s+10\s+10\s+0\s+0\s+0\s+0\s+0\s+0\s+0`, r.stdout)
	require.Regexp(t, `WORKER\s+KINDS\s+RUNNING\s+\(ON TIME\s+LONG\s+OWNER LOST\)\s+BACKLOG\s+RATE/S\s+COMPLETED\s+LAST HEARTBEAT\s+LOST`, r.stdout)
	require.Regexp(t, `w1\s+any\s+0\s+0\s+0\s+0\s+0\s+0\.0\s+40\s+1m05s ago\s+yes`, r.stdout)
	require.Regexp(t, `w2\s+batch,train\s+5\s+2\s+2\s+1\s+1\s+12\.3\s+0\s+1\.5s ago\s+no`, r.stdout)
	require.Less(t, strings.Index(r.stdout, "w1"), strings.Index(r.stdout, "w2"), "workers sorted by id")

	// A stalled run says which input object and since when.
	fake.Mu.Lock()
	fake.Runs["beta"].Stall = &rolloutv1.RunStall{Object: "runs/beta/inputs/c0", Reason: "object not found", SinceUnixMs: 1_000_000 - 65_000}
	fake.Mu.Unlock()
	r = runCLI(t, fake, "status", "--coord", "127.0.0.1:1")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `beta\s+default\s+3\s+-\s+10\s+10\s+.*stalled: input object runs/beta/inputs/c0 missing \(since \S+, 1m05s ago\)\n`, r.stdout)
	fake.Mu.Lock()
	fake.Runs["beta"].Stall = nil
	fake.Mu.Unlock()

	// A run made of ranges adds RANGES: the records the ledger holds.
	require.NotContains(t, r.stdout, "RANGES", "no run of ranges, no RANGES column")
	fake.Mu.Lock()
	fake.Runs["beta"].Ranges = 3
	fake.Mu.Unlock()
	r = runCLI(t, fake, "status", "--coord", "127.0.0.1:1")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `RUN\s+TENANT\s+PRI\s+SHARE\s+TOTAL\s+PENDING\s+RUNNING\s+\(ON TIME\s+LONG\s+OWNER LOST\)\s+DONE\s+DEAD\s+FAILURES\s+RANGES\s+CLUSTER\s+STATE`, r.stdout)
	require.Regexp(t, `alpha\s+default\s+3\s+-\s+10\s+2\s+0\s+0\s+0\s+0\s+7\s+1\s+0\s+-\s`, r.stdout)
	require.Regexp(t, `beta\s+default\s+3\s+-\s+10\s+10\s+0\s+0\s+0\s+0\s+0\s+0\s+0\s+3\s`, r.stdout)
	fake.Mu.Lock()
	fake.Runs["beta"].Ranges = 0
	fake.Mu.Unlock()

	r = runCLI(t, fake, "status", "--coord", "127.0.0.1:1", "--run", "beta")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "beta")
	require.NotContains(t, r.stdout, "alpha")

	r = runCLI(t, fake, "status", "--coord", "127.0.0.1:1", "--run", "gamma")
	require.Equal(t, exitFailure, r.code)
	require.Equal(t, "rollout: run \"gamma\" not found\n", r.stderr)
}

// TestStatusModels: the workers table shows each worker's models once one
// names some, and a run whose model no live worker serves says so in its
// state.
func TestStatusModels(t *testing.T) {
	fake := newFakeCoord()
	path := writeInput(t, 4)
	for run, model := range map[string]string{"served": "A", "unserved": "B"} {
		cfg := runs.DefaultSubmitConfig()
		cfg.Run, cfg.Files, cfg.Model = run, []string{path}, model
		_, err := runs.Submit(context.Background(), fake, cfg)
		require.NoError(t, err)
	}
	fake.Workers = []*rolloutv1.WorkerStatus{
		{Id: "wa", Models: []string{"A", "C"}, LastHeartbeatUnixMs: 1_000_000 - 500},
		{Id: "wb", Models: []string{"B"}, Lost: true, LastHeartbeatUnixMs: 1_000_000 - 65_000},
		{Id: "wk", Kinds: []string{"train"}, LastHeartbeatUnixMs: 1_000_000 - 500},
	}
	r := runCLI(t, fake, "status", "--coord", "127.0.0.1:1")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `unserved\s+default\s+3\s+-\s+4\s+4\s+.*waiting: no live worker serves model B\n`, r.stdout)
	require.Regexp(t, `served\s+default\s+3\s+-\s+4\s+4\s+.*running`, r.stdout)
	require.NotRegexp(t, `(?m)^served .*waiting`, r.stdout)
	require.Regexp(t, `WORKER\s+KINDS\s+MODELS\s+RUNNING`, r.stdout)
	require.Regexp(t, `wa\s+any\s+A,C\s+0`, r.stdout)
	require.Regexp(t, `wb\s+any\s+B\s+0`, r.stdout)
	require.Regexp(t, `wk\s+train\s+any\s+0`, r.stdout)
}

func TestRunState(t *testing.T) {
	now := time.UnixMilli(100_000)
	tests := []struct {
		rc   *rolloutv1.RunCounters
		want string
	}{
		{&rolloutv1.RunCounters{Total: 2, Done: 2, CreatedUnixMs: 10_000, FinishedUnixMs: 22_500}, "finished in 12.5s"},
		{&rolloutv1.RunCounters{Total: 2, Done: 1, Dead: 1}, "finished"},
		{&rolloutv1.RunCounters{Total: 2, ExpectedTotal: 5, Done: 2}, "waiting for items"},
		{&rolloutv1.RunCounters{Total: 2, Pending: 1, Done: 1, CreatedUnixMs: 40_000}, "running for 1m00s"},
		{&rolloutv1.RunCounters{Total: 2, Running: 2}, "running"},
		{&rolloutv1.RunCounters{Total: 2, Pending: 2, Model: "Qwen/Qwen2.5-0.5B-Instruct", UnservedModel: true, CreatedUnixMs: 40_000},
			"waiting: no live worker serves model Qwen/Qwen2.5-0.5B-Instruct"},
		{&rolloutv1.RunCounters{Total: 2, Done: 2, Model: "m", UnservedModel: true}, "finished"},
		{&rolloutv1.RunCounters{Total: 2, Pending: 2, Stall: &rolloutv1.RunStall{Object: "runs/r/inputs/ab", Reason: "object not found",
			SinceUnixMs: 35_000}}, "stalled: input object runs/r/inputs/ab missing (since 1970-01-01T00:00:35Z, 1m05s ago)"},
		{&rolloutv1.RunCounters{Total: 2, Pending: 2, Stall: &rolloutv1.RunStall{Object: "o", Reason: "bytes do not match their recorded blake3",
			SinceUnixMs: 99_000}}, "stalled: input object o missing or changed (since 1970-01-01T00:01:39Z, 1.0s ago)"},
		{&rolloutv1.RunCounters{Total: 2, Pending: 2, Stall: &rolloutv1.RunStall{Object: "o", StoreUnreachable: true,
			Reason: "object store unavailable: dial tcp 127.0.0.1:9: connect: connection refused", SinceUnixMs: 35_000}},
			"store unreachable since 1970-01-01T00:00:35Z (1m05s ago): object store unavailable: dial tcp 127.0.0.1:9: connect: connection refused"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, runState(tt.rc, now))
	}
}

func TestResults(t *testing.T) {
	fake := newFakeCoord()
	submitFile(t, fake, "r", writeInput(t, 7))
	fake.Finish("r", 0, 4, "")
	fake.Finish("r", 4, 5, "attempts exhausted")
	fake.Finish("r", 6, 7, "")
	// index 5 stays pending

	out := filepath.Join(t.TempDir(), "out.jsonl")
	r := runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--run", "r", "-o", out, "--page-size", "2")
	require.Equal(t, exitIncomplete, r.code, "the pending item's line is missing: %s", r.stderr)
	require.Equal(t, "wrote "+out+": 6 lines (5 done, 1 dead); 1 line missing: 1 pending\n", r.stdout)
	require.Equal(t, "rollout: results of run \"r\" are incomplete: 1 of the input's 7 lines have no output line: 1 pending; "+
		"the run is still going: 'rollout status' shows its progress\n", r.stderr)

	b, err := os.ReadFile(out)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	require.Len(t, lines, 6)
	p := batch.DefaultSamplingParams()
	id0 := batch.SampleID("", "prompt 0", p, 0)
	require.Equal(t, `{"id":0,"prompt":"prompt 0","meta":{"k":[0]},"completion":"MOCK:prompt 0","finish_reason":"stop","sample_id":"`+
		hex.EncodeToString(id0[:])+`"}`, lines[0])
	id4 := batch.SampleID("", "prompt 4", p, 4)
	require.Equal(t, `{"id":4,"prompt":"prompt 4","meta":{"k":[4]},"error":"attempts exhausted","sample_id":"`+
		hex.EncodeToString(id4[:])+`"}`, lines[4])
	require.Contains(t, lines[5], `"id":6`, "the pending item 5 is skipped, order kept")
}

func TestResultsUnknownRunWritesNothing(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	r := runCLI(t, newFakeCoord(), "results", "--coord", "127.0.0.1:1", "--run", "nope", "-o", out)
	require.Equal(t, exitFailure, r.code)
	require.Equal(t, "rollout: run \"nope\" not found\n", r.stderr)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "no output and no temporary file")
}

func TestProgressPrinter(t *testing.T) {
	t0 := time.Unix(0, 0)
	p := func(done uint64) batch.Progress { return batch.Progress{Done: done, Total: 10, Rate: 2} }

	var plain bytes.Buffer
	pr := newProgressPrinter(&plain, false, time.Second)
	pr.show(t0, p(1))
	pr.show(t0.Add(500*time.Millisecond), p(2)) // too soon
	pr.show(t0.Add(1500*time.Millisecond), p(2))
	pr.show(t0.Add(3*time.Second), p(2))  // unchanged: quiet
	pr.show(t0.Add(32*time.Second), p(2)) // unchanged but quiet for too long
	pr.final(p(10))
	lines := strings.Split(strings.TrimSuffix(plain.String(), "\n"), "\n")
	require.Len(t, lines, 4, plain.String())
	require.True(t, strings.HasPrefix(lines[0], "1/10 done"))
	require.True(t, strings.HasPrefix(lines[1], "2/10 done"))
	require.True(t, strings.HasPrefix(lines[2], "2/10 done"))
	require.True(t, strings.HasPrefix(lines[3], "10/10 done"))

	var tty bytes.Buffer
	pr = newProgressPrinter(&tty, true, time.Second)
	pr.show(t0, p(5))
	pr.show(t0.Add(10*time.Millisecond), p(6))
	require.NotContains(t, tty.String(), "\n", "a terminal gets one line redrawn in place")
	require.Equal(t, 2, strings.Count(tty.String(), "\r"))
	require.Contains(t, tty.String(), "[##################............] 6/10 done")
	pr.abort()
	require.True(t, strings.HasSuffix(tty.String(), "\n"))
}

func TestRPCError(t *testing.T) {
	a := newApp(io.Discard, io.Discard, false)
	err := a.rpcError("reading status", 5*time.Second, fmt.Errorf("x: %w", context.DeadlineExceeded))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "within 5s (--timeout)")
	err = a.rpcError("reading status", time.Second, errors.New("boom"))
	require.Equal(t, "reading status: boom", err.Error())
	require.True(t, isNotFound(fmt.Errorf("wrapped: %w", status.Error(codes.NotFound, "x"))))
	// A failed call of the runs library gets the same words.
	err = a.describe(&runs.CallError{Op: "submitting items 0..9", Timeout: 30 * time.Second, Err: context.DeadlineExceeded})
	require.EqualError(t, err, "submitting items 0..9: no answer from the cluster within 30s (--timeout): context deadline exceeded")
	other := errors.New("plain")
	require.Equal(t, other, a.describe(other))
}
