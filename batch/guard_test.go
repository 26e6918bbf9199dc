package batch

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/api/validate"
)

// TestOutputInsideInputGlobRefused: an output directory whose files would
// match the input glob is refused, naming both; one outside it is fine.
func TestOutputInsideInputGlobRefused(t *testing.T) {
	conf := func(glob, dir string) []byte {
		return []byte("[model]\nuri = \"m\"\n[input]\nglob = \"" + glob + "\"\n[output]\ndir = \"" + dir + "\"\n")
	}
	for _, tc := range []struct{ glob, dir string }{
		{"data/*.jsonl", "data"},
		{"data/*/*.jsonl", "data/out"},
		{"*", "."},
		{"data/*/*", "data/out"},
	} {
		_, err := ParseRunConfig(conf(tc.glob, tc.dir), filepath.Join("cfg", "run.toml"))
		require.ErrorIs(t, err, ErrInvalidRunConfig, "%+v", tc)
		require.ErrorContains(t, err, "cfg/run.toml:6: output.dir: "+filepath.Join("cfg", tc.dir)+" is inside the input glob "+filepath.Join("cfg", tc.glob))
	}
	for _, tc := range []struct{ glob, dir string }{
		{"data/*.jsonl", "out"},
		{"data/in-*.jsonl", "data"},
		{"data/*/*.jsonl", "results"},
	} {
		_, err := ParseRunConfig(conf(tc.glob, tc.dir), "run.toml")
		require.NoError(t, err, "%+v", tc)
	}
}

// TestScannerPerItemLimit: a line over Config.MaxItemBytes is an invalid
// line saying so, before anything could be sent.
func TestScannerPerItemLimit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "in.jsonl")
	long := `{"prompt":"` + strings.Repeat("x", 200) + `"}`
	require.NoError(t, os.WriteFile(path, []byte(`{"prompt":"a"}`+"\n"+long+"\n"), 0o644))
	cfg := DefaultConfig()
	cfg.MaxItemBytes = 100
	rep, err := ValidateInputs(t.Context(), []string{path}, cfg)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Invalid)
	require.Equal(t, path+":2: line is 213 bytes, exceeds the per-item limit of 100 bytes", rep.Errors[0].Error())
}

// TestOutputDirWritesUnrenderableItems: items whose id, payload or result
// cannot be rendered become error lines with their reason (OpenAI Batch
// ones in the errors file) and the other items are written as usual.
func TestOutputDirWritesUnrenderableItems(t *testing.T) {
	dir := t.TempDir()
	o, err := CreateOutputDir(dir)
	require.NoError(t, err)
	var sid [32]byte
	sid[0] = 0xab
	good := FinishedItem{Index: 0, ID: sid[:], SampleID: sid, Payload: []byte(`{"prompt":"a"}`), Done: true, Result: EncodeCompletionResult("A", "stop")}
	require.NoError(t, o.Add(good))
	require.NoError(t, o.Add(FinishedItem{Index: 1, ID: []byte("abc"), Payload: []byte(`{"prompt":"b"}`), Done: true, Result: EncodeCompletionResult("B", "stop")}))
	require.NoError(t, o.Add(FinishedItem{Index: 2, ID: sid[:], SampleID: sid, Payload: []byte("not json"), Reason: "x"}))
	require.NoError(t, o.Add(FinishedItem{Index: 3, ID: sid[:], SampleID: sid, Payload: []byte(`{"custom_id":"c3","method":"POST","url":"/v1/completions","body":{}}`),
		Done: true, Result: []byte("garbage")}))
	require.Equal(t, OutputSummary{Results: 3, Errors: 1, Done: 3, Dead: 1, Unrenderable: 3}, o.Summary())
	require.NoError(t, o.Commit())

	res, err := os.ReadFile(filepath.Join(dir, ResultsFile))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(res)), "\n")
	require.Len(t, lines, 3)
	require.Contains(t, lines[0], `"completion":"A"`)
	require.Equal(t, `{"index":1,"error":"cannot render item: batch: invalid input line: item 1 has a 3-byte id, want 32","sample_id":"616263"}`, lines[1])
	require.Contains(t, lines[2], `"index":2`)
	require.Contains(t, lines[2], "not valid JSON")
	errs, err := os.ReadFile(filepath.Join(dir, ErrorsFile))
	require.NoError(t, err)
	require.Contains(t, string(errs), `"custom_id":"c3"`)
	require.Contains(t, string(errs), CodeUnrenderable)
	for _, l := range append(lines, strings.TrimSpace(string(errs))) {
		require.True(t, json.Valid([]byte(l)), l)
	}
}

// FuzzObjectCheckersAgree: the API edge's payload check
// (validate.JSONObject) accepts exactly what the output's object parser
// accepts, so an accepted payload always renders.
func FuzzObjectCheckersAgree(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `[1]`, `{"a":1,"a":2}`, "{\"a\":\"\xff\"}", ` {"a":{"b":[]}} `, `{} {}`, `{"a":1}x`, "\t{}\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, perr := parseObject(bytes.Trim(data, jsonSpace))
		verr := validate.JSONObject(data)
		if (perr == nil) != (verr == nil) {
			t.Fatalf("%q: output parser says %v, edge says %v", data, perr, verr)
		}
	})
}
