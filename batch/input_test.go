package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

func TestParseLine(t *testing.T) {
	tests := []struct {
		name   string
		line   string
		prompt string
		object string
		reason string // "" = valid
	}{
		{"minimal", `{"prompt":"hi"}`, "hi", `{"prompt":"hi"}`, ""},
		{"extra fields and spaces", "  {\"id\": 3, \"prompt\": \"a\\nb\", \"meta\": {\"k\": [1, 2]}} \r", "a\nb",
			`{"id": 3, "prompt": "a\nb", "meta": {"k": [1, 2]}}`, ""},
		{"empty prompt", `{"prompt":""}`, "", `{"prompt":""}`, ""},
		{"unicode escapes", `{"prompt":"caf\u00e9 ✓"}`, "café ✓", `{"prompt":"caf\u00e9 ✓"}`, ""},
		{"empty", "   ", "", "", "line is empty"},
		{"not json", `hello`, "", "", "not valid JSON"},
		{"array", `["prompt"]`, "", "", "not a JSON object (got an array)"},
		{"string", `"prompt"`, "", "", "not a JSON object (got a string)"},
		{"missing prompt", `{"text":"x"}`, "", "", `"prompt" is missing`},
		{"prompt case matters", `{"Prompt":"x"}`, "", "", `"prompt" is missing`},
		{"prompt number", `{"prompt":42}`, "", "", `"prompt" must be a string, got a number`},
		{"prompt null", `{"prompt":null}`, "", "", `"prompt" must be a string, got null`},
		{"prompt object", `{"prompt":{"a":1}}`, "", "", `"prompt" must be a string, got an object`},
		{"truncated", `{"prompt":"x"`, "", "", "not valid JSON"},
		{"trailing data", `{"prompt":"x"} {}`, "", "", "data after the JSON object"},
		{"trailing garbage", `{"prompt":"x"}x`, "", "", "data after the JSON object"},
		{"duplicate key", `{"prompt":"x","prompt":"y"}`, "", "", `duplicate key "prompt"`},
		{"duplicate escaped key", `{"a":1,"\u0061":2,"prompt":"x"}`, "", "", `duplicate key "a"`},
		{"invalid utf8", "{\"prompt\":\"\xff\"}", "", "", "not valid UTF-8"},
		{"trailing comma", `{"prompt":"x",}`, "", "", "not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prompt, obj, err := ParseLine([]byte(tt.line))
			if tt.reason != "" {
				require.ErrorIs(t, err, ErrInvalidLine)
				require.ErrorContains(t, err, tt.reason)
				require.Nil(t, obj)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.prompt, prompt)
			require.Equal(t, tt.object, string(obj))
		})
	}
}

func readAll(t *testing.T, r *Reader) (lines []Line, errs []*LineError) {
	t.Helper()
	for {
		l, err := r.Next()
		if errors.Is(err, io.EOF) {
			return lines, errs
		}
		var le *LineError
		if errors.As(err, &le) {
			errs = append(errs, le)
			continue
		}
		require.NoError(t, err)
		lines = append(lines, l)
	}
}

func TestReaderIndexesAndLineNumbers(t *testing.T) {
	input := "\xef\xbb\xbf{\"prompt\":\"a\"}\n" + // BOM on the first line
		"\n" + // blank: skipped, no index
		"   \t\r\n" + // blank too
		"{\"prompt\":\"b\",\"x\":1}\r\n" +
		"not json\n" +
		"{\"prompt\":\"c\"}" // no final newline
	r, err := NewReader(strings.NewReader(input), "in.jsonl", DefaultConfig())
	require.NoError(t, err)
	lines, errs := readAll(t, r)

	require.Len(t, lines, 3)
	require.Equal(t, Line{Index: 0, Prompt: "a", Raw: []byte(`{"prompt":"a"}`), File: "in.jsonl", LineNo: 1}, lines[0])
	require.Equal(t, Line{Index: 1, Prompt: "b", Raw: []byte(`{"prompt":"b","x":1}`), File: "in.jsonl", LineNo: 4}, lines[1])
	require.Equal(t, Line{Index: 2, Prompt: "c", Raw: []byte(`{"prompt":"c"}`), File: "in.jsonl", LineNo: 6}, lines[2])

	require.Len(t, errs, 1)
	require.Equal(t, "in.jsonl", errs[0].File)
	require.Equal(t, 5, errs[0].Line)
	require.True(t, strings.HasPrefix(errs[0].Error(), "in.jsonl:5: not valid JSON"), errs[0].Error())
	require.ErrorIs(t, errs[0], ErrInvalidLine)

	require.Equal(t, 6, r.LineNo())
	require.Equal(t, uint64(3), r.Count())
	require.Equal(t, 2, r.Blank())
	_, err = r.Next()
	require.ErrorIs(t, err, io.EOF, "EOF is sticky")
}

