// Package testbin builds the rollout binaries for tests that run real
// processes (the end-to-end tests, jepsen-lite's). It is for tests only: it
// imports testing, so no binary may import it.
package testbin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	// ErrInvalid names a bad argument.
	ErrInvalid = errors.New("testbin: invalid argument")
	// ErrNoModule means no go.mod was found above the working directory.
	ErrNoModule = errors.New("testbin: go.mod not found above the working directory")
)

// binaries are the packages of the rollout binaries.
func binaries() []string {
	return []string{"./cmd/rollout-coord", "./cmd/rollout-worker", "./cmd/rollout"}
}

// RunTestsWithBinaries is a TestMain for packages that test real processes:
// it builds pkgs of the module (by default ./cmd/rollout-coord,
// ./cmd/rollout-worker and ./cmd/rollout) into the checkout's shared test
// binary directory (SharedDir), sets *binDir to it and runs the tests.
// It returns the exit code for os.Exit; a build failure is reported and
// fails the package. Tests must treat *binDir as read-only: other test
// packages run the same files, possibly at the same time.
func RunTestsWithBinaries(m *testing.M, binDir *string, pkgs ...string) int {
	if len(pkgs) == 0 {
		pkgs = binaries()
	}
	root, err := ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := BuildShared(ctx, root, pkgs...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*binDir = dir
	return m.Run()
}

// SharedDir is the directory where BuildShared puts the binaries of the
// checkout rooted at moduleDir: one per checkout (keyed by its absolute
// path) under the system's temporary directory, kept between test runs.
func SharedDir(moduleDir string) (string, error) {
	abs, err := filepath.Abs(moduleDir)
	if err != nil {
		return "", fmt.Errorf("%w: module directory %q: %v", ErrInvalid, moduleDir, err)
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join(os.TempDir(), "rollout-testbin-"+hex.EncodeToString(sum[:8])), nil
}

// BuildShared builds pkgs of the module rooted at moduleDir into
// SharedDir(moduleDir) and returns that directory. The packages of one
// `go test ./...` share it, so a binary is linked once per change instead
// of once per test package: go build leaves a binary whose build ID matches
// its inputs untouched. Builds into the directory are serialized by a lock
// file, so test packages run in parallel (go test -p N) never write the same
// file at once.
func BuildShared(ctx context.Context, moduleDir string, pkgs ...string) (string, error) {
	dir, err := SharedDir(moduleDir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("testbin: shared binary directory: %w", err)
	}
	unlock, err := lockDir(ctx, dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	if err := GoBuild(ctx, moduleDir, dir, nil, pkgs...); err != nil {
		return "", err
	}
	return dir, nil
}

// Build compiles the rollout binaries of the module rooted at moduleDir
// into binDir.
func Build(ctx context.Context, moduleDir, binDir string) error {
	return BuildTags(ctx, moduleDir, binDir)
}

// BuildTags is Build with build tags, for example rollout_bug_nocas for the
// bug-injected binaries of jepsen-lite's self-test.
func BuildTags(ctx context.Context, moduleDir, binDir string, tags ...string) error {
	return GoBuild(ctx, moduleDir, binDir, tags, binaries()...)
}

// GoBuild runs go build -o binDir/ with tags for the packages pkgs of the
// module rooted at moduleDir.
func GoBuild(ctx context.Context, moduleDir, binDir string, tags []string, pkgs ...string) error {
	if len(pkgs) == 0 {
		return fmt.Errorf("%w: no packages to build", ErrInvalid)
	}
	args := []string{"build", "-o", binDir + string(os.PathSeparator)}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	cmd.Dir = moduleDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("testbin: go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// ModuleRoot walks up from the working directory to the folder holding
// go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNoModule
		}
		dir = parent
	}
}
