package gateway

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzKeysFile: any keys file loads or is refused with ErrKeyFile; never a
// panic, and a refused file leaves the loaded keys as they were.
func FuzzKeysFile(f *testing.F) {
	f.Add([]byte("a:" + string(bytes.Repeat([]byte("0"), 64)) + "\n"))
	f.Add([]byte("# comment\n\nteam-b:" + string(bytes.Repeat([]byte("f"), 64)) + "\r\n"))
	f.Add([]byte("x:y:z\n"))
	f.Add([]byte("p:" + string(bytes.Repeat([]byte("1"), 64)) + " priority=5\n"))
	f.Fuzz(func(t *testing.T, content []byte) {
		dir := t.TempDir()
		p := filepath.Join(dir, "keys")
		require.NoError(t, os.WriteFile(p, content, 0o600))
		k := &Keys{}
		if err := k.Load(p); err != nil {
			require.ErrorIs(t, err, ErrKeyFile)
			require.Zero(t, k.Len())
		}
	})
}

// FuzzCheckLines: any upload is scanned line by line without a panic, and
// an error names a line of the file.
func FuzzCheckLines(f *testing.F) {
	f.Add([]byte(chatLines(3, "m")))
	f.Add([]byte("{\"custom_id\":\"a\"}\n\n\xff\n"))
	f.Add([]byte(`{"custom_id":"x","method":"POST","url":"/v1/embeddings","body":{"model":"e","input":["a"]}}`))
	f.Fuzz(func(t *testing.T, content []byte) {
		chk := newChecker(endpointChat, 10, 0)
		require.NoError(t, chk.read(bytes.NewReader(content)))
		lines := bytes.Count(content, []byte("\n")) + 1
		require.LessOrEqual(t, chk.requests, lines)
		for _, e := range chk.errors() {
			if e.Line != nil {
				require.True(t, *e.Line >= 1 && *e.Line <= lines, "error names line %d of %d", *e.Line, lines)
			}
		}
	})
}
