package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRecoverCommandRefusals checks the recover command's refusals: each
// names what is wrong, and none touches the data directory.
func TestRecoverCommandRefusals(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	require.NoError(t, os.Mkdir(data, 0o700))
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	good := write("good.json", `[{"id":"c1","raft_addr":"127.0.0.1:7001"}]`)
	unknown := write("unknown.json", `[{"id":"c1","raft_addr":"127.0.0.1:7001","voter":true}]`)
	badEntry := write("bad.json", `[{"id":"c1","raft_addr":"127.0.0.1:7001"},{"id":"c2","raft_addr":"127.0.0.1:0"}]`)
	other := write("other.json", `[{"id":"c2","raft_addr":"127.0.0.1:7002"}]`)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no flags", nil, []string{"missing required flags: --data, --peers"}},
		{"no id", []string{"--data", data, "--peers", good}, []string{"records no replica id: give --id"}},
		{"bad id", []string{"--id", "c 1", "--data", data, "--peers", good}, []string{"--id", "whitespace"}},
		{"data missing", []string{"--id", "c1", "--data", filepath.Join(dir, "nope"), "--peers", good}, []string{"is not a directory"}},
		{"unknown field", []string{"--id", "c1", "--data", data, "--peers", unknown}, []string{unknown, `unknown field "voter"`}},
		{"bad entry", []string{"--id", "c1", "--data", data, "--peers", badEntry}, []string{badEntry, `entry 1 (id "c2")`}},
		{"not named", []string{"--id", "c1", "--data", data, "--peers", other}, []string{other, `does not name this replica "c1"`}},
		{"no state", []string{"--id", "c1", "--data", data, "--peers", good}, []string{"not a replica's data directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := recoverCmd()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(tc.args)
			err := cmd.Execute()
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
			entries, err := os.ReadDir(data)
			require.NoError(t, err)
			require.Empty(t, entries, "the data directory was touched")
		})
	}
}
