package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMembers: the members of valid JSON objects come out as written, in
// order; what the scan leaves to a decoder answers false.
func TestMembers(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want [][2]string // key, value as written
		ok   bool
	}{
		{`{}`, nil, true},
		{` { } `, nil, true},
		{`{"a":1}`, [][2]string{{"a", "1"}}, true},
		{" {\"a\" :\t\"x,}\\\"\" , \"b\":[1,{\"c\":[]}],\"d\":null}\n", [][2]string{{"a", `"x,}\""`}, {"b", `[1,{"c":[]}]`}, {"d", "null"}}, true},
		{`{"a":{"b":"}"},"c":-1.5e3}`, [][2]string{{"a", `{"b":"}"}`}, {"c", "-1.5e3"}}, true},
		{`[1,2]`, nil, false},
		{`"s"`, nil, false},
		{`{"a\"b":1}`, nil, false},
	} {
		require.True(t, json.Valid([]byte(tc.in)), tc.in)
		var got [][2]string
		ok := Members([]byte(tc.in), func(ks, ke, vs, ve int) bool {
			got = append(got, [2]string{tc.in[ks:ke], tc.in[vs:ve]})
			return true
		})
		require.Equal(t, tc.ok, ok, tc.in)
		if ok {
			require.Equal(t, tc.want, got, tc.in)
		}
	}
}

// TestMembersStops: a yield that answers false stops the scan, which
// answers false.
func TestMembersStops(t *testing.T) {
	n := 0
	ok := Members([]byte(`{"a":1,"b":2,"c":3}`), func(_, _, _, _ int) bool { n++; return n < 2 })
	require.False(t, ok)
	require.Equal(t, 2, n)
}

// TestValueStrings: Value ends a string at its closing quote whatever
// backslashes come before quotes inside it.
func TestValueStrings(t *testing.T) {
	for _, s := range []string{`""`, `"a"`, `"\""`, `"\\"`, `"\\\""`, `"a\\\\"`, `"\"\"\\"`, `"` + strings.Repeat(`x\"`, 50) + `"`, `"\u0022"`} {
		require.True(t, json.Valid([]byte(s)), s)
		in := s + `,"after"`
		require.Equal(t, len(s), Value([]byte(in), 0), s)
	}
}
