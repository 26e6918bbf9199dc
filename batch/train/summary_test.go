package train

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/gpu/mlp"
	"github.com/rollout/rollout/internal/limits"
)

// TestSummaryRoundTrip: each role's result gives a small summary that
// decodes to the result's metrics and hashes, and the steps read from
// summaries equal the steps read from the results.
func TestSummaryRoundTrip(t *testing.T) {
	w := make([]float32, 100_000) // the summary does not grow with the model
	w[3] = 1.5
	train, eval := &Metrics{Loss: 0.5, Accuracy: 0.75, Count: 64}, &Metrics{Loss: 0.4, Accuracy: 0.9, Count: 359}
	initRes := weightsResult(t, 0, w, nil, nil)
	reduce := weightsResult(t, 3, w, train, eval)
	reduce1 := weightsResult(t, 1, w, train, nil)
	shard, err := (&ShardResult{Step: 2, Shard: 1, WeightsBlake3: mlp.Hash(w), Grad: mlp.Encode(w), LossSum: 3, Correct: 2, Count: 4}).Encode()
	require.NoError(t, err)

	var results, summaries [][]byte
	for _, tc := range []struct {
		res  []byte
		want Summary
	}{
		{initRes, Summary{Role: RoleInit, Blake3: mlp.Hash(w)}},
		{reduce, Summary{Role: RoleReduce, Step: 3, Blake3: mlp.Hash(w), Train: train, Eval: eval}},
		{reduce1, Summary{Role: RoleReduce, Step: 1, Blake3: mlp.Hash(w), Train: train}},
		{shard, Summary{Role: RoleShard, Step: 2, Shard: 1, Blake3: mlp.Hash(w), Train: &Metrics{Loss: 0.75, Accuracy: 0.5, Count: 4}}},
	} {
		s, err := EncodeSummary(tc.res)
		require.NoError(t, err)
		require.LessOrEqual(t, len(s), 300, string(s))
		require.True(t, strings.HasPrefix(string(s), `{"v":1,"role":"`+string(tc.want.Role)+`"`), string(s))
		got, err := DecodeSummary(s)
		require.NoError(t, err)
		require.Equal(t, tc.want, *got)
		results, summaries = append(results, tc.res), append(summaries, s)
	}
	fromResults, err := StepsFromResults(results)
	require.NoError(t, err)
	fromSummaries, err := StepsFromSummaries(append(summaries, nil))
	require.NoError(t, err)
	require.Equal(t, fromResults, fromSummaries)
	require.Len(t, fromSummaries, 2)
}

func TestDecodeSummaryRefuses(t *testing.T) {
	h := strings.Repeat("a", 64)
	for _, tc := range []struct{ in, msg string }{
		{``, "not a JSON object"},
		{`{"v":2,"role":"init","step":0,"blake3":"` + h + `"}`, "version 2"},
		{`{"v":1,"role":"x","step":0,"blake3":"` + h + `"}`, `role "x"`},
		{`{"v":1,"role":"init","step":0,"blake3":"ab"}`, "not a blake3-256"},
		{`{"v":1,"role":"init","step":0,"blake3":"` + h + `","extra":1}`, "unknown field"},
		{`{"v":1,"role":"reduce","step":1,"blake3":"` + h + `"}`, "train metrics"},
		{`{"v":1,"role":"shard","step":1,"shard":-1,"blake3":"` + h + `","train":{"loss":1,"accuracy":1,"count":1}}`, "out of range"},
		{`{"v":1,"role":"reduce","step":1,"blake3":"` + h + `","train":{"loss":-1,"accuracy":1,"count":1}}`, "loss"},
		{`{"v":1,"role":"reduce","step":1,"blake3":"` + h + `","train":{"loss":1,"accuracy":2,"count":1}}`, "accuracy"},
		{strings.Repeat(" ", MaxSummaryBytes+1), "over"},
	} {
		_, err := DecodeSummary([]byte(tc.in))
		require.ErrorIs(t, err, ErrInvalidSummary, tc.in)
		require.ErrorContains(t, err, tc.msg, tc.in)
	}
}

func FuzzDecodeSummary(f *testing.F) {
	h := strings.Repeat("a", 64)
	f.Add([]byte(`{"v":1,"role":"reduce","step":3,"blake3":"` + h + `","train":{"loss":0.5,"accuracy":0.75,"count":64}}`))
	f.Add([]byte(`{"v":1,"role":"shard","step":2,"shard":1,"blake3":"` + h + `","train":{"loss":0.5,"accuracy":0.75,"count":4}}`))
	f.Add([]byte(`{"v":1,"role":"init","step":0,"blake3":"` + h + `"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSummary(b)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidSummary)
			return
		}
		// What decodes encodes again and decodes to the same.
		enc, err := s.Encode()
		require.NoError(t, err)
		again, err := DecodeSummary(enc)
		require.NoError(t, err)
		require.Equal(t, s, again)
	})
}

// TestStoreRunsTakeLargeModels: a 10-million-parameter model is refused
// for a run whose results travel inline (they would not fit the ledger's
// per-result limit) and accepted for a run with a store.
func TestStoreRunsTakeLargeModels(t *testing.T) {
	text := strings.Replace(validConfig, "hidden = [32]", "hidden = [4096, 2400]", 1)
	_, err := ParseConfig([]byte(text), "big.toml")
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "10123050 parameters")
	c, err := ParseConfigFor([]byte(text), "big.toml", true)
	require.NoError(t, err)
	require.Equal(t, 10_123_050, c.Model.NumParams())
	require.ErrorIs(t, c.CheckLimits(limits.Default()), ErrTooLarge)
	require.NoError(t, c.CheckLimitsFor(limits.Default(), true))
	// The payload limit still holds for a store run.
	l := limits.Default()
	l.MaxPayloadBytes = 8192
	require.ErrorContains(t, c.CheckLimitsFor(l, true), "held-out samples")
}
