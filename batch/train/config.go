package train

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"lukechampine.com/blake3"

	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/gpu/mlp"
	"github.com/rollout/rollout/internal/limits"
)

// Limits and defaults of a training config.
const (
	// MaxShards bounds [train] shards (shards per step).
	MaxShards = 64
	// MaxSteps bounds [train] steps.
	MaxSteps = 100000
	// MaxLearningRate bounds [train] learning_rate.
	MaxLearningRate = 100
	// MaxSeed bounds [train] seed (TOML integers are signed 64-bit).
	MaxSeed = math.MaxInt64
	// DefaultActivation, DefaultShards, DefaultCheckpointInterval and
	// DefaultSeed are used when the keys are absent.
	DefaultActivation         = "relu"
	DefaultShards             = 1
	DefaultCheckpointInterval = 10
	DefaultSeed               = 1
	// maxConfigBytes bounds the config file.
	maxConfigBytes = 1 << 20
	// maxRunNameBytes is the ledger's run name limit.
	maxRunNameBytes = limits.MaxRunNameBytes
)

// Config is a training run described by a TOML file:
//
//	name = "digits-mlp"            # optional; default DefaultRunName
//
//	[model]
//	hidden = [32]                  # hidden layer sizes; or instead
//	# layers = [64, 32, 10]        # every layer: input, hidden…, classes
//	activation = "relu"            # relu | tanh; default relu
//
//	[data]
//	set = "digits"                 # required; the only set
//	dir = "../.data"               # optional; default ".data", relative to
//	                               # this file's directory (`make data`)
//
//	[train]
//	shards = 4                     # shard items per step, [1, 64]; default 1
//	batch_size = 64                # samples per step (over all shards),
//	                               # [shards, 1438]
//	steps = 100                    # [1, 100000]
//	learning_rate = 0.5            # (0, 100]
//	seed = 1                       # [0, 2^63-1]; default 1
//	checkpoint_interval = 10       # [1, steps]; default min(10, steps)
//
// Keys are case-sensitive. Unknown keys and tables, wrong types and
// out-of-range values are *ConfigErrors naming the file, line and key. A
// config whose largest item result (or payload, or a reduce item's claim
// with its dependencies) would exceed the ledger's limits is refused with
// the numbers (see CheckLimits).
type Config struct {
	// Name is the run name: the "name" key, else DefaultRunName.
	Name string
	// Model is the network: [model] layers, or the data set's input width,
	// [model] hidden and its class count; and the activation.
	Model mlp.Config
	// DataSet is [data] set; DataDir is [data] dir resolved against BaseDir.
	DataSet string
	DataDir string
	// Shards, BatchSize, Steps, LearningRate, Seed and CheckpointInterval
	// are the [train] keys.
	Shards             int
	BatchSize          int
	Steps              int
	LearningRate       float32
	Seed               uint64
	CheckpointInterval int
	// Path is the config file as given; BaseDir is its directory.
	Path, BaseDir string
}

// dataShape is what a data set fixes about a run.
type dataShape struct{ features, classes, train, heldOut int }

// dataSets are the known data sets.
var dataSets = map[string]dataShape{
	"digits": {DigitsFeatures, DigitsClasses, DigitsSamples - DigitsSamples/HeldOutEvery, DigitsSamples / HeldOutEvery},
}

// ConfigError is one problem with a training config: a batch.ConfigError
// ("file:line: key: reason") whose Kind is ErrInvalidConfig, so it
// matches ErrInvalidConfig.
type ConfigError = batch.ConfigError

// ErrInvalidConfig is matched by every error of ParseConfig and LoadConfig
// about the file's content.
var ErrInvalidConfig = errors.New("train: invalid training config")

// LoadConfig reads and parses the training config at path.
func LoadConfig(path string) (*Config, error) { return LoadConfigFor(path, false) }

