package batch

import (
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// objectCases are objects of every shape parseObjectFast must walk, and
// lines it must leave to the decoder.
var objectCases = []string{
	`{}`, ` { } `, "\t{\n}\r\n", `{"a":1}`, `{"a":1,"b":2}`, `{"a":1,"a":2}`, `{"a":1,"b":{"a":2}}`,
	`{"a":{"b":1,"b":2}}`, `{"a":[1,{"a":1}],"b":"]}","c":"\"}"}`, `{"a\u0062":1,"ab":2}`,
	`{"a\"b":1,"c":2}`, `{"k":"v\\","k2":"\\"}`, `{"x":true,"y":false,"z":null,"w":-1.5e3}`,
	`{ "a" : 1 , "b" : [ ] , "c" : { } }`, "{\"a\"\t:\n\"s\"\r, \"b\":[1 , 2]\n}",
	`{"custom_id":"c1","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`,
	`{"prompt":"quote \" and é","n":3}`, `{"prompt":"x","prompt":"y"}`,
	`[1]`, `"s"`, `1`, `null`, `{} {}`, `{"a":1}x`, `{"a":}`, `{"a"}`, ``, ` `, `{`, `}`, "{\"a\":\"\xff\"}",
}

// TestParseObjectFastAgrees: the decoder-free path returns exactly the
// decoder's fields (names, keys and values byte for byte) where it answers,
// and parseObject gives the decoder's error where it does not.
func TestParseObjectFastAgrees(t *testing.T) {
	for _, c := range objectCases {
		checkObjectPaths(t, []byte(c))
	}
	// An append to one field must not write into the next.
	fields, err := parseObject([]byte(`{"a":"x","b":"y"}`))
	require.NoError(t, err)
	_ = append(fields[0].value, "zz"...)
	_ = append(fields[0].key, "zz"...)
	require.Equal(t, `"b"`, string(fields[1].key))
	require.Equal(t, `"y"`, string(fields[1].value))
}

func checkObjectPaths(t *testing.T, data []byte) {
	t.Helper()
	got, gerr := parseObject(data)
	if !utf8.Valid(data) { // refused before either path
		require.EqualError(t, gerr, "line is not valid UTF-8")
		return
	}
	want, werr := parseObjectSlow(data)
	if werr != nil {
		require.EqualError(t, gerr, werr.Error(), "%q", data)
		return
	}
	require.NoError(t, gerr, "%q", data)
	require.Equal(t, len(want), len(got), "%q", data)
	for i := range want {
		require.Equal(t, want[i].name, got[i].name, "%q field %d", data, i)
		require.Equal(t, string(want[i].key), string(got[i].key), "%q field %d", data, i)
		require.Equal(t, string(want[i].value), string(got[i].value), "%q field %d", data, i)
	}
	// A copy: the caller may reuse data.
	if len(got) > 0 {
		saved := string(got[0].value)
		clear(data)
		require.Equal(t, saved, string(got[0].value))
	}
}

// FuzzParseObjectPaths: parseObject with its fast path answers like the
// token decoder alone.
func FuzzParseObjectPaths(f *testing.F) {
	for _, s := range objectCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkObjectPaths(t, data)
	})
}

// BenchmarkParseObject splits a typical prompt line.
func BenchmarkParseObject(b *testing.B) {
	data := []byte(`{"prompt": "Summarise item 123456 in one line.", "max_tokens": 64, "meta": {"k": [1, 2, "x"]}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseObject(data); err != nil {
			b.Fatal(err)
		}
	}
}
