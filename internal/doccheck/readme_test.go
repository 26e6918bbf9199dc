package doccheck

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readmeMaxLines is the README's bound: it is the quick start and the
// map of the docs; reference belongs in docs/ (issue 39).
const readmeMaxLines = 200

// errTooLong is a file over its line limit.
var errTooLong = errors.New("too long")

// lineCount is the number of lines of data: its newlines, plus one for a
// last line without one.
func lineCount(data []byte) int {
	n := bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		n++
	}
	return n
}

// checkLineLimit returns nil when the file at path has at most limit
// lines, else errTooLong naming the file, its count and the limit.
func checkLineLimit(path string, limit int) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if n := lineCount(data); n > limit {
		return fmt.Errorf("%s is %w: %d lines, the limit is %d (%d over): move reference material to docs/ and link it", filepath.Base(path), errTooLong, n, limit, n-limit)
	}
	return nil
}

// TestReadmeLength: README.md stays at most readmeMaxLines lines.
func TestReadmeLength(t *testing.T) {
	require.NoError(t, checkLineLimit(filepath.Join(repoRoot(t), "README.md"), readmeMaxLines))
}

// TestLineLimitCatchesLongFiles: the check counts lines as an editor does
// and names the count and the limit when a file is over it.
func TestLineLimitCatchesLongFiles(t *testing.T) {
	for data, want := range map[string]int{"": 0, "a": 1, "a\n": 1, "a\nb": 2, "a\n\n": 2} {
		require.Equal(t, want, lineCount([]byte(data)), "%q", data)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "README.md")
	require.NoError(t, os.WriteFile(p, []byte(strings.Repeat("line\n", 200)), 0o644))
	require.NoError(t, checkLineLimit(p, 200))
	require.NoError(t, os.WriteFile(p, []byte(strings.Repeat("line\n", 200)+"one more"), 0o644))
	err := checkLineLimit(p, 200)
	require.ErrorIs(t, err, errTooLong)
	require.ErrorContains(t, err, "README.md is too long: 201 lines, the limit is 200 (1 over)")
	require.Error(t, checkLineLimit(filepath.Join(dir, "missing.md"), 200))
}