// LoadConfigFor is LoadConfig for a run with an object store when store
// is true (see ParseConfigFor).
func LoadConfigFor(path string, store bool) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("train: config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("train: reading config %s: %w", path, err)
	}
	if len(data) > maxConfigBytes {
		return nil, &ConfigError{Kind: ErrInvalidConfig, File: path, Reason: fmt.Sprintf("file is larger than %d bytes", maxConfigBytes)}
	}
	return ParseConfigFor(data, path, store)
}

// tomlConfig is the file's shape; pointers tell given from absent.
type tomlConfig struct {
	Name  *string `toml:"name"`
	Model *struct {
		Layers     *[]int64 `toml:"layers"`
		Hidden     *[]int64 `toml:"hidden"`
		Activation *string  `toml:"activation"`
	} `toml:"model"`
	Data *struct {
		Set *string `toml:"set"`
		Dir *string `toml:"dir"`
	} `toml:"data"`
	Train *tomlTrain `toml:"train"`
}

type tomlTrain struct {
	Shards             *int64   `toml:"shards"`
	BatchSize          *int64   `toml:"batch_size"`
	Steps              *int64   `toml:"steps"`
	LearningRate       *float64 `toml:"learning_rate"`
	Seed               *int64   `toml:"seed"`
	CheckpointInterval *int64   `toml:"checkpoint_interval"`
}

// keyTypes names the TOML type of every known key and table.
var keyTypes = map[string]string{
	"name": "a string", "model": "a table", "data": "a table", "train": "a table",
	"model.layers": "an array of integers", "model.hidden": "an array of integers", "model.activation": "a string",
	"data.set": "a string", "data.dir": "a string",
	"train.shards": "an integer", "train.batch_size": "an integer", "train.steps": "an integer",
	"train.learning_rate": "a number", "train.seed": "an integer", "train.checkpoint_interval": "an integer",
}

const (
	unknownKeyReason   = "unknown key (the keys are name, [model] layers hidden activation, [data] set dir, [train] shards batch_size steps learning_rate seed checkpoint_interval)"
	unknownTableReason = "unknown table or key (the tables are [model], [data], [train]; the top-level key is name)"
)

// ParseConfig parses a training config; path names it in errors and
// anchors [data] dir. Every problem found is reported (errors.Join of
// *ConfigError, each matching ErrInvalidConfig); nothing is partially
// returned. The result limits checked are those of limits.Default (see
// CheckLimits for a cluster's own).
func ParseConfig(data []byte, path string) (*Config, error) {
	return ParseConfigFor(data, path, false)
}

