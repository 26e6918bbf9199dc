package train

import (
	"bytes"
	"encoding/hex"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/api/validate"
	"github.com/rollout/rollout/gpu/mlp"
)

func TestPlanItems(t *testing.T) {
	c := mustConfig(t, validConfig) // 3 shards, batch 64, 5 steps, checkpoint every 2
	p, err := NewPlan(c, fakeDigits())
	require.NoError(t, err)
	require.Equal(t, 21, p.Len())
	limits := validate.DefaultLimits()

	ids := map[string]bool{}
	var items []Item
	for i := range p.Len() {
		it, err := p.Item(i)
		require.NoError(t, err)
		require.Equal(t, uint64(i), it.Index)
		require.Len(t, it.ID, limits.IDBytes)
		require.False(t, ids[string(it.ID)], "duplicate id at %d", i)
		ids[string(it.ID)] = true
		require.NoError(t, limits.Payload(it.Payload))
		require.LessOrEqual(t, len(it.Payload), c.MaxPayloadBytes())
		// Dependencies come earlier in the plan.
		for _, d := range it.DependsOn {
			require.True(t, ids[string(d)], "item %d depends on a later item", i)
		}
		items = append(items, it)
	}
	_, err = p.Item(21)
	require.Error(t, err)
	_, err = p.Item(-1)
	require.Error(t, err)

	init := items[0]
	require.Equal(t, RoleInit, init.Role)
	require.Equal(t, InitID(c.Name), init.ID)
	require.Empty(t, init.DependsOn)
	pl, err := DecodePayload(init.Payload)
	require.NoError(t, err)
	require.Equal(t, uint64(7), pl.Init.Seed)
	require.Equal(t, []int{64, 32, 10}, pl.Init.Model.Layers)

	for step := 1; step <= 5; step++ {
		base := 1 + (step-1)*4
		prev := WeightsID(c.Name, step-1)
		total := 0
		for s := range 3 {
			it := items[base+s]
			require.Equal(t, RoleShard, it.Role)
			require.Equal(t, ShardID(c.Name, step, s), it.ID)
			require.Equal(t, [][]byte{prev}, it.DependsOn)
			pl, err := DecodePayload(it.Payload)
			require.NoError(t, err)
			require.Equal(t, step, pl.Shard.Step)
			require.Equal(t, s, pl.Shard.Shard)
			x, y, err := pl.Shard.Samples.Decode(64, 10)
			require.NoError(t, err)
			require.Len(t, x, 64*len(y))
			require.Contains(t, []int{21, 22}, len(y))
			total += len(y)
		}
		require.Equal(t, 64, total)
		r := items[base+3]
		require.Equal(t, RoleReduce, r.Role)
		require.Equal(t, ReduceID(c.Name, step), r.ID)
		require.Equal(t, [][]byte{prev, ShardID(c.Name, step, 0), ShardID(c.Name, step, 1), ShardID(c.Name, step, 2)}, r.DependsOn)
		pl, err := DecodePayload(r.Payload)
		require.NoError(t, err)
		require.Equal(t, 3, pl.Reduce.Shards)
		require.Equal(t, 64, pl.Reduce.BatchSize)
		require.Equal(t, float32(0.5), pl.Reduce.LearningRate)
		if step == 2 || step == 4 || step == 5 {
			require.NotNil(t, pl.Reduce.Eval, "step %d is a checkpoint", step)
			_, y, err := pl.Reduce.Eval.Decode(64, 10)
			require.NoError(t, err)
			require.Len(t, y, 359)
		} else {
			require.Nil(t, pl.Reduce.Eval, "step %d", step)
		}
	}

	// Ids depend on the run name and role only; another name, other ids.
	require.NotEqual(t, InitID("a"), InitID("b"))
	require.Equal(t, "init", string(RoleInit))
	require.NotEqual(t, hex.EncodeToString(ShardID("a", 1, 0)), hex.EncodeToString(ShardID("a", 0, 1)))
}

