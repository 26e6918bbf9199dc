package batch

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readFIFO starts a reader of the named pipe at path and returns a channel
// that gets everything it read once the writer closed it.
func readFIFO(t *testing.T, path string) <-chan string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		f, err := os.Open(path) // blocks until a writer opens the pipe
		if err != nil {
			got <- "open: " + err.Error()
			return
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		if err != nil {
			got <- "read: " + err.Error()
			return
		}
		got <- string(b)
	}()
	return got
}

// TestAtomicWriterWritesAPipeInPlace: a named pipe is written in place and
// stays a pipe; its reader gets the bytes and the end of the stream. Before,
// the pipe was replaced by a regular file (temporary file and rename) and
// its reader waited forever.
func TestAtomicWriterWritesAPipeInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.fifo")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	got := readFIFO(t, path)

	w, err := NewAtomicWriter(path, 0o644)
	require.NoError(t, err)
	require.True(t, w.InPlace())
	_, err = w.Write([]byte("line 1\nline 2\n"))
	require.NoError(t, err)
	require.NoError(t, w.Commit())

	select {
	case s := <-got:
		require.Equal(t, "line 1\nline 2\n", s)
	case <-time.After(30 * time.Second):
		t.Fatal("the pipe's reader never saw the end of its stream")
	}
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	require.Equal(t, os.ModeNamedPipe, fi.Mode().Type(), "still a pipe")
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left")
}

// TestAtomicWriterAbortClosesAPipe: an aborted write to a pipe ends its
// reader's stream (with what was flushed), rather than leaving it waiting.
func TestAtomicWriterAbortClosesAPipe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.fifo")
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	got := readFIFO(t, path)
	w, err := NewAtomicWriter(path, 0o644)
	require.NoError(t, err)
	_, err = w.Write([]byte("partial"))
	require.NoError(t, err)
	require.NoError(t, w.Abort())
	select {
	case s := <-got:
		require.Empty(t, s, "nothing was flushed")
	case <-time.After(30 * time.Second):
		t.Fatal("the pipe's reader never saw the end of its stream")
	}
}

// TestAtomicWriterWritesADeviceInPlace: a character device (/dev/null) is
// written in place; no temporary file is made next to it.
func TestAtomicWriterWritesADeviceInPlace(t *testing.T) {
	w, err := NewAtomicWriter("/dev/null", 0o644)
	require.NoError(t, err)
	require.True(t, w.InPlace())
	_, err = w.Write([]byte("x\n"))
	require.NoError(t, err)
	require.NoError(t, w.Commit())
	fi, err := os.Stat("/dev/null")
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&os.ModeCharDevice, "still a device")
}

// TestAtomicWriterStreamNames: standard streams are written in place
// whatever they refer to; a regular file is replaced atomically.
func TestAtomicWriterStreamNames(t *testing.T) {
	for _, p := range []string{"/dev/stdout", "/dev/stderr", "/dev/fd/1", "/proc/self/fd/2", "/dev/./stdout"} {
		require.True(t, isStreamName(p), p)
	}
	for _, p := range []string{"/dev/shm/out.jsonl", "out.jsonl", "/tmp/dev/stdout"} {
		require.False(t, isStreamName(p), p)
	}
	w, err := NewAtomicWriter(filepath.Join(t.TempDir(), "f.jsonl"), 0o644)
	require.NoError(t, err)
	defer w.Abort()
	require.False(t, w.InPlace())
}

// TestCountRecords counts the non-blank lines over files, a too-long line
// included, as a Scanner indexes them.
func TestCountRecords(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	require.NoError(t, os.WriteFile(a, []byte("\xef\xbb\xbf{\"prompt\":\"x\"}\n\n  \r\nnot json\n"), 0o644))
	require.NoError(t, os.WriteFile(b, []byte(`{"prompt":"`+string(make([]byte, 100))+`"}`+"\n{}"), 0o644))
	cfg := DefaultConfig()
	cfg.MaxLineBytes = 50
	n, err := CountRecords(context.Background(), []string{a, b}, cfg)
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
	sc, err := NewScanner([]string{a, b}, cfg)
	require.NoError(t, err)
	defer sc.Close()
	for {
		if _, err := sc.Next(); err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
	}
	require.Equal(t, sc.Count(), n)

	_, err = CountRecords(context.Background(), []string{filepath.Join(dir, "missing")}, cfg)
	require.Error(t, err)
}
