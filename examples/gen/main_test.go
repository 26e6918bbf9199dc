package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/batch"
)

// TestCommittedFileIsCurrent fails when examples/prompts.jsonl drifts from
// the generator; regenerate with: go run ./examples/gen -o examples/prompts.jsonl
func TestCommittedFileIsCurrent(t *testing.T) {
	committed, err := os.ReadFile(filepath.Join("..", "prompts.jsonl"))
	require.NoError(t, err)
	var fresh bytes.Buffer
	require.NoError(t, Write(&fresh, Lines))
	require.Equal(t, fresh.String(), string(committed), "examples/prompts.jsonl is stale")
	require.Less(t, len(committed), 1<<20, "the example must stay well under 1 MiB")
}

func TestExampleIsValidInput(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "prompts.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	rep, err := batch.ValidateInput(t.Context(), f, "prompts.jsonl", batch.DefaultConfig())
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Errors)
	require.Equal(t, uint64(Lines), rep.Items)

	seen := map[string]bool{}
	for i := range Lines {
		p := Make(i).Prompt
		require.False(t, seen[p], "prompt %d repeats", i)
		seen[p] = true
	}
}