// TestPlanDeterministicAndEpochs: two plans of one config are byte-equal;
// every epoch visits every training sample exactly once; the seed changes
// the order.
func TestPlanDeterministicAndEpochs(t *testing.T) {
	text := "name = \"e\"\n[model]\nhidden = [8]\n[data]\nset = \"digits\"\n[train]\nshards = 4\nbatch_size = 100\nsteps = 29\nlearning_rate = 0.1\n"
	c := mustConfig(t, text)
	d := fakeDigits()
	p1, err := NewPlan(c, d)
	require.NoError(t, err)
	p2, err := NewPlan(c, d)
	require.NoError(t, err)
	for i := p1.Len() - 1; i >= 0; i-- { // out of order: no hidden state
		a, err := p1.Item(i)
		require.NoError(t, err)
		b, err := p2.Item(i)
		require.NoError(t, err)
		require.True(t, bytes.Equal(a.Payload, b.Payload), "item %d", i)
	}
	// 29 steps of 100 = 2900 positions: epochs 0 and 1 (1438 each) whole.
	seen := map[int]int{}
	for step := 1; step <= 29; step++ {
		for s := range 4 {
			idx, err := p1.ShardSamples(step, s)
			require.NoError(t, err)
			for _, i := range idx {
				seen[i]++
			}
		}
	}
	require.Len(t, seen, 1438)
	for i, n := range seen {
		require.GreaterOrEqual(t, n, 2, "sample %d", i)
		require.LessOrEqual(t, n, 3, "sample %d", i)
	}
	first, err := p1.ShardSamples(1, 0)
	require.NoError(t, err)
	for _, bad := range [][2]int{{0, 0}, {30, 0}, {1, -1}, {1, 4}} {
		_, err := p1.ShardSamples(bad[0], bad[1])
		require.Error(t, err, "%v", bad)
	}
	c.Seed = 99
	p3, err := NewPlan(c, d)
	require.NoError(t, err)
	other, err := p3.ShardSamples(1, 0)
	require.NoError(t, err)
	require.NotEqual(t, first, other)

	_, err = NewPlan(c, &Digits{Train: d.HeldOut, HeldOut: d.Train})
	require.ErrorIs(t, err, ErrNoData)
}

// TestResultSizeBound: the largest results of a config are within
// MaxResultBytes, and the bound is near (the overhead is not wasteful).
func TestResultSizeBound(t *testing.T) {
	c := mustConfig(t, validConfig)
	w, err := c.Model.Init(1)
	require.NoError(t, err)
	for i := range w {
		w[i] = -1.2345678e-30 // long decimal forms do not matter: base64
	}
	m := &Metrics{Loss: 1.2345678901234567e+300, Accuracy: 0.12345678901234567, Count: 1 << 40}
	wr := &WeightsResult{Role: RoleReduce, Step: MaxSteps, Weights: mlp.Encode(w), Blake3: mlp.Hash(w), Train: m, Eval: m}
	b, err := wr.Encode()
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), c.MaxResultBytes())
	require.Greater(t, len(b), c.MaxResultBytes()-ResultOverheadBytes)
	sr := &ShardResult{Step: MaxSteps, Shard: MaxShards - 1, WeightsBlake3: mlp.Hash(w), Grad: mlp.Encode(w),
		LossSum: -1.2345678901234567e+300, Correct: 1 << 40, Count: 1 << 40}
	b, err = sr.Encode()
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), c.MaxResultBytes())
}

// TestNewPlanRefusesBadInput: hand-built configs and data sets out of
// range are errors, never a panic.
func TestNewPlanRefusesBadInput(t *testing.T) {
	good := mustConfig(t, validConfig)
	for name, mut := range map[string]func(c *Config){
		"no layers": func(c *Config) { c.Model.Sizes = nil },
		"shape":     func(c *Config) { c.Model.Sizes = []int{64, 3} },
		"shards":    func(c *Config) { c.Shards = 0 },
		"batch":     func(c *Config) { c.BatchSize = 2 },
		"steps":     func(c *Config) { c.Steps = 0 },
		"lr":        func(c *Config) { c.LearningRate = float32(math.NaN()) },
		"interval":  func(c *Config) { c.CheckpointInterval = 0 },
		"set":       func(c *Config) { c.DataSet = "mnist" },
		"name":      func(c *Config) { c.Name = "" },
		"seed":      func(c *Config) { c.Seed = math.MaxUint64 },
	} {
		t.Run(name, func(t *testing.T) {
			c := *good
			c.Model.Sizes = append([]int(nil), good.Model.Sizes...)
			mut(&c)
			_, err := NewPlan(&c, fakeDigits())
			require.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
	_, err := NewPlan(nil, fakeDigits())
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewPlan(good, nil)
	require.ErrorIs(t, err, ErrNoData)
	d := fakeDigits()
	d.Train.X = d.Train.X[:10]
	_, err = NewPlan(good, d)
	require.ErrorIs(t, err, ErrNoData)
	d = fakeDigits()
	d.HeldOut.Y[3] = 10
	_, err = NewPlan(good, d)
	require.ErrorIs(t, err, ErrNoData)
}
