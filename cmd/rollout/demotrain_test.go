//go:build unix

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeBinaries writes rollout-coord and rollout-worker scripts that leave a
// mark when started.
func fakeBinaries(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	for _, n := range []string{"rollout-coord", "rollout-worker"} {
		require.NoError(t, os.WriteFile(filepath.Join(bin, n), []byte("#!/bin/sh\ntouch \"$0.started\"\n"), 0o755))
	}
	return bin
}

func TestDemoTrainWithoutDataStartsNothing(t *testing.T) {
	bin := fakeBinaries(t)
	cfg := writeTrainConfig(t, 3, 1, "")
	require.NoError(t, os.Remove(filepath.Join(filepath.Dir(cfg), "digits.csv.gz")))
	r := runCLI(t, nil, "demo-train", "--bin", bin, "--config", cfg)
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, "run `make data`")
	require.NoFileExists(t, filepath.Join(bin, "rollout-coord.started"))
}

func TestDemoTrainBadConfigStartsNothing(t *testing.T) {
	bin := fakeBinaries(t)
	bad := filepath.Join(t.TempDir(), "bad.toml")
	require.NoError(t, os.WriteFile(bad, []byte("[model]\nhiden = [8]\n"), 0o644))
	r := runCLI(t, nil, "demo-train", "--bin", bin, "--config", bad)
	require.Equal(t, exitFailure, r.code)
	require.Contains(t, r.stderr, "bad.toml:2: model.hiden: unknown key")
	require.NoFileExists(t, filepath.Join(bin, "rollout-coord.started"))
}

func TestDemoTrainUsage(t *testing.T) {
	bin := fakeBinaries(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--backend", "tpu"}, `--backend "tpu": want auto, cpu or gpu`},
		{[]string{"--min-accuracy", "1.5"}, "--min-accuracy must be in [0, 1]"},
		{[]string{"--workers", "0"}, "--workers"},
		{[]string{"--kill-at", "0"}, "--kill-at"},
	} {
		r := runCLI(t, nil, append([]string{"demo-train", "--bin", bin}, tc.args...)...)
		require.Equal(t, exitUsage, r.code, r.stderr)
		require.Contains(t, r.stderr, tc.want)
	}
	require.NoFileExists(t, filepath.Join(bin, "rollout-coord.started"))
}
