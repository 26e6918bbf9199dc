//go:build linux && (amd64 || arm64)

package cudatest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	"github.com/ebitengine/purego"

	"github.com/rollout/rollout/gpu"
	"github.com/rollout/rollout/gpu/cuda"
	"github.com/rollout/rollout/gpu/kernels"
)

// gxxFlags are the test driver's compiler flags.
var gxxFlags = []string{"-std=c++20", "-shared", "-fPIC", "-O1", "-pthread"}

// Build compiles the test driver (once per distinct sources, flags and
// compiler, into the user's cache directory) and returns the library's
// path. It fails the test when g++ is missing (make test installs it).
func Build(tb testing.TB) string { return BuildWith(tb, Options{}) }

// BuildWith is Build for a variant.
func BuildWith(tb testing.TB, opt Options) string {
	tb.Helper()
	gxx, err := exec.LookPath("g++")
	if err != nil {
		tb.Fatalf("cudatest: g++ is needed to build the test CUDA driver (make tools-gpu installs it): %v", err)
	}
	flags := append([]string(nil), gxxFlags...)
	if opt.DropSync {
		flags = append(flags, "-DROLLOUT_DROP_SYNC")
	}
	switch {
	case opt.DropSyncAt > 0:
		flags = append(flags, fmt.Sprintf("-DROLLOUT_DROP_SYNC_AT=%d", opt.DropSyncAt))
	case opt.DropSyncAt < 0:
		tb.Fatalf("cudatest: DropSyncAt %d: want 0 (none) or a barrier's number", opt.DropSyncAt)
	}
	version, err := exec.Command(gxx, "--version").Output()
	if err != nil {
		tb.Fatalf("cudatest: g++ --version: %v", err)
	}

	files := map[string][]byte{"driver.cc": driverSource}
	err = fs.WalkDir(kernels.Sources, ".", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := kernels.Sources.ReadFile(path)
		files[path] = b
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	h.Write(version)
	for _, f := range flags {
		h.Write([]byte(f + "\x00"))
	}
	for _, n := range names {
		h.Write([]byte(n + "\x00"))
		h.Write(files[n])
		h.Write([]byte{0})
	}
	key := hex.EncodeToString(h.Sum(nil))[:24]

	root, err := os.UserCacheDir()
	if err != nil {
		root = tb.TempDir()
	}
	dir := filepath.Join(root, "rollout-cudatest", key)
	lib := filepath.Join(dir, "libcudatest.so")
	if _, err := os.Stat(lib); err == nil {
		return lib
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	// Each build has its own source directory and output file, so that
	// concurrent test processes never see each other's half-written files.
	src, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		tb.Fatal(err)
	}
	defer os.RemoveAll(src)
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(src, n), files[n], 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	out := filepath.Join(src, "libcudatest.so")
	args := append(append([]string(nil), flags...), "-o", out, "driver.cc")
	cmd := exec.Command(gxx, args...)
	cmd.Dir = src
	if msg, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("cudatest: g++ %v: %v\n%s", args, err, msg)
	}
	// Atomic: concurrent test processes each build, one rename wins.
	if err := os.Rename(out, lib); err != nil {
		tb.Fatal(err)
	}
	return lib
}

// Open builds the test driver and opens its device through package cuda,
// closing it when the test ends. It returns the device and the library path.
func Open(tb testing.TB) (gpu.Device, string) {
	tb.Helper()
	return OpenWith(tb, Options{})
}

// OpenWith is Open for a variant.
func OpenWith(tb testing.TB, opt Options) (gpu.Device, string) {
	tb.Helper()
	lib := BuildWith(tb, opt)
	d, err := cuda.OpenLibraryWith(context.Background(), lib, 0, cuda.Options{TF32: opt.TF32})
	if err != nil {
		tb.Fatalf("cudatest: open the test driver: %v", err)
	}
	tb.Cleanup(func() { _ = d.Close() })
	return d, lib
}

func symbol(tb testing.TB, lib, name string, fptr any) {
	tb.Helper()
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		tb.Fatalf("cudatest: %v", err)
	}
	sym, err := purego.Dlsym(h, name)
	if err != nil {
		tb.Fatalf("cudatest: %s: %v", name, err)
	}
	purego.RegisterFunc(fptr, sym)
}

// Launches returns how many kernels the test driver at lib has launched in
// this process (it is the same loaded library as the one package cuda uses).
func Launches(tb testing.TB, lib string) uint64 {
	tb.Helper()
	var f func() uint64
	symbol(tb, lib, "rolloutTestLaunches", &f)
	return f()
}

// SetDeviceCount makes the test driver at lib report n devices (0: cuInit
// fails with CUDA_ERROR_NO_DEVICE) for this process. It restores one device
// when the test ends.
func SetDeviceCount(tb testing.TB, lib string, n int) {
	tb.Helper()
	var f func(int32)
	symbol(tb, lib, "rolloutTestSetDeviceCount", &f)
	f(int32(n))
	tb.Cleanup(func() { f(1) })
}

// LaunchLog reads a launch log (see LaunchLogEnv): the kernel names in
// launch order; a missing file is no launches.
func LaunchLog(tb testing.TB, path string) []string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		names = append(names, sc.Text())
	}
	return names
}