// ParseConfigFor is ParseConfig for a run with an object store when store
// is true: results and dependencies then travel by reference, so the
// per-result and per-claim limits do not bound the model (see
// CheckLimitsFor); a model of up to mlp.MaxParams parameters is accepted.
func ParseConfigFor(data []byte, path string, store bool) (*Config, error) {
	var tc tomlConfig
	lines, err := schema().Decode(data, path, &tc)
	if err != nil {
		return nil, err
	}
	problems := schema().Problems(path, lines)
	bad, missing := problems.Bad, problems.Missing

	cfg := &Config{Path: path, BaseDir: filepath.Dir(path), Shards: DefaultShards, Seed: DefaultSeed}

	// [data] first: the set fixes the model's input and output widths.
	var shape dataShape
	haveSet := false
	dataDir := DefaultDataDir
	if tc.Data == nil || tc.Data.Set == nil {
		missing("data", "set")
	} else if s, ok := dataSets[*tc.Data.Set]; !ok {
		bad("data.set", "%q is not a known data set (the sets are: digits)", *tc.Data.Set)
	} else {
		cfg.DataSet, shape, haveSet = *tc.Data.Set, s, true
	}
	if tc.Data != nil && tc.Data.Dir != nil {
		if err := batch.CheckConfigText(*tc.Data.Dir, 4096); err != nil {
			bad("data.dir", "%s", err)
		}
		dataDir = *tc.Data.Dir
	}
	cfg.DataDir = dataDir
	if !filepath.IsAbs(dataDir) {
		cfg.DataDir = filepath.Join(cfg.BaseDir, dataDir)
	}

	// [model]
	act := DefaultActivation
	var sizes []int
	sizesOK := false
	switch m := tc.Model; {
	case m == nil || (m.Layers == nil && m.Hidden == nil):
		missing("model", "layers or hidden")
	case m.Layers != nil && m.Hidden != nil:
		bad("model.hidden", "give [model] layers or hidden, not both")
	case m.Layers != nil:
		sizes, sizesOK = checkSizes(*m.Layers, "model.layers", bad)
		if sizesOK && len(sizes) < 2 {
			bad("model.layers", "has %d sizes, want at least 2 (input and classes)", len(sizes))
			sizesOK = false
		}
		if sizesOK && haveSet && (sizes[0] != shape.features || sizes[len(sizes)-1] != shape.classes) {
			bad("model.layers", "%v must start with the %q set's %d features and end with its %d classes", sizes, cfg.DataSet, shape.features, shape.classes)
			sizesOK = false
		}
	default:
		var hidden []int
		if hidden, sizesOK = checkSizes(*m.Hidden, "model.hidden", bad); sizesOK && haveSet {
			sizes = append(append([]int{shape.features}, hidden...), shape.classes)
		}
	}
	if m := tc.Model; m != nil && m.Activation != nil {
		act = *m.Activation
	}
	a, err := mlp.ParseActivation(act)
	if err != nil {
		bad("model.activation", "%q is not relu or tanh", act)
	}
	cfg.Model = mlp.Config{Sizes: sizes, Act: a}
	if sizesOK && haveSet && err == nil {
		if err := cfg.Model.Validate(); err != nil {
			key := "model.hidden"
			if tc.Model.Layers != nil {
				key = "model.layers"
			}
			bad(key, "%s", strings.TrimPrefix(err.Error(), mlp.ErrConfig.Error()+": "))
		}
	}

	// [train]
	t := tc.Train
	if t == nil {
		t = &tomlTrain{}
	}
	intIn := func(key string, v *int64, lo, hi int64, dst *int) bool {
		if *v < lo || *v > hi {
			bad(key, "%d is not in [%d, %d]", *v, lo, hi)
			return false
		}
		*dst = int(*v)
		return true
	}
	shardsOK := true
	if t.Shards != nil {
		shardsOK = intIn("train.shards", t.Shards, 1, MaxShards, &cfg.Shards)
	}
	if t.BatchSize == nil {
		missing("train", "batch_size")
	} else if haveSet && shardsOK {
		intIn("train.batch_size", t.BatchSize, int64(cfg.Shards), int64(shape.train), &cfg.BatchSize)
	}
	stepsOK := false
	if t.Steps == nil {
		missing("train", "steps")
	} else {
		stepsOK = intIn("train.steps", t.Steps, 1, MaxSteps, &cfg.Steps)
	}
	if t.LearningRate == nil {
		missing("train", "learning_rate")
	} else if lr := *t.LearningRate; !(lr > 0 && lr <= MaxLearningRate) || float32(lr) == 0 {
		bad("train.learning_rate", "%v is not in (0, %d]", lr, MaxLearningRate)
	} else {
		cfg.LearningRate = float32(lr)
	}
	if t.Seed != nil {
		var seed int
		if intIn("train.seed", t.Seed, 0, MaxSeed, &seed) {
			cfg.Seed = uint64(*t.Seed)
		}
	}
	if stepsOK {
		cfg.CheckpointInterval = min(DefaultCheckpointInterval, cfg.Steps)
		if t.CheckpointInterval != nil {
			intIn("train.checkpoint_interval", t.CheckpointInterval, 1, int64(cfg.Steps), &cfg.CheckpointInterval)
		}
	}

	if tc.Name != nil {
		cfg.Name = *tc.Name
		if err := batch.CheckConfigText(cfg.Name, maxRunNameBytes); err != nil {
			bad("name", "run name %s", err)
		}
	}
	if err := problems.Err(); err != nil {
		return nil, err
	}
	if err := cfg.CheckLimitsFor(limits.Default(), store); err != nil {
		return nil, &ConfigError{Kind: ErrInvalidConfig, File: path, Reason: strings.TrimPrefix(err.Error(), ErrTooLarge.Error()+": ")}
	}
	if cfg.Name == "" {
		cfg.Name = DefaultRunName(cfg)
	}
	return cfg, nil
}

