package cluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// RunTestsWithBinaries is a TestMain for packages that test real processes:
// it builds pkgs of the module (by default ./cmd/rollout-coord,
// ./cmd/rollout-worker and ./cmd/rollout) into a temporary directory, sets
// *binDir to it, runs the tests and removes the directory. It returns the
// exit code for os.Exit; a build failure is reported and fails the package.
func RunTestsWithBinaries(m *testing.M, binDir *string, pkgs ...string) int {
	if len(pkgs) == 0 {
		pkgs = []string{"./cmd/rollout-coord", "./cmd/rollout-worker", "./cmd/rollout"}
	}
	root, err := ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "rollout-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := GoBuild(ctx, root, dir, nil, pkgs...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*binDir = dir
	return m.Run()
}
