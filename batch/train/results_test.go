package train

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/gpu/mlp"
)

func weightsResult(t *testing.T, step int, w []float32, train, eval *Metrics) []byte {
	t.Helper()
	role := RoleReduce
	if step == 0 {
		role = RoleInit
	}
	b, err := (&WeightsResult{Role: role, Step: step, Weights: mlp.Encode(w), Blake3: mlp.Hash(w), Train: train, Eval: eval}).Encode()
	require.NoError(t, err)
	return b
}

func TestResultsRoundTrip(t *testing.T) {
	w := []float32{1, 2, 3.5}
	b := weightsResult(t, 3, w, &Metrics{Loss: 0.5, Accuracy: 0.75, Count: 64}, &Metrics{Loss: 0.4, Accuracy: 0.9, Count: 359})
	require.True(t, strings.HasPrefix(string(b), `{"v":1,"role":"reduce","step":3,`), string(b))
	r, err := DecodeResult(b)
	require.NoError(t, err)
	require.Equal(t, RoleReduce, r.Role)
	require.Equal(t, 3, r.Weights.Step)
	got, err := mlp.Decode(r.Weights.Weights)
	require.NoError(t, err)
	require.Equal(t, w, got)
	require.Equal(t, 0.9, r.Weights.Eval.Accuracy)

	sb, err := (&ShardResult{Step: 2, Shard: 1, WeightsBlake3: mlp.Hash(w), Grad: mlp.Encode(w), LossSum: 3, Correct: 2, Count: 4}).Encode()
	require.NoError(t, err)
	r, err = DecodeResult(sb)
	require.NoError(t, err)
	require.Equal(t, RoleShard, r.Role)
	require.Equal(t, 4, r.Shard.Count)

	_, err = (&ShardResult{LossSum: math.NaN()}).Encode()
	require.ErrorIs(t, err, ErrInvalidResult)
	_, err = (&WeightsResult{Role: RoleShard}).Encode()
	require.ErrorIs(t, err, ErrInvalidResult)
	_, err = (&WeightsResult{Role: RoleReduce, Train: &Metrics{Loss: math.Inf(1), Count: 1}}).Encode()
	require.ErrorIs(t, err, ErrInvalidResult)
}

func TestDecodeResultRefuses(t *testing.T) {
	w := []float32{1, 2}
	good := weightsResult(t, 1, w, &Metrics{Loss: 1, Accuracy: 0.5, Count: 2}, nil)
	var m map[string]any
	require.NoError(t, json.Unmarshal(good, &m))
	mod := func(k string, v any) []byte {
		c := map[string]any{}
		for a, b := range m {
			c[a] = b
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		b, err := json.Marshal(c)
		require.NoError(t, err)
		return b
	}
	for name, b := range map[string][]byte{
		"not json":      []byte("nope"),
		"array":         []byte("[1]"),
		"trailing":      append(append([]byte{}, good...), []byte(" {}")...),
		"version":       mod("v", 2),
		"role":          mod("role", "train"),
		"unknown field": mod("extra", 1),
		"hash":          mod("blake3", strings.Repeat("0", 64)),
		"weights":       mod("weights", "AAA="),
		"step":          mod("step", 0),
		"no train":      mod("train", nil),
		"accuracy":      mod("train", map[string]any{"loss": 1, "accuracy": 2, "count": 1}),
		"count":         mod("train", map[string]any{"loss": 1, "accuracy": 0, "count": 0}),
		"init metrics":  mod("role", "init"),
		"shard":         []byte(`{"v":1,"role":"shard","step":1,"shard":0,"weights_blake3":"x","grad":"AAAAAA==","loss_sum":1,"correct":1,"count":1}`),
		"shard counts":  []byte(`{"v":1,"role":"shard","step":1,"shard":0,"weights_blake3":"` + strings.Repeat("a", 64) + `","grad":"AAAAAA==","loss_sum":1,"correct":2,"count":1}`),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeResult(b)
			require.ErrorIs(t, err, ErrInvalidResult)
		})
	}
}

