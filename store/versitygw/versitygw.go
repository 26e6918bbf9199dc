// Package versitygw finds the versitygw binary, the real S3-compatible
// server that the tests (store/s3test) and the chaos harness
// (jepsen-lite/s3server) run on loopback. `make tools-s3` builds it into
// the repository's .tools/. The package imports no testing code, so the
// harness's binary may link it.
package versitygw

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ErrNotFound means versitygw was not found; the error says where Find
// looked.
var ErrNotFound = errors.New("versitygw not found")

// Env names an environment variable that may point at the binary.
const Env = "ROLLOUT_VERSITYGW"

// Find returns the path of versitygw: $ROLLOUT_VERSITYGW (which must
// exist); else .tools/versitygw in the first directory holding a go.mod
// above the working directory or above each of near (for example the
// harness's --bin directory); else versitygw on PATH.
func Find(near ...string) (string, error) {
	if p := os.Getenv(Env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w: $%s: %v", ErrNotFound, Env, err)
		}
		return p, nil
	}
	for _, s := range append([]string{"."}, near...) {
		dir, err := filepath.Abs(s)
		if err != nil {
			continue
		}
		if p, ok := inModule(dir); ok {
			return p, nil
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: $%s is unset, no .tools/versitygw in the module (make tools-s3 builds it) and none on PATH", ErrNotFound, Env)
}

// inModule returns .tools/versitygw of the module holding dir, if it
// exists.
func inModule(dir string) (string, bool) {
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, ".tools", "versitygw")
			_, err := os.Stat(p)
			return p, err == nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}
