package testbin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestGoBuildErrors(t *testing.T) {
	root, err := ModuleRoot()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.ErrorIs(t, GoBuild(ctx, root, t.TempDir(), nil), ErrInvalid)
	err = GoBuild(ctx, root, t.TempDir(), []string{"some_tag"}, "./no/such/package")
	require.Error(t, err)
	require.ErrorContains(t, err, "-tags some_tag")
	require.ErrorContains(t, err, "no/such/package")
}

// TestBuildSharedLinksOnce: two builds of one checkout, at the same time,
// share a directory and produce a working binary; a third build of the
// unchanged sources leaves the file as it was (no relink).
func TestBuildSharedLinksOnce(t *testing.T) {
	mod := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/tiny\n\ngo 1.21\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(mod, "cmd", "tiny"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(mod, "cmd", "tiny", "main.go"), []byte("package main\n\nfunc main() { println(\"tiny\") }\n"), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	want, err := SharedDir(mod)
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(want) })

	dirs := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range dirs {
		wg.Add(1)
		go func() { defer wg.Done(); dirs[i], errs[i] = BuildShared(ctx, mod, "./cmd/tiny") }()
	}
	wg.Wait()
	for i := range dirs {
		require.NoError(t, errs[i])
		require.Equal(t, want, dirs[i])
	}
	bin := filepath.Join(want, "tiny")
	before, err := os.Stat(bin)
	require.NoError(t, err)
	out, err := exec.Command(bin).CombinedOutput()
	require.NoError(t, err)
	require.Equal(t, "tiny\n", string(out))

	_, err = BuildShared(ctx, mod, "./cmd/tiny")
	require.NoError(t, err)
	after, err := os.Stat(bin)
	require.NoError(t, err)
	// go build touches an up-to-date target but does not replace it (a
	// relink writes a new file and renames it into place).
	require.True(t, os.SameFile(before, after), "an unchanged binary was linked again")

	other, err := SharedDir(t.TempDir())
	require.NoError(t, err)
	require.NotEqual(t, want, other, "two checkouts share a directory")
}

// TestLockDirWaits: a second lock on a held directory waits, and gives up
// with the context's error when the context ends first.
func TestLockDirWaits(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("environment: no flock on windows: builds are not serialized there")
	}
	dir := t.TempDir()
	unlock, err := lockDir(context.Background(), dir)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = lockDir(ctx, dir)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	unlock()
	unlock2, err := lockDir(context.Background(), dir)
	require.NoError(t, err)
	unlock2()
}
