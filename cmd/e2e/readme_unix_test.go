//go:build unix

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/freeport"
	"github.com/rollout/rollout/internal/testbin"
)

// readmeHeading is the README section whose first sh block the test runs.
const readmeHeading = "A cluster by hand"

// readmeBlock returns the first ```sh block under the heading (any level of
// #, matched case-insensitively) of the markdown in md.
func readmeBlock(md, heading string) (string, error) {
	head := regexp.MustCompile(`(?i)^#+\s+` + regexp.QuoteMeta(heading) + `\s*#*\s*$`)
	sc := bufio.NewScanner(strings.NewReader(md))
	found, in := false, false
	var block []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !found:
			found = head.MatchString(line)
		case !in && strings.HasPrefix(line, "#"):
			return "", fmt.Errorf("the section %q ends (at %q) before any ```sh block", heading, line)
		case !in:
			in = strings.TrimSpace(line) == "```sh"
		case strings.TrimSpace(line) == "```":
			return strings.Join(block, "\n") + "\n", nil
		default:
			block = append(block, line)
		}
	}
	if !found {
		return "", fmt.Errorf("no heading %q in the README", heading)
	}
	return "", fmt.Errorf("the section %q has no complete ```sh block", heading)
}

// TestReadmeClusterByHand runs the README's "A cluster by hand" block as it
// is pasted: the replicas, a worker, a submit started right after them
// (the CLI waits for the cluster to come up) and the results, with no
// sleep added. Only the ports (to free ones), make build and bin/ (to the
// binaries this test built, the replicas held back until the submit runs)
// and the example input's path (made absolute) are rewritten.
func TestReadmeClusterByHand(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("environment: no bash:", err)
	}
	root, err := testbin.ModuleRoot()
	require.NoError(t, err)
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	block, err := readmeBlock(string(md), readmeHeading)
	require.NoError(t, err, "the README must keep a heading %q with a ```sh block under it", readmeHeading)

	// The fixed ports, to free ones.
	fixed := []int{7001, 7002, 7003, 8001, 8002, 8003}
	free, err := freeport.Ports(len(fixed))
	require.NoError(t, err)
	for i, p := range fixed {
		re := regexp.MustCompile(`:` + strconv.Itoa(p) + `\b`)
		require.True(t, re.MatchString(block), "the block uses no port %d:\n%s", p, block)
		block = re.ReplaceAllString(block, ":"+strconv.Itoa(free[i]))
	}
	// make build: the binaries are built; bin/ is where they are, behind
	// wrappers that hold the replicas back until the submit waits for them
	// (slowReplicas).
	dir := t.TempDir()
	bin := slowReplicas(t, dir)
	makeBuild := regexp.MustCompile(`(?m)^\s*make build\s*$`)
	require.True(t, makeBuild.MatchString(block), "the block starts with make build:\n%s", block)
	block = makeBuild.ReplaceAllString(block, "true # make build: the test built the binaries")
	block = regexp.MustCompile(`(^|[\s;&|(])bin/`).ReplaceAllString(block, "${1}"+bin+"/")
	block = regexp.MustCompile(`(^|[\s=])examples/`).ReplaceAllString(block, "${1}"+filepath.Join(root, "examples")+"/")

	input := filepath.Join(root, "examples", "prompts.jsonl")
	require.Contains(t, block, input, "the block submits examples/prompts.jsonl")
	require.Contains(t, block, "-o results.jsonl", "the block writes results.jsonl")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// set -e: the first command that fails ends the block (pasted into a
	// shell it would go on, and the failure show later).
	cmd := exec.CommandContext(ctx, bash, "-c", "set -e\n"+block)
	cmd.Dir = dir
	// Its own process group: the replicas and the worker it starts in the
	// background are killed with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A file, not a pipe: the background processes keep their output
	// open after the block ends, and Wait would wait for them to close it.
	logPath := filepath.Join(dir, "block.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	out := func() string {
		b, _ := os.ReadFile(logPath)
		return string(b)
	}
	require.NoError(t, cmd.Start())
	killGroup := func() {
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Logf("stopping the block's processes: %v", err)
		}
		// Give the replicas a moment to stop, then make sure.
		deadline := time.Now().Add(10 * time.Second)
		for syscall.Kill(-cmd.Process.Pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	t.Cleanup(killGroup)
	err = cmd.Wait()
	require.NoError(t, err, "the block failed; it was:\n%s\noutput:\n%s", block, out())

	want := countLines(t, input)
	got := countLines(t, filepath.Join(dir, "results.jsonl"))
	require.Equal(t, want, got, "one result line per input line; output:\n%s", out())
	require.Contains(t, out(), "rollout: waiting for the cluster at ", "the submit waited for the replicas")
}

// slowReplicas writes into dir/bin wrappers of the test's binaries that
// hold every replica back until the block's rollout submit has said it
// waits for the cluster (or has ended: a submit that does not wait fails
// the block), so that the submit meets a cluster not up yet every time:
// the worst case of the race between the replicas starting and the
// commands after them, which a busy machine runs into. The other commands
// run the real binaries as they are. It returns dir/bin.
func slowReplicas(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.Mkdir(bin, 0o755))
	submitErr, submitDone := filepath.Join(dir, "submit.stderr"), filepath.Join(dir, "submit.done")
	scripts := map[string]string{
		// submit's stderr goes to a file the replicas' wrappers read, and is
		// copied to the block's stderr when it ends.
		"rollout": fmt.Sprintf(`#!/bin/sh
if [ "$1" != submit ]; then exec %[1]q "$@"; fi
%[1]q "$@" 2>%[2]q
rc=$?
: >%[3]q
cat %[2]q >&2
exit $rc
`, filepath.Join(binDir, "rollout"), submitErr, submitDone),
		"rollout-coord": fmt.Sprintf(`#!/bin/sh
until grep -q "waiting for the cluster" %[1]q 2>/dev/null || [ -e %[2]q ]; do sleep 0.05; done
exec %[3]q "$@"
`, submitErr, submitDone, filepath.Join(binDir, "rollout-coord")),
		"rollout-worker": fmt.Sprintf("#!/bin/sh\nexec %q \"$@\"\n", filepath.Join(binDir, "rollout-worker")),
	}
	for name, script := range scripts {
		require.NoError(t, os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755))
	}
	return bin
}

// countLines counts the non-empty lines of the file at path.
func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n
}

// TestReadmeBlock: the heading is found at any level and in any case, the
// first sh block under it is returned, and a missing heading or block is
// an error that says so.
func TestReadmeBlock(t *testing.T) {
	md := "# Title\n\n```sh\nnot this\n```\n\n#### a CLUSTER by Hand\n\ntext\n```toml\nx = 1\n```\n```sh\necho one\necho two\n```\n```sh\nlater\n```\n"
	b, err := readmeBlock(md, readmeHeading)
	require.NoError(t, err)
	require.Equal(t, "echo one\necho two\n", b)

	_, err = readmeBlock("# Other\n```sh\nx\n```\n", readmeHeading)
	require.ErrorContains(t, err, `no heading "A cluster by hand"`)
	_, err = readmeBlock("## A cluster by hand\ntext\n## Next\n```sh\nx\n```\n", readmeHeading)
	require.ErrorContains(t, err, "ends")
}
