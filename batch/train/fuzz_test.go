package train

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/gpu/mlp"
	"github.com/rollout/rollout/internal/limits"
)

// FuzzParseConfig: ParseConfig never panics; every error matches
// ErrInvalidConfig and is made of *ConfigErrors naming the file; a config
// that parses is within every range and within the ledger's limits, and
// its plan's items decode.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		validConfig, "", "[model", "name = ", "= 1",
		"[model]\nlayers = [64, 10]\n[data]\nset = \"digits\"\n[train]\nbatch_size = 1\nsteps = 1\nlearning_rate = 1\n",
		"[model]\nhidden = []\nactivation = \"tanh\"\n[data]\nset = \"digits\"\ndir = \"d\"\n[train]\nshards = 64\nbatch_size = 1438\nsteps = 100000\nlearning_rate = 100\nseed = 9223372036854775807\ncheckpoint_interval = 100000\n",
		"[model]\nhidden = [65536, 65536]\n[data]\nset = \"digits\"\n[train]\nbatch_size = 1\nsteps = 1\nlearning_rate = 1e-45\n",
		"Model.hidden = [1]\nDATA = {set = 'digits'}\ntrain.Steps = 1\n",
		"[model]\nhidden = [1.5]\n[data]\nset = 1\n[train]\nsteps = inf\n",
		"[[train]]\nsteps = 1\n", "model = 3\n", "[train.deep]\nx = 1\n", "name = \"\xff\"\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data, "f.toml")
		if err != nil {
			require.Nil(t, c)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.True(t, strings.HasPrefix(err.Error(), "f.toml"), err.Error())
			return
		}
		require.NoError(t, c.Model.Validate())
		require.NoError(t, c.CheckLimits(limits.Default()))
		require.True(t, c.Shards >= 1 && c.Shards <= MaxShards)
		require.True(t, c.BatchSize >= c.Shards && c.BatchSize <= 1438)
		require.True(t, c.Steps >= 1 && c.Steps <= MaxSteps)
		require.True(t, c.LearningRate > 0 && c.LearningRate <= MaxLearningRate)
		require.True(t, c.CheckpointInterval >= 1 && c.CheckpointInterval <= c.Steps)
		require.NoError(t, batch.CheckConfigText(c.Name, maxRunNameBytes))
		p, err := NewPlan(c, fakeDigits())
		require.NoError(t, err)
		for _, i := range []int{0, 1, p.Len() - 1} {
			it, err := p.Item(i)
			require.NoError(t, err)
			_, err = DecodePayload(it.Payload)
			require.NoError(t, err)
			require.LessOrEqual(t, len(it.Payload), c.MaxPayloadBytes())
		}
	})
}

// FuzzDecodeResult: DecodeResult never panics; an error matches
// ErrInvalidResult; a decoded result re-encodes to a result that decodes
// to the same thing.
func FuzzDecodeResult(f *testing.F) {
	w := []float32{1, -2, 0.5}
	for _, r := range []any{
		&WeightsResult{Role: RoleInit, Weights: mlp.Encode(w), Blake3: mlp.Hash(w)},
		&WeightsResult{Role: RoleReduce, Step: 4, Weights: mlp.Encode(w), Blake3: mlp.Hash(w),
			Train: &Metrics{Loss: 0.3, Accuracy: 0.5, Count: 8}, Eval: &Metrics{Loss: 0.2, Accuracy: 1, Count: 359}},
		&ShardResult{Step: 1, Shard: 2, WeightsBlake3: mlp.Hash(w), Grad: mlp.Encode(w), LossSum: 1.5, Correct: 1, Count: 2},
	} {
		var b []byte
		var err error
		switch r := r.(type) {
		case *WeightsResult:
			b, err = r.Encode()
		case *ShardResult:
			b, err = r.Encode()
		}
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte(`{"v":1,"role":"reduce"}`))
	f.Add([]byte(`{"v":1,"role":"shard","grad":"!!"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeResult(b)
		if err != nil {
			require.True(t, errors.Is(err, ErrInvalidResult), "%v", err)
			return
		}
		var again []byte
		switch r.Role {
		case RoleInit, RoleReduce:
			again, err = r.Weights.Encode()
		case RoleShard:
			again, err = r.Shard.Encode()
		}
		require.NoError(t, err)
		r2, err := DecodeResult(again)
		require.NoError(t, err)
		require.Equal(t, r, r2)
	})
}

// FuzzStepsFromResults: never panics; steps are strictly increasing.
func FuzzStepsFromResults(f *testing.F) {
	w := []float32{3}
	b, err := (&WeightsResult{Role: RoleReduce, Step: 2, Weights: mlp.Encode(w), Blake3: mlp.Hash(w),
		Train: &Metrics{Loss: 0.3, Accuracy: 0.5, Count: 8}}).Encode()
	require.NoError(f, err)
	f.Add(b, []byte{}, b)
	f.Add([]byte(`{"v":1}`), b, []byte(`{"v":1,"role":"init"}`))
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		steps, err := StepsFromResults([][]byte{a, b, c})
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidResult)
			return
		}
		for i := 1; i < len(steps); i++ {
			require.Less(t, steps[i-1].Step, steps[i].Step)
		}
	})
}

// FuzzDecodePayload: never panics; an error matches ErrInvalidPayload; a
// decoded payload's model is valid and its samples decode or fail cleanly.
func FuzzDecodePayload(f *testing.F) {
	c, err := ParseConfig([]byte(validConfig), "f.toml")
	require.NoError(f, err)
	p, err := NewPlan(c, fakeDigits())
	require.NoError(f, err)
	for _, i := range []int{0, 1, 4, 8} {
		it, err := p.Item(i)
		require.NoError(f, err)
		f.Add(it.Payload)
	}
	f.Add([]byte(`{"v":1,"role":"shard","model":{"layers":[2,2],"activation":"tanh"},"step":1,"shard":0,"samples":{"x":"AACAPwAAgD8=","y":"AQ=="}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		pl, err := DecodePayload(b)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidPayload)
			return
		}
		var m ModelSpec
		var samples []*Samples
		switch pl.Role {
		case RoleInit:
			m = pl.Init.Model
		case RoleShard:
			m, samples = pl.Shard.Model, []*Samples{&pl.Shard.Samples}
		case RoleReduce:
			m, samples = pl.Reduce.Model, []*Samples{pl.Reduce.Eval}
		default:
			t.Fatalf("role %q decoded", pl.Role)
		}
		mc, err := m.Config()
		require.NoError(t, err)
		for _, s := range samples {
			if s == nil {
				continue
			}
			x, y, err := s.Decode(mc.Inputs(), mc.Classes())
			if err != nil {
				require.ErrorIs(t, err, ErrInvalidPayload)
				continue
			}
			require.Len(t, x, len(y)*mc.Inputs())
		}
	})
}
