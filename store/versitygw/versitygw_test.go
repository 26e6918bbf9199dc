package versitygw

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFind(t *testing.T) {
	t.Setenv("PATH", "")
	mod := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module x\n"), 0o644))
	bin := filepath.Join(mod, "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	t.Chdir(t.TempDir())

	t.Setenv(Env, "")
	_, err := Find(bin)
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorContains(t, err, "make tools-s3")

	tool := filepath.Join(mod, ".tools", "versitygw")
	require.NoError(t, os.MkdirAll(filepath.Dir(tool), 0o755))
	require.NoError(t, os.WriteFile(tool, nil, 0o755))
	p, err := Find(bin)
	require.NoError(t, err)
	require.Equal(t, tool, p)

	t.Setenv(Env, filepath.Join(mod, "none"))
	_, err = Find(bin)
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorContains(t, err, Env)
	t.Setenv(Env, tool)
	p, err = Find()
	require.NoError(t, err)
	require.Equal(t, tool, p)
}
