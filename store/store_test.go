package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
)

// fastOptions retry quickly: tests of faults finish in milliseconds.
func fastOptions() Options {
	o := DefaultOptions()
	o.Attempts, o.Backoff, o.MaxBackoff, o.OpTimeout = 4, time.Millisecond, 5*time.Millisecond, 10*time.Second
	return o
}

func openFile(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(context.Background(), "file://"+filepath.ToSlash(dir), fastOptions())
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, dir
}

func TestCheckKey(t *testing.T) {
	tests := []struct {
		key, why string // why "" means valid
	}{
		{"a", ""},
		{"runs/r/inputs/0123abcd", ""},
		{"a.b/c..d/.e", ""},
		{"", "empty"},
		{"../x", "segment"},
		{"a/../../x", "segment"},
		{"a/..", "segment"},
		{"./a", "segment"},
		{"a//b", "segment"},
		{"a/", "segment"},
		{"/abs", "starts with /"},
		{`a\..\b`, "backslash"},
		{`..\x`, "backslash"},
		{"a\x00b", "control"},
		{"a\nb", "control"},
		{"a\x7fb", "control"},
		{"a/.tmp-123", "reserved"},
		{".tmp-x/y", "reserved"},
		{strings.Repeat("k", 1025), "longer than 1024"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.key), func(t *testing.T) {
			err := CheckKey(tt.key)
			if tt.why == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidKey)
			require.ErrorContains(t, err, tt.why)
		})
	}
}

// TestKeysNeverEscape: every method refuses an escaping key before it
// touches the file system, and nothing appears outside the root.
func TestKeysNeverEscape(t *testing.T) {
	s, dir := openFile(t)
	ctx := context.Background()
	for _, k := range []string{"../x", "a/../../x", "/abs", `..\x`, "a//b"} {
		require.ErrorIs(t, s.Put(ctx, k, []byte("x")), ErrInvalidKey, k)
		_, err := s.ReadRange(ctx, k, 0, 1)
		require.ErrorIs(t, err, ErrInvalidKey, k)
		_, err = s.ReadAll(ctx, k)
		require.ErrorIs(t, err, ErrInvalidKey, k)
		_, err = s.Exists(ctx, k)
		require.ErrorIs(t, err, ErrInvalidKey, k)
		require.ErrorIs(t, s.Delete(ctx, k), ErrInvalidKey, k)
		_, _, _, err = s.PutContent(ctx, k+"/", []byte("x"))
		require.ErrorIs(t, err, ErrInvalidKey, k)
	}
	_, err := s.DeletePrefix(ctx, "")
	require.ErrorIs(t, err, ErrInvalidKey, "an empty prefix would delete everything")
	_, err = s.DeletePrefix(ctx, "../")
	require.ErrorIs(t, err, ErrInvalidKey)
	entries, err := os.ReadDir(filepath.Dir(dir))
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing was written next to the store's root")
}

func TestRunPrefix(t *testing.T) {
	for _, run := range []string{"r", "a/b", "..", ".hidden", "x y", "ü"} {
		p := RunPrefix(run)
		require.NoError(t, CheckKey(p+"k"), run)
		require.True(t, strings.HasPrefix(InputPrefix(run), p))
		require.True(t, strings.HasPrefix(ResultPrefix(run), p))
		require.Equal(t, 3, strings.Count(ResultPrefix(run), "/"), "a run name adds no path segment: %q", run)
	}
	require.NotEqual(t, RunPrefix("a/b"), RunPrefix("a%2Fb"), "distinct runs, distinct prefixes")
}

// TestFilePutIsDurableAndAtomic: a Put creates its directories, leaves no
// temporary file, and replaces an existing object whole.
func TestFilePutIsDurableAndAtomic(t *testing.T) {
	s, dir := openFile(t)
	ctx := context.Background()
	require.NoError(t, s.Put(ctx, "a/b/c/obj", []byte("hello")))
	b, err := os.ReadFile(filepath.Join(dir, "a", "b", "c", "obj"))
	require.NoError(t, err)
	require.Equal(t, "hello", string(b))
	require.NoError(t, s.Put(ctx, "a/b/c/obj", []byte("bye")))
	got, err := s.ReadAll(ctx, "a/b/c/obj")
	require.NoError(t, err)
	require.Equal(t, "bye", string(got))
	var files []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if !d.IsDir() {
			files = append(files, strings.TrimPrefix(p, dir))
		}
		return err
	}))
	require.Equal(t, []string{filepath.FromSlash("/a/b/c/obj")}, files, "no temporary or attribute files left")
	ok, err := s.Exists(ctx, "a/b/c/obj")
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.Exists(ctx, "a/b/c/none")
	require.NoError(t, err)
	require.False(t, ok)
}

