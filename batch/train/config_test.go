package train

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/gpu"
	"github.com/rollout/rollout/internal/limits"
)

func TestParseConfig(t *testing.T) {
	c := mustConfig(t, validConfig)
	require.Equal(t, "digits-test", c.Name)
	require.Equal(t, []int{64, 32, 10}, c.Model.Sizes)
	require.Equal(t, gpu.ActReLU, c.Model.Act)
	require.Equal(t, "digits", c.DataSet)
	require.Equal(t, filepath.Join("cfg", ".data"), c.DataDir)
	require.Equal(t, 3, c.Shards)
	require.Equal(t, 64, c.BatchSize)
	require.Equal(t, 5, c.Steps)
	require.Equal(t, float32(0.5), c.LearningRate)
	require.Equal(t, uint64(7), c.Seed)
	require.Equal(t, 2, c.CheckpointInterval)
	require.Equal(t, 21, c.NumItems())
}

func TestParseConfigDefaultsAndLayers(t *testing.T) {
	c := mustConfig(t, `
[model]
layers = [64, 20, 16, 10]
[data]
set = "digits"
dir = "/abs/data"
[train]
batch_size = 10
steps = 3
learning_rate = 1
`)
	require.Equal(t, []int{64, 20, 16, 10}, c.Model.Sizes)
	require.Equal(t, gpu.ActReLU, c.Model.Act)
	require.Equal(t, "/abs/data", c.DataDir)
	require.Equal(t, DefaultShards, c.Shards)
	require.Equal(t, uint64(DefaultSeed), c.Seed)
	require.Equal(t, 3, c.CheckpointInterval, "min(10, steps)")
	require.Equal(t, float32(1), c.LearningRate)
	require.True(t, strings.HasPrefix(c.Name, "train-"), c.Name)
	// The default name is a function of what decides the items.
	c2 := mustConfig(t, "[model]\nlayers = [64, 20, 16, 10]\n[data]\nset = \"digits\"\n[train]\nbatch_size = 10\nsteps = 3\nlearning_rate = 1.0\n")
	require.Equal(t, c.Name, c2.Name)
	c3 := mustConfig(t, "[model]\nlayers = [64, 20, 16, 10]\n[data]\nset = \"digits\"\n[train]\nbatch_size = 10\nsteps = 3\nlearning_rate = 1\nseed = 2\n")
	require.NotEqual(t, c.Name, c3.Name)
}

// configErrors returns the *ConfigErrors of err.
func configErrors(t *testing.T, err error) []*ConfigError {
	t.Helper()
	require.ErrorIs(t, err, ErrInvalidConfig)
	var out []*ConfigError
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		var ce *ConfigError
		require.True(t, errors.As(e, &ce), "%T %v", e, e)
		out = append(out, ce)
	}
	walk(err)
	return out
}

func TestParseConfigErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		text string
		key  string
		line int
		want string
	}{
		"unknown key":   {strings.Replace(validConfig, "steps = 5", "steps = 5\nepochs = 3", 1), "train.epochs", 14, "unknown key"},
		"unknown table": {validConfig + "[optimizer]\nkind = \"adam\"\n", "optimizer", 17, "unknown table"},
		"case":          {strings.Replace(validConfig, "seed = 7", "Seed = 7", 1), "train.Seed", 15, `did you mean "train.seed"`},
		"type":          {strings.Replace(validConfig, "steps = 5", `steps = "5"`, 1), "train.steps", 13, "must be an integer"},
		"steps range":   {strings.Replace(validConfig, "steps = 5", "steps = 0", 1), "train.steps", 13, "0 is not in [1, 100000]"},
		"shards range":  {strings.Replace(validConfig, "shards = 3", "shards = 65", 1), "train.shards", 11, "65 is not in [1, 64]"},
		"batch range":   {strings.Replace(validConfig, "batch_size = 64", "batch_size = 2", 1), "train.batch_size", 12, "2 is not in [3, 1438]"},
		"batch big":     {strings.Replace(validConfig, "batch_size = 64", "batch_size = 1439", 1), "train.batch_size", 12, "not in [3, 1438]"},
		"lr zero":       {strings.Replace(validConfig, "learning_rate = 0.5", "learning_rate = 0", 1), "train.learning_rate", 14, "is not in (0, 100]"},
		"lr nan":        {strings.Replace(validConfig, "learning_rate = 0.5", "learning_rate = nan", 1), "train.learning_rate", 14, "NaN is not in (0, 100]"},
		"lr tiny":       {strings.Replace(validConfig, "learning_rate = 0.5", "learning_rate = 1e-300", 1), "train.learning_rate", 14, "is not in (0, 100]"},
		"seed":          {strings.Replace(validConfig, "seed = 7", "seed = -1", 1), "train.seed", 15, "-1 is not in [0, "},
		"interval":      {strings.Replace(validConfig, "checkpoint_interval = 2", "checkpoint_interval = 6", 1), "train.checkpoint_interval", 16, "6 is not in [1, 5]"},
		"activation":    {strings.Replace(validConfig, `"relu"`, `"sigmoid"`, 1), "model.activation", 5, `"sigmoid" is not relu or tanh`},
		"hidden zero":   {strings.Replace(validConfig, "hidden = [32]", "hidden = [32, 0]", 1), "model.hidden", 4, "size 1 is 0"},
		"layers shape":  {strings.Replace(validConfig, "hidden = [32]", "layers = [63, 32, 10]", 1), "model.layers", 4, "must start with the \"digits\" set's 64 features and end with its 10 classes"},
		"both":          {strings.Replace(validConfig, "hidden = [32]", "hidden = [32]\nlayers = [64, 10]", 1), "model.hidden", 4, "not both"},
		"no model":      {strings.Replace(validConfig, "hidden = [32]", "", 1), "model.layers or hidden", 3, "[model] has no layers or hidden"},
		"set":           {strings.Replace(validConfig, `set = "digits"`, `set = "mnist"`, 1), "data.set", 8, `"mnist" is not a known data set`},
		"no set":        {strings.Replace(validConfig, `set = "digits"`, ``, 1), "data.set", 7, "[data] has no set"},
		"no steps":      {strings.Replace(validConfig, `steps = 5`, ``, 1), "train.steps", 10, "[train] has no steps"},
		"name":          {strings.Replace(validConfig, `"digits-test"`, `" x"`, 1), "name", 1, "leading or trailing spaces"},
		"syntax":        {"[model\n", "", 1, "TOML syntax"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.text), "train.toml")
			require.Nil(t, c)
			errs := configErrors(t, err)
			require.NotEmpty(t, errs)
			e := errs[0]
			require.Equal(t, tc.key, e.Key, "%v", err)
			require.Equal(t, tc.line, e.Line, "%v", err)
			require.Contains(t, e.Error(), tc.want)
			require.True(t, strings.HasPrefix(err.Error(), "train.toml:"), err.Error())
		})
	}
}

func TestParseConfigReportsEveryProblem(t *testing.T) {
	_, err := ParseConfig([]byte("[model]\nhidden = [0]\nactivation = \"x\"\n[data]\nset = \"digits\"\n[train]\nsteps = 0\nbatch_size = 5\nlearning_rate = -1\n"), "t.toml")
	keys := map[string]bool{}
	for _, e := range configErrors(t, err) {
		keys[e.Key] = true
	}
	require.Equal(t, map[string]bool{"model.hidden": true, "model.activation": true, "train.steps": true, "train.learning_rate": true}, keys)
}

// TestParseConfigRefusesResultsOverTheLimit: a model whose weights do not
// fit in one result is refused at parse time with the numbers.
func TestParseConfigRefusesResultsOverTheLimit(t *testing.T) {
	// 64·4096 + 4096 + 4096·10 + 10 = 307,210 parameters: 1,638,456 bytes.
	text := strings.Replace(validConfig, "hidden = [32]", "hidden = [4096]", 1)
	_, err := ParseConfig([]byte(text), "big.toml")
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "307210 parameters")
	require.ErrorContains(t, err, "1639480 bytes")
	require.ErrorContains(t, err, "1048576")

	// Just under: fits a result, but 4 shards + 1 weights results of ~1 MiB
	// do not fit in one claim.
	c := mustConfig(t, strings.Replace(validConfig, "hidden = [32]", "hidden = [2400]", 1))
	require.LessOrEqual(t, c.MaxResultBytes(), limits.Default().MaxResultBytes)
	text = strings.Replace(strings.Replace(validConfig, "hidden = [32]", "hidden = [2400]", 1), "shards = 3", "shards = 8", 1)
	_, err = ParseConfig([]byte(text), "wide.toml")
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "reduce item carries its payload and 9 dependency results")

	// A cluster with smaller limits refuses what the defaults take.
	c = mustConfig(t, validConfig)
	l := limits.Default()
	l.MaxResultBytes = 4096
	require.ErrorIs(t, c.CheckLimits(l), ErrTooLarge)
	l = limits.Default()
	l.MaxPayloadBytes = 8192
	require.ErrorContains(t, c.CheckLimits(l), "held-out samples")
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "train.toml")
	require.NoError(t, os.WriteFile(p, []byte(validConfig), 0o644))
	c, err := LoadConfig(p)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, ".data"), c.DataDir)
	_, err = LoadConfig(filepath.Join(dir, "none.toml"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