func TestReaderRawIsOwned(t *testing.T) {
	r, err := NewReader(strings.NewReader("{\"prompt\":\"first\"}\n{\"prompt\":\"second\"}\n"), "f", DefaultConfig())
	require.NoError(t, err)
	a, err := r.Next()
	require.NoError(t, err)
	_, err = r.Next()
	require.NoError(t, err)
	require.Equal(t, `{"prompt":"first"}`, string(a.Raw), "a later Next must not overwrite an earlier Line")
}

func TestReaderLongLines(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxLineBytes = 64
	exact := `{"prompt":"` + strings.Repeat("x", 64-len(`{"prompt":""}`)) + `"}`
	require.Len(t, exact, 64)
	long := `{"prompt":"` + strings.Repeat("y", 5000) + `"}`
	input := exact + "\r\n" + long + "\n" + exact + "\n" + long // the last one has no newline
	// One byte per Read call exercises the chunked assembly of lines.
	r, err := NewReader(iotest.OneByteReader(strings.NewReader(input)), "big.jsonl", cfg)
	require.NoError(t, err)
	lines, errs := readAll(t, r)
	require.Len(t, lines, 2)
	require.Equal(t, exact, string(lines[0].Raw))
	require.Equal(t, 3, lines[1].LineNo)
	require.Equal(t, uint64(1), lines[1].Index)
	require.Len(t, errs, 2)
	require.Equal(t, "big.jsonl:2: line is longer than the limit of 64 bytes", errs[0].Error())
	require.Equal(t, 4, errs[1].Line)
}

func TestReaderLongLineWithSmallBuffer(t *testing.T) {
	// A line much longer than the bufio buffer but within the limit.
	prompt := strings.Repeat("z", 3*readBufferSize+17)
	line := `{"prompt":"` + prompt + `"}`
	r, err := NewReader(strings.NewReader(line+"\n"+line), "f", DefaultConfig())
	require.NoError(t, err)
	lines, errs := readAll(t, r)
	require.Empty(t, errs)
	require.Len(t, lines, 2)
	require.Equal(t, prompt, lines[1].Prompt)
}

func TestReaderReadError(t *testing.T) {
	boom := errors.New("disk on fire")
	src := io.MultiReader(strings.NewReader("{\"prompt\":\"a\"}\n"), iotest.ErrReader(boom))
	r, err := NewReader(src, "f", DefaultConfig())
	require.NoError(t, err)
	_, err = r.Next()
	require.NoError(t, err)
	_, err = r.Next()
	require.ErrorIs(t, err, boom)
	require.NotErrorIs(t, err, ErrInvalidLine)
	_, err = r.Next()
	require.ErrorIs(t, err, boom, "read errors are sticky")
}

