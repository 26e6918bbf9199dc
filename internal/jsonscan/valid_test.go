package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
)

// validCases are inputs where a validator is easy to get wrong: numbers,
// literals, escapes, nesting at and past encoding/json's depth limit,
// invalid UTF-8, a byte order mark, lone surrogates, white space and
// trailing garbage. Each is checked, and seeds the fuzzer, against
// encoding/json.Valid.
func validCases() []string {
	cases := []string{
		``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `1`, `-`, `+1`, `01`, `-01`, `1.`, `.5`, `1.5`, `1e`, `1e+`, `1e-7`, `1E+07`,
		`1.0e`, `0.0`, `00`, `-0.0e-0`, `1x`, `123456789012345678901234567890`, `-1e999999999999`, `2.5E`, `1..2`,
		`true`, `false`, `null`, `tru`, `nul`, `truex`, `nulll`, `True`, `NaN`, `Infinity`, `-Infinity`,
		`"\u0041"`, `"\u00"`, `"\u004G"`, `"\ud800"`, `"\udc00\ud800"`, `"\uD834\uDD1E"`, `"\x"`, `"\'"`, `"\/"`,
		`"\b\f\n\r\t\"\\"`, `"a` + "\x00" + `"`, `"a` + "\x1f" + `"`, `"a` + "\x7f" + `"`, `"` + "\t" + `"`,
		"\"\xff\"", "\"\xc3\x28\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\xef\xbb\xbf{}", "{}\xef\xbb\xbf",
		" \t\r\n{\"a\" : [ 1 , 2 ] }\n\r\t ", "{}\x00", "{} {}", "[] x", "{}garbage", "1 2", `"a" "b"`, "\v1", "1\f",
		`{"a":1,}`, `[1,]`, `[,1]`, `{,"a":1}`, `{"a"}`, `{"a":}`, `{"a" 1}`, `{1:2}`, `{"a":1 "b":2}`, `{"a":1,"a":2}`,
		`[1 2]`, `[1,,2]`, `{"a":[}`, `[{]`, `[}`, `{]`, `{"a":{"b":{"c":[1,{"d":null}]}}}`, `["\"",'x']`,
		`"unterminated`, `"ends in backslash\`, `"\`, `[`, `{`, `{"a"`, `{"a":`, `{"a":1`, `[1`, `[1,`,
		`{"prompt":"hello"}`, `{"prompt":"` + strings.Repeat("abcdefgh", 300) + `"}`,
		`{"prompt":"` + strings.Repeat("é€😀", 100) + `","n":12345678901234567890123}`,
		`{"prompt":"` + strings.Repeat("x", 13) + "\x01" + `"}`, `{"prompt":"` + strings.Repeat("x", 7) + `\"` + strings.Repeat("y", 9) + `"}`,
		strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
		strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
		strings.Repeat(`{"a":`, MaxDepth) + "1" + strings.Repeat("}", MaxDepth),
		strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1),
		strings.Repeat("[", MaxDepth-1) + `{"a":[]}` + strings.Repeat("]", MaxDepth-1),
		strings.Repeat("[", 100),
	}
	// Every prefix of a long valid line, each control byte and each byte
	// above 0x7f inside a string at each position of an 8-byte word.
	line := `{"prompt":"abc\u00e9\n\"q\"","x":[1,-2.5e+3,true,false,null,{}],"y":{"z":""}}`
	for k := range len(line) + 1 {
		cases = append(cases, line[:k])
	}
	for c := range 256 {
		for pos := range 9 {
			cases = append(cases, `"`+strings.Repeat("a", pos)+string([]byte{byte(c)})+strings.Repeat("b", 9)+`"`)
		}
	}
	return cases
}

// TestValidMatchesEncodingJSON: Valid answers as encoding/json.Valid on
// every tricky case.
func TestValidMatchesEncodingJSON(t *testing.T) {
	for _, in := range validCases() {
		if got, want := Valid([]byte(in)), json.Valid([]byte(in)); got != want {
			t.Errorf("Valid(%.80q) = %v, encoding/json.Valid says %v", in, got, want)
		}
	}
}

// TestValidDepthLimit: nesting of exactly MaxDepth is valid, one more is
// not (encoding/json's limit), for arrays and objects.
func TestValidDepthLimit(t *testing.T) {
	for _, c := range []struct{ open, inner, close string }{{"[", "", "]"}, {`{"k":`, "0", "}"}} {
		nest := func(d int) []byte {
			return []byte(strings.Repeat(c.open, d) + c.inner + strings.Repeat(c.close, d))
		}
		if !Valid(nest(MaxDepth)) || !json.Valid(nest(MaxDepth)) {
			t.Errorf("nesting %q %d deep: invalid, want valid", c.open, MaxDepth)
		}
		if Valid(nest(MaxDepth+1)) || json.Valid(nest(MaxDepth+1)) {
			t.Errorf("nesting %q %d deep: valid, want invalid", c.open, MaxDepth+1)
		}
	}
}

// TestValidAllocatesNothing: a 2 KiB line is checked without allocating.
func TestValidAllocatesNothing(t *testing.T) {
	line := []byte(`{"prompt":"` + strings.Repeat("abcdefgh", 256) + `"}`)
	if n := testing.AllocsPerRun(100, func() { Valid(line) }); n != 0 {
		t.Fatalf("Valid allocates %v times a call, want 0", n)
	}
}

// FuzzValid: Valid and encoding/json.Valid give the same answer on every
// input (go test -fuzz FuzzValid ./internal/jsonscan).
func FuzzValid(f *testing.F) {
	for _, in := range validCases() {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if got, want := Valid(in), json.Valid(in); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json.Valid says %v", in, got, want)
		}
	})
}

// promptLine is a 2 KiB input line of the payload benchmark's kind.
func promptLine() []byte {
	return []byte(`{"prompt":"bench item 000000001234 ` + strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_", 32)[:2048-36] + `"}`)
}

func BenchmarkValid(b *testing.B) {
	line := promptLine()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if !Valid(line) {
			b.Fatal("invalid")
		}
	}
}

func BenchmarkValidEncodingJSON(b *testing.B) {
	line := promptLine()
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if !json.Valid(line) {
			b.Fatal("invalid")
		}
	}
}
