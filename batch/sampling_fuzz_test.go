package batch

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseSamplingJSON: ParseSamplingJSON never panics; an error matches
// ErrInvalidSampling. What it accepts is valid, and its canonical JSON is
// one compact JSON object that parses back to the same parameters (and the
// same Canonical bytes, so the same sample ids).
func FuzzParseSamplingJSON(f *testing.F) {
	for _, s := range []string{
		`{"max_tokens":256,"seed":0,"temperature":1,"top_p":1}`, `{}`, ``, `  `, `null`,
		`{"temperature":0.7,"top_p":0.9,"max_tokens":64,"seed":42}`, `{"temperature":-0,"top_p":1e-300}`,
		`{"seed":18446744073709551615,"max_tokens":4294967295,"temperature":2}`,
		// Invalid.
		`{"temperature":2.0000000000000004}`, `{"top_p":0}`, `{"max_tokens":0}`, `{"max_tokens":4294967296}`,
		`{"seed":-1}`, `{"temperature":"1"}`, `{"extra":1}`, `{"temperature":1} {}`, `{"temperature":1}x`,
		`[]`, `1`, `{`, `{"temperature":1e400}`, `{"Temperature":3}`, "{\"temperature\":1,\"temperature\":\xff}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseSamplingJSON(b)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidSampling)
			require.Equal(t, SamplingParams{}, p)
			return
		}
		require.NoError(t, p.Validate())
		requireSamplingRoundTrip(t, p)
	})
}

// FuzzSamplingJSONRoundTrip: for every valid SamplingParams p,
// ParseSamplingJSON(p.JSON()) == p; JSON never panics on invalid ones.
func FuzzSamplingJSONRoundTrip(f *testing.F) {
	f.Add(1.0, 1.0, uint32(256), uint64(0))
	f.Add(0.7, 0.9, uint32(64), uint64(42))
	f.Add(math.Copysign(0, -1), math.SmallestNonzeroFloat64, uint32(1), uint64(math.MaxUint64))
	f.Add(2.0, 1.0, uint32(math.MaxUint32), uint64(1)<<53+1)
	f.Add(1e-7, 0.1+0.2, uint32(3), uint64(7))
	f.Add(math.NaN(), math.Inf(1), uint32(0), uint64(0))
	f.Add(-1.0, 1.5, uint32(1), uint64(0))
	f.Fuzz(func(t *testing.T, temperature, topP float64, maxTokens uint32, seed uint64) {
		p := SamplingParams{Temperature: temperature, TopP: topP, MaxTokens: maxTokens, Seed: seed}
		b := p.JSON()
		require.True(t, json.Valid(b), "%q", b)
		if p.Validate() != nil {
			return
		}
		requireSamplingRoundTrip(t, p)
	})
}

// requireSamplingRoundTrip checks that valid p survives JSON and parsing.
func requireSamplingRoundTrip(t *testing.T, p SamplingParams) {
	t.Helper()
	b := p.JSON()
	var compact bytes.Buffer
	require.NoError(t, json.Compact(&compact, b))
	require.Equal(t, compact.String(), string(b), "JSON is not compact")
	back, err := ParseSamplingJSON(b)
	require.NoError(t, err, "%q", b)
	require.Equal(t, p, back, "%q", b)
	require.Equal(t, p.Canonical(), back.Canonical())
	require.Equal(t, b, back.JSON(), "JSON is not canonical")
}
