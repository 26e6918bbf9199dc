package main

import (
	"fmt"
	"os"
	"testing"
)

// TestMain points the CLI's default store (--store's default,
// $ROLLOUT_STORE) at a directory of its own, so that no test writes into
// the user's cache directory.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rollout-cli-store-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(storeEnv, "file://"+dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