func TestStepsFromResults(t *testing.T) {
	w0, w1, w2 := []float32{0}, []float32{1}, []float32{2}
	tr := &Metrics{Loss: 2, Accuracy: 0.1, Count: 64}
	ev := &Metrics{Loss: 1, Accuracy: 0.8, Count: 359}
	shard, err := (&ShardResult{Step: 1, Shard: 0, WeightsBlake3: mlp.Hash(w0), Grad: mlp.Encode(w0), LossSum: 3, Correct: 2, Count: 4}).Encode()
	require.NoError(t, err)
	results := [][]byte{
		weightsResult(t, 2, w2, tr, ev), nil, shard, weightsResult(t, 0, w0, nil, nil),
		weightsResult(t, 1, w1, tr, nil), weightsResult(t, 2, w2, tr, ev),
	}
	steps, err := StepsFromResults(results)
	require.NoError(t, err)
	require.Len(t, steps, 2)
	require.Equal(t, 1, steps[0].Step)
	require.Nil(t, steps[0].Eval)
	require.Equal(t, mlp.Hash(w1), steps[0].Blake3)
	require.Equal(t, 2, steps[1].Step)
	require.Equal(t, *ev, *steps[1].Eval)
	require.Equal(t, *tr, steps[1].Train)

	_, err = StepsFromResults(append(results, weightsResult(t, 2, w1, tr, nil)))
	require.ErrorIs(t, err, ErrInvalidResult)
	require.ErrorContains(t, err, "step 2 has two results")
	_, err = StepsFromResults([][]byte{[]byte("{}")})
	require.ErrorIs(t, err, ErrInvalidResult)
	require.ErrorContains(t, err, "result 0")
	steps, err = StepsFromResults(nil)
	require.NoError(t, err)
	require.Empty(t, steps)
}

func TestDecodePayloadRefuses(t *testing.T) {
	for name, b := range map[string]string{
		"not json":  "x",
		"version":   `{"v":0,"role":"init","model":{"layers":[4,2],"activation":"relu"},"seed":1}`,
		"role":      `{"v":1,"role":"x"}`,
		"unknown":   `{"v":1,"role":"init","model":{"layers":[4,2],"activation":"relu"},"seed":1,"x":1}`,
		"model":     `{"v":1,"role":"init","model":{"layers":[4],"activation":"relu"},"seed":1}`,
		"act":       `{"v":1,"role":"init","model":{"layers":[4,2],"activation":"gelu"},"seed":1}`,
		"step":      `{"v":1,"role":"shard","model":{"layers":[4,2],"activation":"relu"},"step":0,"shard":0,"samples":{"x":"","y":""}}`,
		"shards":    `{"v":1,"role":"reduce","model":{"layers":[4,2],"activation":"relu"},"step":1,"shards":0,"batch_size":1,"learning_rate":0.1}`,
		"batch":     `{"v":1,"role":"reduce","model":{"layers":[4,2],"activation":"relu"},"step":1,"shards":2,"batch_size":1,"learning_rate":0.1}`,
		"lr":        `{"v":1,"role":"reduce","model":{"layers":[4,2],"activation":"relu"},"step":1,"shards":1,"batch_size":1,"learning_rate":0}`,
		"seed type": `{"v":1,"role":"init","model":{"layers":[4,2],"activation":"relu"},"seed":-1}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodePayload([]byte(b))
			require.ErrorIs(t, err, ErrInvalidPayload)
		})
	}
	s := Samples{X: mlp.Encode([]float32{1, 2, 3, 4}), Y: []byte{1, 0}}
	_, _, err := s.Decode(2, 2)
	require.NoError(t, err)
	_, _, err = s.Decode(3, 2)
	require.ErrorIs(t, err, ErrInvalidPayload)
	_, _, err = s.Decode(2, 1)
	require.ErrorIs(t, err, ErrInvalidPayload)
	_, _, err = (Samples{X: mlp.Encode([]float32{1, float32(math.NaN())}), Y: []byte{0}}).Decode(2, 2)
	require.ErrorIs(t, err, ErrInvalidPayload)
	_, _, err = (Samples{}).Decode(2, 2)
	require.ErrorIs(t, err, ErrInvalidPayload)
}
