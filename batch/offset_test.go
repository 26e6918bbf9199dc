package batch

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestScannerOffsets: every valid record's Offset names its Raw bytes in
// the file (a byte order mark, leading blanks, blank lines, CRLF endings
// and an invalid line before it included), so that a reference to the input
// where it is reads exactly the line's object.
func TestScannerOffsets(t *testing.T) {
	dir := t.TempDir()
	a := "\xef\xbb\xbf  {\"prompt\":\"one\"}  \r\n\n{\"prompt\":\"two\",\"x\":[1,2]}\nnot json\n\t{\"custom_id\":\"c\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"p\"}}\r\n{\"prompt\":\"last, no newline\"}"
	b := "{\"prompt\":\"second file\"}\n"
	pa, pb := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	require.NoError(t, os.WriteFile(pa, []byte(a), 0o644))
	require.NoError(t, os.WriteFile(pb, []byte(b), 0o644))
	opened := 0
	cfg := DefaultConfig()
	cfg.Open = func(name string) (io.ReadCloser, error) { opened++; return os.Open(name) }
	sc, err := NewScanner([]string{pa, pb}, cfg)
	require.NoError(t, err)
	defer sc.Close()
	content := map[string]string{pa: a, pb: b}
	valid := 0
	for {
		rec, err := sc.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if rec.Err != nil {
			continue
		}
		valid++
		c := content[rec.File]
		require.Equal(t, string(rec.Raw), c[rec.Offset:rec.Offset+int64(len(rec.Raw))], "record %d of %s", rec.Index, rec.File)
		require.True(t, strings.HasPrefix(string(rec.Raw), "{"))
	}
	require.Equal(t, 5, valid)
	require.Equal(t, 2, opened, "Config.Open opens every input")
}
