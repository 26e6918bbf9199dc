//go:build unix

// The demo supervises process groups, which only Unix systems have.

package main

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/internal/testbin"
)

func TestDemoMissingBinaries(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, nil, "demo", "--bin", dir, "--input", writeInput(t, 3))
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, "has no executable rollout-coord")
	require.Contains(t, r.stderr, "go build -o bin/ ./cmd/...")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}

func TestDemoInvalidInputStartsNothing(t *testing.T) {
	bin := t.TempDir()
	for _, n := range []string{"rollout-coord", "rollout-worker"} {
		// Scripts that would leave a mark if they were ever started.
		script := "#!/bin/sh\ntouch \"$0.started\"\n"
		require.NoError(t, os.WriteFile(filepath.Join(bin, n), []byte(script), 0o755))
	}
	input := filepath.Join(t.TempDir(), "bad.jsonl")
	require.NoError(t, os.WriteFile(input, []byte("{\"prompt\":\"ok\"}\n{\"nope\":1}\n"), 0o644))
	r := runCLI(t, nil, "demo", "--bin", bin, "--input", input)
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, input+`:2: "prompt" is missing`)
	require.NoFileExists(t, filepath.Join(bin, "rollout-coord.started"))
}

func TestDemoChildFailureStopsEverything(t *testing.T) {
	// A fake rollout-coord that dies at once: the demo must report it with
	// the log tail, stop everything and fail; nothing is left running.
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "rollout-coord"),
		[]byte("#!/bin/sh\necho \"fake coord cannot start: $*\"\nexit 7\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "rollout-worker"), []byte("#!/bin/sh\nexit 0\n"), 0o755))
	var out, errOut strings.Builder
	a := newApp(&out, &errOut, false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := a.execute(ctx, []string{"demo", "--bin", bin, "--input", writeInput(t, 3), "--start-timeout", "20s"})
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut.String(), "c1 exited: exit status 7")
	require.Contains(t, errOut.String(), "fake coord cannot start: --id c1")
	require.Contains(t, out.String(), "kept ")
	// Clean up the kept directory.
	for _, line := range strings.Split(out.String(), "\n") {
		if dir, ok := strings.CutPrefix(line, "kept "); ok {
			dir, _, _ = strings.Cut(dir, " (")
			require.Contains(t, dir, "rollout-demo-")
			require.NoError(t, os.RemoveAll(dir))
		}
	}
}

// demoOutput builds the output the demo expects for input.
func demoOutput(t *testing.T, input string) []string {
	t.Helper()
	f, err := os.Open(input)
	require.NoError(t, err)
	defer f.Close()
	rd, err := batch.NewReader(f, input, batch.DefaultConfig())
	require.NoError(t, err)
	var lines []string
	for l, err := range rd.Lines() {
		require.NoError(t, err)
		id := batch.SampleID("", l.Prompt, batch.DefaultSamplingParams(), l.Index)
		out, err := batch.MergeResult(l.Raw, id, []byte(`{"completion":`+jsonQuote("MOCK:"+l.Prompt)+`,"finish_reason":"stop"}`), "")
		require.NoError(t, err)
		lines = append(lines, string(out))
	}
	return lines
}