func TestReaderLinesIterator(t *testing.T) {
	r, err := NewReader(strings.NewReader("{\"prompt\":\"a\"}\n{\"prompt\":\"b\"}\n[]\n{\"prompt\":\"c\"}\n"), "f", DefaultConfig())
	require.NoError(t, err)
	var got []string
	var last error
	for l, err := range r.Lines() {
		if err != nil {
			last = err
			break
		}
		got = append(got, l.Prompt)
	}
	require.Equal(t, []string{"a", "b"}, got)
	require.ErrorIs(t, last, ErrInvalidLine)

	// Breaking early stops the iteration.
	r, err = NewReader(strings.NewReader("{\"prompt\":\"a\"}\n{\"prompt\":\"b\"}\n"), "f", DefaultConfig())
	require.NoError(t, err)
	n := 0
	for range r.Lines() {
		n++
		break
	}
	require.Equal(t, 1, n)
	l, err := r.Next()
	require.NoError(t, err)
	require.Equal(t, "b", l.Prompt)
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	err := Config{MaxLineBytes: 0, MaxReportedErrors: -1}.Validate()
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "MaxLineBytes")
	require.ErrorContains(t, err, "MaxReportedErrors")

	_, err = NewReader(strings.NewReader(""), "f", Config{})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewReader(nil, "f", DefaultConfig())
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestValidateInputReportsEveryInvalidLine(t *testing.T) {
	var b strings.Builder
	for i := range 250 {
		if i%2 == 0 {
			fmt.Fprintf(&b, "{\"prompt\":\"p%d\"}\n", i)
		} else {
			fmt.Fprintf(&b, "{\"text\":\"p%d\"}\n", i)
		}
	}
	cfg := DefaultConfig()
	cfg.MaxReportedErrors = 100
	rep, err := ValidateInput(context.Background(), strings.NewReader(b.String()), "in.jsonl", cfg)
	require.NoError(t, err)
	require.False(t, rep.OK())
	require.Equal(t, uint64(125), rep.Items)
	require.Equal(t, 250, rep.Lines)
	require.Equal(t, 125, rep.Invalid)
	require.Len(t, rep.Errors, 100)
	require.Equal(t, 25, rep.Omitted())
	for i, e := range rep.Errors {
		require.Equal(t, 2*i+2, e.Line, "errors are in file order with physical line numbers")
		require.Equal(t, "in.jsonl", e.File)
	}
	require.ErrorIs(t, rep.Err(), ErrInvalidInput)
	require.ErrorContains(t, rep.Err(), "125 invalid line(s)")
}

func TestValidateInputOutcomes(t *testing.T) {
	ctx := context.Background()
	rep, err := ValidateInput(ctx, strings.NewReader("{\"prompt\":\"a\"}\n\n{\"prompt\":\"b\"}\n"), "ok", DefaultConfig())
	require.NoError(t, err)
	require.True(t, rep.OK())
	require.NoError(t, rep.Err())
	require.Equal(t, uint64(2), rep.Items)
	require.Equal(t, 1, rep.Blank)

	rep, err = ValidateInput(ctx, strings.NewReader("\n  \n"), "empty", DefaultConfig())
	require.NoError(t, err)
	require.False(t, rep.OK())
	require.ErrorContains(t, rep.Err(), "no items")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = ValidateInput(cancelled, strings.NewReader("{\"prompt\":\"a\"}\n"), "f", DefaultConfig())
	require.ErrorIs(t, err, context.Canceled)

	_, err = ValidateInput(ctx, iotest.ErrReader(errors.New("boom")), "f", DefaultConfig())
	require.ErrorContains(t, err, "boom")
}

// FuzzParseLine: ParseLine never panics, and what it accepts is a JSON
// object whose "prompt" is the returned string and which MergeResult can turn
// into a valid output line that keeps every input member.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		`{"prompt":"hi"}`, ` {"prompt":"a","meta":{"x":[1,2,{"y":null}]}} `, `{"prompt":1}`, `[]`, `{`,
		`{"prompt":"x","prompt":"y"}`, "{\"prompt\":\"\xff\"}", `{"prompt":"\u00e9\ud83d\ude00"}`,
		`{"completion":"old","prompt":"p","sample_id":"zz"}`, `{"prompt":"x"} trailing`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		prompt, obj, err := ParseLine(raw)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidLine)
			return
		}
		m := decodeObject(t, obj)
		require.Equal(t, prompt, m["prompt"])

		var id [32]byte
		out, err := MergeResult(obj, id, []byte(`{"completion":"c","finish_reason":"stop"}`), "")
		require.NoError(t, err)
		o := decodeObject(t, out)
		require.NotContains(t, string(out), "\n")
		for k, v := range m {
			if !isOutputKey(k) {
				require.Equal(t, v, o[k], "member %q must survive", k)
			}
		}
		require.Equal(t, "c", o["completion"])
		require.Len(t, o["sample_id"], 64)
	})
}

// decodeObject decodes a JSON object keeping numbers exact.
func decodeObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	require.NoError(t, dec.Decode(&m), "not a JSON object: %q", b)
	require.NotNil(t, m, "not a JSON object: %q", b)
	return m
}
