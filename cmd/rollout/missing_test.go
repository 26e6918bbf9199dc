package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/store"
)

// lineCount is the number of lines of the file at path.
func lineCount(t *testing.T, path string) int {
	t.Helper()
	return strings.Count(mustRead(t, path), "\n")
}

// TestResultsKilledSubmitIsIncomplete: a submit killed after its first
// chunk and never rerun leaves a run of 4 items of a 10-line input. Its
// results are written, and the command exits 3 naming the 6 lines never
// submitted. Before, it printed "(4 done, 0 dead)" and exited 0.
func TestResultsKilledSubmitIsIncomplete(t *testing.T) {
	fake := newFakeCoord()
	in := writeInput(t, 10)
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.ChunkItems = "r", []string{in}, 4
	fake.SubmitErr, fake.SubmitErrAt = status.Error(codes.Unavailable, "killed"), 1
	_, err := runs.Submit(context.Background(), fake, cfg)
	require.Error(t, err)
	fake.SubmitErr = nil
	fake.Finish("r", 0, 4, "")

	out := filepath.Join(t.TempDir(), "out.jsonl")
	r := runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--run", "r", "-o", out)
	require.Equal(t, exitIncomplete, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
	require.Equal(t, "wrote "+out+": 4 lines (4 done, 0 dead); 6 lines missing: 6 not yet submitted\n", r.stdout)
	require.Equal(t, "rollout: results of run \"r\" are incomplete: 6 of the input's 10 lines have no output line: "+
		"6 not yet submitted; submit the same input again to add the lines not yet submitted\n", r.stderr)
	require.Equal(t, 4, lineCount(t, out), "what the run has is written")

	// Submitting again completes the run; its results then exit 0.
	_, err = runs.Submit(context.Background(), fake, cfg)
	require.NoError(t, err)
	fake.Finish("r", 4, 10, "")
	r = runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--run", "r", "-o", out)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "wrote "+out+": 10 lines (10 done, 0 dead)\n", r.stdout)
}

// TestResultsConfigCountsTheInput: with --config the input files are
// counted: lines the run never received are missing even where the ledger
// does not know of them (a run created from part of the input), while
// --run -o goes by what the ledger knows. A killed submit of the config is
// incomplete both ways.
func TestResultsConfigCountsTheInput(t *testing.T) {
	path := writeRun(t, 6, 0, "")
	dir := filepath.Dir(path)
	part := filepath.Join(t.TempDir(), "part.jsonl")
	lines := strings.SplitAfter(mustRead(t, filepath.Join(dir, "in", "a.jsonl")), "\n")
	require.NoError(t, os.WriteFile(part, []byte(strings.Join(lines[:3], "")), 0o644))
	fake := newFakeCoord()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files = "mixed", []string{part}
	_, err := runs.Submit(context.Background(), fake, cfg)
	require.NoError(t, err)
	fake.Finish("mixed", 0, 3, "")

	r := runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--config", path)
	require.Equal(t, exitIncomplete, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "(3 done, 0 failed); 3 lines missing: 3 not yet submitted")
	require.Contains(t, r.stderr, "3 of the input's 6 lines have no output line: 3 not yet submitted")

	out := filepath.Join(t.TempDir(), "out.jsonl")
	r = runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--run", "mixed", "-o", out)
	require.Equal(t, exitOK, r.code, "without the config the ledger's view counts: %s", r.stderr)

	// The config submitted in chunks of 2, killed after the first.
	fake = newFakeCoord()
	fake.SubmitErr, fake.SubmitErrAt = status.Error(codes.Unavailable, "killed"), 1
	r = runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--config", path, "--chunk-items", "2", "--timeout", "1s")
	require.Equal(t, exitFailure, r.code)
	fake.SubmitErr = nil
	fake.Finish("mixed", 0, 2, "")
	r = runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--config", path)
	require.Equal(t, exitIncomplete, r.code, r.stderr)
	require.Contains(t, r.stderr, "4 of the input's 6 lines have no output line: 4 not yet submitted")
	r = runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--run", "mixed", "-o", out)
	require.Equal(t, exitIncomplete, r.code, r.stderr)
	require.Contains(t, r.stderr, "4 of the input's 6 lines have no output line: 4 not yet submitted")
}

// TestResultsCountsPendingAndRunning: unfinished items are missing lines,
// counted by state.
func TestResultsCountsPendingAndRunning(t *testing.T) {
	fake := newFakeCoord()
	submitFile(t, fake, "r", writeInput(t, 5))
	fake.Finish("r", 0, 2, "")
	fake.Finish("r", 2, 3, "failed for good")
	fake.Runs["r"].Items[4].State = rolloutv1.ItemState_ITEM_STATE_RUNNING
	out := filepath.Join(t.TempDir(), "out.jsonl")
	r := runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--run", "r", "-o", out)
	require.Equal(t, exitIncomplete, r.code, r.stderr)
	require.Equal(t, "wrote "+out+": 3 lines (2 done, 1 dead); 2 lines missing: 1 pending, 1 running\n", r.stdout)
	require.Contains(t, r.stderr, "2 of the input's 5 lines have no output line: 1 pending, 1 running; the run is still going")
}

// TestResultsUnreadableIsIncomplete: a result object deleted from the
// store is an error line naming it, counted as unreadable (not dead), and
// the exit status is 3. Before: "(2 done, 1 dead)", exit 0.
func TestResultsUnreadableIsIncomplete(t *testing.T) {
	ctx := context.Background()
	fake := newFakeCoord()
	storeDir := t.TempDir()
	r := runCLI(t, fake, "submit", "--coord", "127.0.0.1:1", "--input", writeInput(t, 3), "--run", "r", "--store", "file://"+storeDir)
	require.Equal(t, exitOK, r.code, r.stderr)
	fake.Finish("r", 0, 3, "")
	st, err := store.Open(ctx, "file://"+storeDir, store.DefaultOptions())
	require.NoError(t, err)
	defer st.Close()
	ref := fake.Runs["r"].Items[2].GetResultRef()
	require.NoError(t, st.Delete(ctx, ref.GetObject()))

	out := filepath.Join(t.TempDir(), "out.jsonl")
	r = runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--run", "r", "-o", out)
	require.Equal(t, exitIncomplete, r.code, r.stderr)
	require.Contains(t, r.stdout, "3 lines (2 done, 0 dead, 1 unreadable); 1 line missing: 1 unreadable")
	require.Contains(t, r.stderr, "1 of the input's 3 lines have no output line: 1 unreadable")
	require.Contains(t, mustRead(t, out), ref.GetObject(), "the error line names the object")
}

// TestResultsToAPipe: -o naming a named pipe writes into the pipe, whose
// reader gets every line and the end of the stream; the pipe stays a pipe.
// Before, the pipe was replaced by a file and its reader blocked forever.
func TestResultsToAPipe(t *testing.T) {
	fake := newFakeCoord()
	submitFile(t, fake, "r", writeInput(t, 3))
	fake.Finish("r", 0, 3, "")
	fifo := filepath.Join(t.TempDir(), "results.fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	got := make(chan string, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- err.Error()
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		got <- string(b)
	}()
	r := runCLI(t, fake, "results", "--coord", "127.0.0.1:1", "--run", "r", "-o", fifo)
	require.Equal(t, exitOK, r.code, r.stderr)
	select {
	case s := <-got:
		require.Equal(t, 3, strings.Count(s, "\n"), s)
		require.Contains(t, s, "MOCK:prompt 2")
	case <-time.After(30 * time.Second):
		t.Fatal("the pipe's reader never got the end of the output")
	}
	fi, err := os.Lstat(fifo)
	require.NoError(t, err)
	require.Equal(t, os.ModeNamedPipe, fi.Mode().Type())
}

// listKeys returns every key of the file store in dir.
func listKeys(t *testing.T, dir string) []string {
	t.Helper()
	st, err := store.Open(context.Background(), "file://"+dir, store.DefaultOptions())
	require.NoError(t, err)
	defer st.Close()
	var keys []string
	require.NoError(t, st.List(context.Background(), "", func(o store.Object) error { keys = append(keys, o.Key); return nil }))
	sort.Strings(keys)
	return keys
}

// TestSubmitConflictRefusedBeforeUpload: against a real replica, another
// input submitted under a run's name is refused, and its input chunk is
// not in the store (a range run and an item run). Before, the chunk was uploaded and then the ledger
// refused the items.
func TestSubmitConflictRefusedBeforeUpload(t *testing.T) {
	r := startLiveReplica(t)
	for _, tc := range []struct {
		run     string
		layout  []string // submit flags
		refusal string
	}{
		{"r", []string{"--ranges"}, `run "r" holds other records at items 0..0 (at index 0`},
		{"i", []string{"--items"}, `run "i" holds another item at index 0`},
	} {
		storeDir := t.TempDir()
		res := r.cli(t, append([]string{"submit", "--input", writeInput(t, 4), "--run", tc.run, "--store", "file://" + storeDir}, tc.layout...)...)
		require.Equal(t, exitOK, res.code, "stdout %s\nstderr %s", res.stdout, res.stderr)
		before := listKeys(t, storeDir)
		require.NotEmpty(t, before)

		other := filepath.Join(t.TempDir(), "other.jsonl")
		require.NoError(t, os.WriteFile(other, []byte(`{"prompt":"something else"}`+"\n"), 0o644))
		res = r.cli(t, "submit", "--input", other, "--run", tc.run, "--store", "file://"+storeDir)
		require.Equal(t, exitFailure, res.code, "stdout %s\nstderr %s", res.stdout, res.stderr)
		require.Contains(t, res.stderr, tc.refusal)
		require.Equal(t, before, listKeys(t, storeDir), "nothing was uploaded")
	}
}

// TestSubmitWorkerCertificateRefusedBeforeUpload: a worker's certificate
// cannot submit; the submit says so before it uploads anything.
func TestSubmitWorkerCertificateRefusedBeforeUpload(t *testing.T) {
	r := startLiveReplica(t)
	storeDir := t.TempDir()
	res := r.cliAs(t, "w1", "submit", "--input", writeInput(t, 4), "--run", "r", "--store", "file://"+storeDir)
	require.Equal(t, exitFailure, res.code, "stdout %s\nstderr %s", res.stdout, res.stderr)
	require.Contains(t, res.stderr, "does not let this certificate submit")
	require.Contains(t, res.stderr, "worker")
	require.Empty(t, listKeys(t, storeDir), "nothing was uploaded")
}

// TestStdoutNames: -o naming standard output sends the summary to stderr,
// so that the output stream holds only the lines.
func TestStdoutNames(t *testing.T) {
	for _, p := range []string{"/dev/stdout", "/dev/fd/1", "/proc/self/fd/1", "/dev//stdout"} {
		require.True(t, isStdoutName(p), p)
	}
	for _, p := range []string{"/dev/stderr", "stdout", "/tmp/dev/stdout", "out.jsonl"} {
		require.False(t, isStdoutName(p), p)
	}
}
