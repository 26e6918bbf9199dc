package batch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const seedConfig = `[model]
uri = "Qwen/Qwen2.5-0.5B-Instruct"

[sampling]
temperature = 0.7
top_p       = 0.9
max_tokens  = 64
seed        = 42

[input]
glob = "data/prompts/*.jsonl"

[output]
dir = "data/completions"

[workers]
count = 1
`

func TestParseRunConfigSeedSchema(t *testing.T) {
	cfg, err := ParseRunConfig([]byte(seedConfig), filepath.Join("cfgs", "run.toml"))
	require.NoError(t, err)
	require.Equal(t, "Qwen/Qwen2.5-0.5B-Instruct", cfg.Model)
	require.Equal(t, SamplingParams{Temperature: 0.7, TopP: 0.9, MaxTokens: 64, Seed: 42}, cfg.Sampling)
	require.Equal(t, "data/prompts/*.jsonl", cfg.Glob)
	require.Equal(t, filepath.Join("cfgs", "data", "prompts", "*.jsonl"), cfg.InputGlob, "relative to the config file")
	require.Equal(t, filepath.Join("cfgs", "data", "completions"), cfg.OutputDir)
	require.Equal(t, 1, cfg.Workers)
	require.Regexp(t, `^run-[0-9a-f]{8}$`, cfg.Name)
}

func TestParseRunConfigDefaultsAndName(t *testing.T) {
	minimal := "[model]\nuri = \"m\"\n[input]\nglob = \"/abs/*.jsonl\"\n[output]\ndir = \"/abs/out\"\n"
	cfg, err := ParseRunConfig([]byte(minimal), "my run.toml")
	require.NoError(t, err)
	require.Equal(t, DefaultSamplingParams(), cfg.Sampling)
	require.Equal(t, "/abs/*.jsonl", cfg.InputGlob, "absolute paths stay")
	require.Equal(t, 1, cfg.Workers)
	require.Regexp(t, `^my-run-[0-9a-f]{8}$`, cfg.Name)

	// The derived name is stable and changes with what decides the ids.
	again, err := ParseRunConfig([]byte(minimal+"[workers]\ncount = 4\n"), "my run.toml")
	require.NoError(t, err)
	require.Equal(t, cfg.Name, again.Name, "the workers hint does not change the run")
	for _, change := range []string{
		strings.Replace(minimal, `uri = "m"`, `uri = "m2"`, 1),
		strings.Replace(minimal, `/abs/*.jsonl`, `/abs/*.json`, 1),
		minimal + "[sampling]\nseed = 1\n",
		minimal + "[sampling]\ntemperature = 0.5\n",
	} {
		other, err := ParseRunConfig([]byte(change), "my run.toml")
		require.NoError(t, err)
		require.NotEqual(t, cfg.Name, other.Name, change)
	}

	named, err := ParseRunConfig([]byte("name = \"haiku-v1\"\n"+minimal), "x.toml")
	require.NoError(t, err)
	require.Equal(t, "haiku-v1", named.Name)
}