// Validate checks every field of c against the ranges ParseConfig
// enforces (errors wrap ErrInvalidConfig): a Config built by hand, not
// parsed, is checked by NewPlan with it. It does not check the ledger's
// limits (CheckLimits).
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	shape, ok := dataSets[c.DataSet]
	if !ok {
		return bad("data set %q is unknown", c.DataSet)
	}
	if err := c.Model.Validate(); err != nil {
		return bad("%v", err)
	}
	switch {
	case c.Model.Inputs() != shape.features || c.Model.Classes() != shape.classes:
		return bad("model %v does not fit the %q set's %d features and %d classes", c.Model.Sizes, c.DataSet, shape.features, shape.classes)
	case c.Shards < 1 || c.Shards > MaxShards:
		return bad("shards %d is not in [1, %d]", c.Shards, MaxShards)
	case c.BatchSize < c.Shards || c.BatchSize > shape.train:
		return bad("batch_size %d is not in [%d, %d]", c.BatchSize, c.Shards, shape.train)
	case c.Steps < 1 || c.Steps > MaxSteps:
		return bad("steps %d is not in [1, %d]", c.Steps, MaxSteps)
	case !(c.LearningRate > 0 && c.LearningRate <= MaxLearningRate):
		return bad("learning_rate %v is not in (0, %d]", c.LearningRate, MaxLearningRate)
	case c.Seed > MaxSeed:
		return bad("seed %d is not in [0, %d]", c.Seed, uint64(MaxSeed))
	case c.CheckpointInterval < 1 || c.CheckpointInterval > c.Steps:
		return bad("checkpoint_interval %d is not in [1, %d]", c.CheckpointInterval, c.Steps)
	}
	if err := batch.CheckConfigText(c.Name, maxRunNameBytes); err != nil {
		return bad("run name %s", err)
	}
	return nil
}

// checkSizes checks an array of layer sizes.
func checkSizes(v []int64, key string, bad func(key, format string, args ...any)) ([]int, bool) {
	if len(v) > mlp.MaxLayers {
		bad(key, "has %d sizes, the limit is %d", len(v), mlp.MaxLayers)
		return nil, false
	}
	out := make([]int, len(v))
	for i, s := range v {
		if s < 1 || s > mlp.MaxWidth {
			bad(key, "size %d is %d, not in [1, %d]", i, s, mlp.MaxWidth)
			return nil, false
		}
		out[i] = int(s)
	}
	return out, true
}

// DefaultRunName derives a run name from a config: "train-" and 8 hex
// digits of the blake3 hash of everything that decides the run's items
// (model, data set, shards, batch size, steps, learning rate, seed,
// checkpoint interval). The same config gives the same name, so submitting
// it again resumes the run; changing any of these starts a new one.
func DefaultRunName(c *Config) string {
	h := blake3.New(32, nil)
	fmt.Fprintf(h, "rollout-train/v1\x00%v\x00%s\x00%s\x00%d\x00%d\x00%d\x00%s\x00%d\x00%d",
		c.Model.Sizes, mlp.ActivationName(c.Model.Act), c.DataSet, c.Shards, c.BatchSize, c.Steps,
		strconv.FormatFloat(float64(c.LearningRate), 'g', -1, 32), c.Seed, c.CheckpointInterval)
	return "train-" + hex.EncodeToString(h.Sum(nil)[:4])
}

// schema is the training config's keys, for the checks of
// batch.TOMLSchema; its errors match ErrInvalidConfig.
func schema() batch.TOMLSchema {
	return batch.TOMLSchema{
		Kind:         ErrInvalidConfig,
		KeyType:      func(key string) string { return keyTypes[key] },
		UnknownKey:   unknownKeyReason,
		UnknownTable: unknownTableReason,
	}
}