func TestVerifyDemoResults(t *testing.T) {
	input := writeInput(t, 5)
	good := demoOutput(t, input)
	dead := strings.Replace(good[2], `"completion":"MOCK:prompt 2","finish_reason":"stop"`, `"error":"boom"`, 1)
	wrong := strings.Replace(good[1], "MOCK:prompt 1", "MOCK:prompt x", 1)
	changed := strings.Replace(good[3], `"k":[3]`, `"k":[4]`, 1)
	extraKey := strings.Replace(good[0], `{"id":0`, `{"x":1,"id":0`, 1)
	badID := strings.Replace(good[4], `"sample_id":"`, `"sample_id":"00`, 1)
	tests := []struct {
		name  string
		lines []string
		want  []string // substrings of the problems, in order
	}{
		{"good", good, nil},
		{"swapped", []string{good[0], good[2], good[1], good[3], good[4]}, []string{":2: sample_id", ":3: sample_id"}},
		{"missing", good[:4], []string{"missing: no output line for input line 6 (index 4)"}},
		{"extra", append(append([]string{}, good...), good[4]), []string{":6: extra output line"}},
		{"duplicate", []string{good[0], good[0], good[2], good[3], good[4]}, []string{":2: duplicate sample_id"}},
		{"dead", []string{good[0], good[1], dead, good[3], good[4]}, []string{":3: item is dead: boom"}},
		{"wrong completion", []string{good[0], wrong, good[2], good[3], good[4]}, []string{`:2: completion "MOCK:prompt x"`}},
		{"changed member", []string{good[0], good[1], good[2], changed, good[4]}, []string{`:4: member "meta" changed`}},
		{"extra member", []string{extraKey, good[1], good[2], good[3], good[4]}, []string{`:1: unexpected members ["x"]`}},
		{"bad id", []string{good[0], good[1], good[2], good[3], badID}, []string{":5: sample_id"}},
		{"not json", []string{good[0], "garbage", good[2], good[3], good[4]}, []string{":2: not valid JSON"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			results := filepath.Join(t.TempDir(), "results.jsonl")
			require.NoError(t, os.WriteFile(results, []byte(strings.Join(tt.lines, "\n")+"\n"), 0o644))
			n, problems, err := verifyDemoResults(input, results, batch.DefaultConfig())
			require.NoError(t, err)
			require.Equal(t, len(tt.want), len(problems), "%q", problems)
			for i, w := range tt.want {
				require.Contains(t, problems[i], w)
			}
			if tt.name == "good" {
				require.Equal(t, uint64(5), n)
			}
		})
	}
}

func TestDemoOutputMatchesSampleIDs(t *testing.T) {
	// The demo's notion of an item id is the submit's: line index among
	// valid lines (the blank line after the first line takes none).
	input := writeInput(t, 3)
	lines := demoOutput(t, input)
	id := batch.SampleID("", "prompt 1", batch.DefaultSamplingParams(), 1)
	require.Contains(t, lines[1], hex.EncodeToString(id[:]))
}

func TestDemoInterruptStopsChildren(t *testing.T) {
	// A fake rollout-coord that never forms a cluster: the demo waits for
	// it until it is interrupted, and must then stop it and clean up.
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "rollout-coord"), []byte("#!/bin/sh\nexec sleep 600\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "rollout-worker"), []byte("#!/bin/sh\nexit 0\n"), 0o755))
	var out, errOut testbin.Output
	a := newApp(&out, &errOut, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() {
		code <- a.execute(ctx, []string{"demo", "--bin", bin, "--input", writeInput(t, 3)})
	}()
	pidRe := regexp.MustCompile(`started c1 \(pid (\d+)\)`)
	var pid int
	require.Eventually(t, func() bool {
		m := pidRe.FindStringSubmatch(out.String())
		if m == nil {
			return false
		}
		pid, _ = strconv.Atoi(m[1])
		return true
	}, 20*time.Second, 10*time.Millisecond)
	dirRe := regexp.MustCompile(`demo directory (\S+)`)
	m := dirRe.FindStringSubmatch(out.String())
	require.NotNil(t, m)
	require.DirExists(t, m[1])

	cancel()
	select {
	case c := <-code:
		require.Equal(t, exitFailure, c)
	case <-time.After(30 * time.Second):
		t.Fatal("the demo did not stop after the interrupt")
	}
	require.Contains(t, errOut.String(), "rollout: interrupted")
	require.NotContains(t, errOut.String(), "last lines of", "an interrupt is not a failure to diagnose")
	require.NoDirExists(t, m[1], "the demo directory is removed after an interrupt")
	proc, err := os.FindProcess(pid)
	if err == nil {
		require.Error(t, proc.Signal(syscall.Signal(0)), "the child was stopped and reaped")
	}
}