// TestFullDiskIsUnavailable: a write that fails as a full disk does is
// retried Attempts times, leaves no temporary file, and returns
// ErrUnavailable naming the key and the cause - promptly.
func TestFullDiskIsUnavailable(t *testing.T) {
	s, dir := openFile(t)
	var calls atomic.Int32
	s.write = func(f *os.File, data []byte) error {
		calls.Add(1)
		return &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	start := time.Now()
	err := s.Put(context.Background(), "runs/r/results/x", []byte("data"))
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorContains(t, err, "runs/r/results/x")
	require.ErrorContains(t, err, "no space left on device")
	require.Equal(t, int32(fastOptions().Attempts), calls.Load())
	require.Less(t, time.Since(start), 5*time.Second)
	var left []string
	require.NoError(t, s.List(context.Background(), "", func(o Object) error { left = append(left, o.Key); return nil }))
	require.Empty(t, left)
	matches, _ := filepath.Glob(filepath.Join(dir, "runs", "r", "results", tmpPrefix+"*"))
	require.Empty(t, matches, "temporary files removed")

	// A cancelled context ends the retries at once.
	s.write = func(*os.File, []byte) error { return syscall.ENOSPC }
	slow := *s
	slow.opts.Attempts, slow.opts.Backoff, slow.opts.MaxBackoff = 1000, time.Second, time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = slow.Put(ctx, "k", []byte("x"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestRangedReads(t *testing.T) {
	s, _ := openFile(t)
	ctx := context.Background()
	data := []byte("0123456789")
	key, sum, up, err := s.PutContent(ctx, "in/", data)
	require.NoError(t, err)
	require.True(t, up)
	require.Equal(t, Hash(data), sum)
	require.True(t, strings.HasPrefix(key, "in/"))

	tests := []struct {
		off, n int64
		want   string
		err    error
	}{
		{0, 10, "0123456789", nil},
		{3, 4, "3456", nil},
		{10, 0, "", nil},
		{9, 1, "9", nil},
		{8, 3, "", ErrShortObject},
		{20, 1, "", ErrShortObject},
		{-1, 1, "", ErrInvalidKey},
		{0, 1 << 40, "", ErrTooLarge},
	}
	for _, tt := range tests {
		b, err := s.ReadRange(ctx, key, tt.off, tt.n)
		if tt.err != nil {
			require.ErrorIs(t, err, tt.err, "%d+%d", tt.off, tt.n)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tt.want, string(b))
	}
	_, err = s.ReadRange(ctx, "in/none", 0, 1)
	require.ErrorIs(t, err, ErrNotFound)

	b, err := s.ReadChecked(ctx, key, 3, 4, Hash([]byte("3456")))
	require.NoError(t, err)
	require.Equal(t, "3456", string(b))
	_, err = s.ReadChecked(ctx, key, 3, 4, Hash([]byte("3457")))
	require.ErrorIs(t, err, ErrHashMismatch)
	require.ErrorContains(t, err, key)

	// PutContent again uploads nothing.
	key2, _, up, err := s.PutContent(ctx, "in/", data)
	require.NoError(t, err)
	require.False(t, up)
	require.Equal(t, key, key2)

	// An object of that key damaged in the store (same size, other bytes)
	// is not trusted: PutContent writes it again.
	require.NoError(t, s.Put(ctx, key, []byte("0123456780")))
	_, _, up, err = s.PutContent(ctx, "in/", data)
	require.NoError(t, err)
	require.True(t, up, "a damaged object of the same key and size was kept")
	b, err = s.ReadChecked(ctx, key, 0, 10, sum)
	require.NoError(t, err)
	require.Equal(t, data, b)

	n, err := s.Size(ctx, key)
	require.NoError(t, err)
	require.EqualValues(t, 10, n)
	_, err = s.Size(ctx, "in/none")
	require.ErrorIs(t, err, ErrNotFound)

	small := *s
	small.opts.MaxObjectBytes = 5
	_, err = small.ReadAll(ctx, key)
	require.ErrorIs(t, err, ErrTooLarge)

	r, err := s.NewReader(ctx, key)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = buf.ReadFrom(r)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	require.Equal(t, data, buf.Bytes())
}

// TestListAndDeletePrefix: List skips unfinished writes and lists only
// under its prefix; DeletePrefix removes exactly that prefix.
func TestListAndDeletePrefix(t *testing.T) {
	s, dir := openFile(t)
	ctx := context.Background()
	keys := []string{"runs/a/inputs/1", "runs/a/results/2", "runs/ab/inputs/3", "runs/b/x"}
	for _, k := range keys {
		require.NoError(t, s.Put(ctx, k, []byte(k)))
	}
	// An unfinished write (a crash between create and rename).
	require.NoError(t, os.WriteFile(filepath.Join(dir, "runs", "a", "inputs", tmpPrefix+"123"), []byte("partial"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, tmpPrefix+"root"), []byte("partial"), 0o644))

	list := func(prefix string) []string {
		var out []string
		require.NoError(t, s.List(ctx, prefix, func(o Object) error {
			require.EqualValues(t, len(o.Key), o.Size)
			out = append(out, o.Key)
			return nil
		}))
		sort.Strings(out)
		return out
	}
	require.Equal(t, keys, list(""))
	require.Equal(t, keys[:2], list(RunPrefix("a")))

	stop := errors.New("stop")
	require.ErrorIs(t, s.List(ctx, "", func(Object) error { return stop }), stop)

	n, err := s.DeletePrefix(ctx, RunPrefix("a"))
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, keys[2:], list(""), "runs/ab is not runs/a")
	require.NoError(t, s.Delete(ctx, "runs/b/x"))
	require.NoError(t, s.Delete(ctx, "runs/b/x"), "deleting a missing key is not an error")
}

func TestOpenRefuses(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"", "http://x/y", "file://host/dir", "file:///", "s3://", "s3://AKIA:secret@bucket",
		"s3://bucket?aws_secret_access_key=x", "ftp://bucket"} {
		_, err := Open(ctx, u, DefaultOptions())
		require.ErrorIs(t, err, ErrInvalidURL, u)
		require.NotContains(t, err.Error(), "secret@", "the error does not repeat a credential")
	}
	_, err := Open(ctx, "mem://", Options{})
	require.ErrorContains(t, err, "Attempts")
	s, err := Open(ctx, "mem://", DefaultOptions())
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Put(ctx, "k", []byte("v")))
	b, err := s.ReadRange(ctx, "k", 0, 1)
	require.NoError(t, err)
	require.Equal(t, "v", string(b))
}

// TestListWhileFilesComeAndGo: listing a file store while writers create
// and rename temporary files and whole directories come and go never fails
// (a file or directory that vanishes between reading its directory and
// reading its attributes is simply not listed), and every object that
// stays put is listed each time.
func TestListWhileFilesComeAndGo(t *testing.T) {
	ctx := context.Background()
	s, dir := openFile(t)
	var stable []string
	for i := range 20 {
		k := fmt.Sprintf("runs/r/results/%02d", i)
		require.NoError(t, s.Put(ctx, k, []byte("x")))
		stable = append(stable, k)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	var churned atomic.Int64
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// A write as putFile makes it: a temporary file renamed; and
			// a run prefix created and removed whole.
			res := filepath.Join(dir, "runs", "r", "results")
			tmp := filepath.Join(res, fmt.Sprintf("%sw%d", tmpPrefix, i%7))
			_ = os.WriteFile(tmp, []byte("y"), 0o644)
			_ = os.Rename(tmp, filepath.Join(res, fmt.Sprintf("new-%d", i%5)))
			_ = os.Remove(filepath.Join(res, fmt.Sprintf("new-%d", (i+2)%5)))
			gone := filepath.Join(dir, "runs", fmt.Sprintf("gone-%d", i%3), "inputs")
			_ = os.MkdirAll(gone, 0o755)
			_ = os.WriteFile(filepath.Join(gone, "c"), []byte("z"), 0o644)
			_ = os.RemoveAll(filepath.Dir(gone))
			churned.Add(1)
		}
	}()
	defer func() { close(stop); <-done }()
	for i := 0; i < 1000 || churned.Load() < 1000; i++ {
		seen := map[string]bool{}
		err := s.List(ctx, "runs/", func(o Object) error { seen[o.Key] = true; return nil })
		require.NoError(t, err, "listing %d, with %d changes made", i, churned.Load())
		for _, k := range stable {
			require.True(t, seen[k], "listing %d misses %s", i, k)
		}
		for k := range seen {
			require.False(t, isTemp(k), "a temporary file is never listed: %s", k)
		}
	}
}

