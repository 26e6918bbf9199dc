package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/gpu/kernels"
	"github.com/rollout/rollout/gpu/ptxas"
)

const docPath = "../../docs/GPU.md"

// TestDocTableIsFresh: the table committed in docs/GPU.md is what NVIDIA's
// ptxas reports for the committed PTX now, and that has no problem. It
// skips, saying why, where there is no ptxas (GPU_CHECK_REQUIRE=1 makes
// that a failure) or where the table was made by another ptxas version.
func TestDocTableIsFresh(t *testing.T) {
	path, err := ptxas.Find()
	if err != nil {
		if os.Getenv("GPU_CHECK_REQUIRE") == "1" {
			t.Fatalf("GPU_CHECK_REQUIRE=1: %v", err)
		}
		t.Skipf("environment: NVIDIA's ptxas is not here, so docs/GPU.md's table is not re-checked: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := check(ctx, path)
	require.NoError(t, err)
	require.Empty(t, r.Problems)
	require.Len(t, r.Rows, len(kernels.All)*len(ptxas.Archs))
	doc, err := os.ReadFile(docPath)
	require.NoError(t, err)
	if !strings.Contains(string(doc), "("+r.PTXAS+")") {
		t.Skipf("environment: docs/GPU.md's table was made by another ptxas than this one (%s): not compared", r.PTXAS)
	}
	want, err := splice(string(doc), r.Table())
	require.NoError(t, err)
	require.Equal(t, want, string(doc), "docs/GPU.md's table is stale: run make gpu-check and commit it")
}

// fakePTXAS writes a script that answers like ptxas: every kernel of
// kernels.All (those of the module it is given), rl_gemm_nn with the
// given frame line, and extra named in the output as well.
func fakePTXAS(t *testing.T, gemmFrame, extra string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'Cuda compilation tools'; echo 'Build fake_1'; exit 0; fi\n")
	b.WriteString("arch=${1#-arch=}\nin=$5\n")
	for _, k := range kernels.All {
		frame := "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
		if k.Name == "rl_gemm_nn" {
			frame = gemmFrame
		}
		fmt.Fprintf(&b, "if grep -q '.entry %s(' \"$in\"; then\n", k.Name)
		fmt.Fprintf(&b, "echo \"ptxas info    : Compiling entry function '%s' for '$arch'\" >&2\n", k.Name)
		fmt.Fprintf(&b, "echo \"ptxas info    : Function properties for %s\" >&2\necho '    %s' >&2\n", k.Name, frame)
		fmt.Fprintf(&b, "echo 'ptxas info    : Used 32 registers, 1024 bytes smem, 376 bytes cmem[0]' >&2\nfi\n")
	}
	if extra != "" {
		fmt.Fprintf(&b, "echo \"ptxas info    : Compiling entry function '%s' for '$arch'\" >&2\necho 'ptxas info    : Used 8 registers' >&2\n", extra)
	}
	path := filepath.Join(t.TempDir(), "ptxas")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o755))
	return path
}

// TestCheckFindsProblems: a spill, a stack frame, or a kernel that is not
// in the launch table is a problem named per architecture; a clean run
// has none, and writing then checking the table agree.
func TestCheckFindsProblems(t *testing.T) {
	ctx := context.Background()
	clean := "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
	for _, c := range []struct {
		name, frame, extra, want string
	}{
		{"spill", "8 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads", "", "rl_gemm_nn on sm_80 uses local memory: 8 B stack frame, 16 B spill stores, 12 B spill loads"},
		{"stack", "16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads", "", "rl_gemm_nn on sm_90 uses local memory"},
		{"unknown kernel", clean, "rl_mystery", "sm_86: kernel rl_mystery is in the PTX but not in kernels.All"},
	} {
		r, err := check(ctx, fakePTXAS(t, c.frame, c.extra))
		require.NoError(t, err, c.name)
		require.Contains(t, strings.Join(r.Problems, "\n"), c.want, c.name)
	}

	path := fakePTXAS(t, clean, "")
	r, err := check(ctx, path)
	require.NoError(t, err)
	require.Empty(t, r.Problems)
	require.Equal(t, "Build fake_1", r.PTXAS)
	require.Contains(t, r.Table(), "| rl_gemm_nn | sm_86 | 256 | 32 | 1024 + 0 | 0 / 0+0 | 6 | 48 / 48 | 100% | warps |")

	doc := filepath.Join(t.TempDir(), "GPU.md")
	require.NoError(t, os.WriteFile(doc, []byte("# GPU\n\n"+beginMarker+"\nold table\n"+endMarker+"\n\nafter\n"), 0o644))
	require.Equal(t, 1, run(path, doc, false), "a stale table fails the check")
	require.Equal(t, 0, run(path, doc, true))
	got, err := os.ReadFile(doc)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(got), "# GPU\n\n"+beginMarker+"\nAssembled by NVIDIA's ptxas (Build fake_1)"))
	require.True(t, strings.HasSuffix(string(got), "|\n"+endMarker+"\n\nafter\n"))
	require.Equal(t, 0, run(path, doc, false), "the table just written is current")

	require.Equal(t, 1, run(fakePTXAS(t, "0 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads", ""), doc, false))
	require.Equal(t, exitNoPTXAS, func() int { t.Setenv(ptxas.PathEnv, "/nonexistent/ptxas"); return run("", doc, false) }())
}

func TestSpliceNeedsMarkers(t *testing.T) {
	_, err := splice("no markers", "t")
	require.ErrorContains(t, err, "markers")
	_, err = splice(endMarker+beginMarker, "t")
	require.ErrorContains(t, err, "markers")
}