func TestParseRunConfigErrors(t *testing.T) {
	base := "[model]\nuri = \"m\"\n[input]\nglob = \"*.jsonl\"\n[output]\ndir = \"out\"\n"
	tests := []struct {
		name string
		doc  string
		want []string // each must appear in the error
	}{
		{"unknown key", base + "[sampling]\ntemprature = 0.5\n", []string{"run.toml:8: sampling.temprature: unknown key"}},
		{"unknown table", base + "\n[extra]\na = 1\n", []string{"run.toml:8: extra: unknown table"}},
		{"unknown top-level key", "nmae = \"x\"\n" + base, []string{"run.toml:1: nmae: unknown"}},
		{"every unknown key", base + "[sampling]\nfoo = 1\nbar = 2\n", []string{"run.toml:8: sampling.foo", "run.toml:9: sampling.bar"}},
		{"wrong type string for float", base + "[sampling]\ntemperature = \"hot\"\n", []string{"run.toml:8: sampling.temperature: must be a float, got a TOML string"}},
		{"wrong type float for integer", base + "[sampling]\nmax_tokens = 6.5\n", []string{"run.toml:8: sampling.max_tokens: must be an integer, got a TOML float"}},
		{"wrong type integer for string", strings.Replace(base, `uri = "m"`, "uri = 5", 1), []string{"run.toml:2: model.uri: must be a string, got a TOML integer"}},
		{"temperature above 2", base + "[sampling]\ntemperature = 2.5\n", []string{"run.toml:8: sampling.temperature: 2.5 is not in [0, 2]"}},
		{"temperature negative", base + "[sampling]\ntemperature = -0.1\n", []string{"run.toml:8: sampling.temperature"}},
		{"temperature nan", base + "[sampling]\ntemperature = nan\n", []string{"run.toml:8: sampling.temperature: NaN"}},
		{"top_p zero", base + "[sampling]\n\ntop_p = 0.0\n", []string{"run.toml:9: sampling.top_p: 0 is not in (0, 1]"}},
		{"top_p above 1", base + "[sampling]\ntop_p = 1.01\n", []string{"sampling.top_p: 1.01 is not in (0, 1]"}},
		{"max_tokens zero", base + "[sampling]\nmax_tokens = 0\n", []string{"run.toml:8: sampling.max_tokens: 0 is not in [1, 4294967295]"}},
		{"max_tokens huge", base + "[sampling]\nmax_tokens = 5000000000\n", []string{"sampling.max_tokens: 5000000000"}},
		{"seed negative", base + "[sampling]\nseed = -1\n", []string{"run.toml:8: sampling.seed: -1 is negative"}},
		{"workers zero", base + "[workers]\ncount = 0\n", []string{"run.toml:8: workers.count: 0 is not in [1, 100000]"}},
		{"several range errors at once", base + "[sampling]\ntemperature = 3.0\ntop_p = 2.0\n", []string{"run.toml:8: sampling.temperature", "run.toml:9: sampling.top_p"}},
		{"missing model", "[input]\nglob = \"x\"\n[output]\ndir = \"o\"\n", []string{"model.uri: [model] uri is required"}},
		{"table without key", "[model]\n[input]\nglob = \"x\"\n[output]\ndir = \"o\"\n", []string{"run.toml:1: model.uri: [model] has no uri (required)"}},
		{"missing input and output", "[model]\nuri = \"m\"\n", []string{"input.glob", "output.dir"}},
		{"empty model", strings.Replace(base, `uri = "m"`, `uri = ""`, 1), []string{"run.toml:2: model.uri: must not be empty"}},
		{"bad glob", strings.Replace(base, `glob = "*.jsonl"`, `glob = "[x"`, 1), []string{"run.toml:4: input.glob", "not a valid pattern"}},
		{"padded name", "name = \" x\"\n" + base, []string{"run.toml:1: name:", "leading or trailing spaces"}},
		{"duplicate key", strings.Replace(base, `uri = "m"`, "uri = \"m\"\nuri = \"n\"", 1), []string{"run.toml:3", "already defined"}},
		{"syntax error", "[model\nuri = \"m\"\n", []string{"run.toml:1: TOML syntax"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseRunConfig([]byte(tt.doc), "run.toml")
			require.Error(t, err)
			require.Nil(t, cfg)
			require.ErrorIs(t, err, ErrInvalidRunConfig)
			var ce *ConfigError
			require.True(t, errors.As(err, &ce), "%T", err)
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestLoadRunConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run.toml")
	require.NoError(t, os.WriteFile(path, []byte(seedConfig), 0o644))
	cfg, err := LoadRunConfig(path)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "data", "prompts", "*.jsonl"), cfg.InputGlob)
	require.Equal(t, dir, cfg.BaseDir)

	_, err = LoadRunConfig(filepath.Join(dir, "missing.toml"))
	require.ErrorIs(t, err, os.ErrNotExist)

	big := filepath.Join(dir, "big.toml")
	require.NoError(t, os.WriteFile(big, []byte(strings.Repeat("# x\n", maxConfigBytes/4+1)), 0o644))
	_, err = LoadRunConfig(big)
	require.ErrorIs(t, err, ErrInvalidRunConfig)
}

func TestCheckRunName(t *testing.T) {
	require.NoError(t, CheckRunName("run-1"))
	for _, bad := range []string{"", " x", "x ", strings.Repeat("a", MaxRunNameBytes+1), "a\x00b", "\xff"} {
		require.ErrorIs(t, CheckRunName(bad), ErrInvalidRunConfig, "%q", bad)
	}
}

// TestExampleRunConfig keeps examples/run.toml and its inputs valid.
func TestExampleRunConfig(t *testing.T) {
	cfg, err := LoadRunConfig(filepath.Join("..", "examples", "run.toml"))
	require.NoError(t, err)
	require.Equal(t, "example", cfg.Name)
	files, err := ExpandGlob(cfg.InputGlob)
	require.NoError(t, err)
	require.Len(t, files, 2)
	rep, err := ValidateInputs(context.Background(), files, DefaultConfig())
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Errors)
	require.NotZero(t, rep.Prompt)
	require.NotZero(t, rep.OpenAI)
}

// TestConfigErrorKind: a ConfigError matches its Kind, and only it; with
// no Kind it is a run config's error.
func TestConfigErrorKind(t *testing.T) {
	other := errors.New("another front door's config")
	e := &ConfigError{Kind: other, File: "t.toml", Line: 3, Key: "train.steps", Reason: "must be positive"}
	require.ErrorIs(t, e, other)
	require.NotErrorIs(t, e, ErrInvalidRunConfig)
	require.Equal(t, "t.toml:3: train.steps: must be positive", e.Error())
	run := &ConfigError{File: "r.toml", Reason: "TOML syntax: x"}
	require.ErrorIs(t, run, ErrInvalidRunConfig)
	require.Equal(t, "r.toml: TOML syntax: x", run.Error())
}