// TestListFileKeysAsFileblob: a file store lists the keys fileblob lists,
// in key order: escaped paths undone, attribute sidecars and unfinished
// writes left out.
func TestListFileKeysAsFileblob(t *testing.T) {
	ctx := context.Background()
	s, dir := openFile(t)
	for _, k := range []string{"runs/a../x", "runs/a-b", "runs/a/b", "datasets/p.jsonl", "runs/__0x41__"} {
		w, err := s.NewWriter(ctx, k)
		require.NoError(t, err)
		_, err = w.Write([]byte(k))
		require.NoError(t, err)
		require.NoError(t, w.Close())
	}
	require.NoError(t, s.Put(ctx, "runs/r/results/0", []byte("z")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "runs", "r", "results", tmpPrefix+"1"), nil, 0o644))
	for _, prefix := range []string{"", "runs/", "runs/a", "runs/r/results/", "none/"} {
		var ours, theirs []string
		require.NoError(t, s.List(ctx, prefix, func(o Object) error { ours = append(ours, o.Key); return nil }))
		it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
		for {
			o, err := it.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
			if !isTemp(o.Key) {
				theirs = append(theirs, o.Key)
			}
		}
		sort.Strings(theirs)
		require.Equal(t, theirs, ours, "prefix %q: fileblob's keys, in key order", prefix)
	}
}
