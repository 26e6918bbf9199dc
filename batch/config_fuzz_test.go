package batch

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/stretchr/testify/require"
)

// FuzzParseRunConfig: ParseRunConfig never panics. Every error matches
// ErrInvalidRunConfig and is made of *ConfigErrors that name the file and say
// what is wrong: a key error names the key, a syntax error names its line. A
// config that parses satisfies every rule the parser enforces, and writing
// it out as TOML and parsing that again gives the same config.
func FuzzParseRunConfig(f *testing.F) {
	for _, s := range []string{
		// Valid.
		"[model]\nuri = \"m\"\n[input]\nglob = \"in/*.jsonl\"\n[output]\ndir = \"out\"\n",
		"name = \"haiku-v1\"\n[model]\nuri = \"Qwen/Qwen2.5-0.5B-Instruct\"\n[sampling]\ntemperature = 0.7\ntop_p = 0.9\nmax_tokens = 64\nseed = 42\n" +
			"[input]\nglob = \"prompts/*.jsonl\"\n[output]\ndir = \"out\"\n[workers]\ncount = 4\n",
		"model.uri = 'm'\ninput = { glob = '/abs/x.jsonl' }\noutput.dir = \"\"\"o\"\"\"\nsampling.temperature = 0\nsampling.top_p = 1e-3\n",
		"[model]\nuri = \"m\"\n[sampling]\ntemperature = 2\nmax_tokens = 4294967295\n[input]\nglob = \"a\"\n[output]\ndir = \"b\"\n",
		// Invalid: syntax, unknown keys, wrong types, ranges, missing tables.
		"", "[model", "name = ", "= 1", "[model]\nuri = \"m\"\n[model]\nuri = \"n\"\n",
		"nmae = \"x\"\n[modle]\nuri = 1\n[sampling]\ntemp = 1\n",
		"[model]\nuri = 1\n[input]\nglob = []\n[output]\ndir = {}\n",
		"[model]\nuri = \" m \"\n[sampling]\ntemperature = nan\ntop_p = 0\nmax_tokens = 0\nseed = -1\n[input]\nglob = \"[\"\n[output]\ndir = \"o\"\n[workers]\ncount = 0\n",
		"[model]\nuri = \"m\"\n[sampling]\ntemperature = inf\ntop_p = -inf\nmax_tokens = 4294967296\n[input]\nglob = \"a\"\n[output]\ndir = \"b\"\n",
		"[model]\nuri = \"m\"\n[sampling]\nmax_tokens = 1.5\n[input]\nglob = \"a\"\n[output]\ndir = \"b\"\n",
		"name = \"a\\u0000b\"\n[model]\nuri = \"m\\n\"\n[input]\nglob = \"a\"\n[output]\ndir = \"b\"\n",
		"[[model]]\nuri = \"m\"\n", "model = 3\n", "[sampling.deep]\nx = 1\n", "name = \"\xff\"\n",
		"\xef\xbb\xbf[model]\nuri = \"m\"\n", "[model]\r\nuri = \"m\"\r\n",
		// Regressions: go-toml matches fields case-insensitively, so these
		// were taken as [sampling] temperature (with no line in the error).
		"[model]#00000000\n[sAmpling]\ntemperAture =10\nmAX_tokens =10000000000#000",
		"[model]\nuri = \"m\"\n[input]\nglob = \"a\"\n[output]\ndir = \"b\"\n[sampling]\nTemperature = 0.5\n",
		"Name = \"x\"\nmodel = { URI = \"m\" }\ninput = { glob = \"a\" }\noutput = { dir = \"b\" }\n",
		// An implied table ("0" of [0.0]) must have a line too.
		"[0.0]", "a.b.c = 1\n", "0=1E700", "[sampling]\ntemperature = 1e700\n",
		"input = { glob= \"\" } ", "input = { x = { y = 1 } }\n",
	} {
		f.Add([]byte(s))
	}
	const path = "run.toml"
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseRunConfig(data, path)
		if err != nil {
			require.Nil(t, cfg)
			requireConfigErrors(t, err, path)
			return
		}
		require.NoError(t, cfg.Sampling.Validate())
		require.NoError(t, CheckRunName(cfg.Name))
		require.NoError(t, CheckConfigText(cfg.Model, MaxModelBytes))
		require.NoError(t, CheckConfigText(cfg.Glob, 4096))
		_, err = filepath.Match(cfg.Glob, "")
		require.NoError(t, err)
		require.NotEmpty(t, cfg.InputGlob)
		require.NotEmpty(t, cfg.OutputDir)
		require.GreaterOrEqual(t, cfg.Workers, 1)
		require.LessOrEqual(t, cfg.Workers, MaxWorkersHint)
		require.Equal(t, path, cfg.Path)

		// Round trip: the config written out parses to itself. With the
		// config in ".", OutputDir is the dir as written, cleaned, and
		// cleaning again changes nothing.
		again, err := ParseRunConfig(encodeRunConfig(t, cfg), path)
		require.NoError(t, err)
		require.Equal(t, cfg, again)
	})
}

// requireConfigErrors checks that err is what ParseRunConfig promises: it
// matches ErrInvalidRunConfig, and each of its parts is a *ConfigError
// naming the file and saying what is wrong.
func requireConfigErrors(t *testing.T, err error, path string) {
	t.Helper()
	require.ErrorIs(t, err, ErrInvalidRunConfig)
	parts := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts = j.Unwrap()
	}
	require.NotEmpty(t, parts)
	for _, p := range parts {
		var ce *ConfigError
		require.True(t, errors.As(p, &ce), "not a *ConfigError: %T %v", p, p)
		require.Equal(t, path, ce.File)
		require.NotEmpty(t, ce.Reason, "%v", ce)
		require.True(t, strings.HasPrefix(ce.Error(), path+":"), "%q", ce.Error())
		if ce.Key == "" {
			// Not about a key (a syntax error, a number out of range): it
			// must say where.
			require.Positive(t, ce.Line, "error without a key or a line: %v", ce)
		} else {
			require.True(t, ce.Line > 0 || strings.Contains(ce.Reason, "required"), "key error without a line: %v", ce)
		}
	}
}

// encodeRunConfig writes cfg as a TOML run config.
func encodeRunConfig(t *testing.T, cfg *RunConfig) []byte {
	t.Helper()
	type model struct {
		URI string `toml:"uri"`
	}
	type sampling struct {
		Temperature float64 `toml:"temperature"`
		TopP        float64 `toml:"top_p"`
		MaxTokens   uint32  `toml:"max_tokens"`
		Seed        uint64  `toml:"seed"`
	}
	type input struct {
		Glob string `toml:"glob"`
	}
	type output struct {
		Dir string `toml:"dir"`
	}
	type workers struct {
		Count int `toml:"count"`
	}
	b, err := toml.Marshal(struct {
		Name     string   `toml:"name"`
		Model    model    `toml:"model"`
		Sampling sampling `toml:"sampling"`
		Input    input    `toml:"input"`
		Output   output   `toml:"output"`
		Workers  workers  `toml:"workers"`
	}{
		Name:     cfg.Name,
		Model:    model{URI: cfg.Model},
		Sampling: sampling{Temperature: cfg.Sampling.Temperature, TopP: cfg.Sampling.TopP, MaxTokens: cfg.Sampling.MaxTokens, Seed: cfg.Sampling.Seed},
		Input:    input{Glob: cfg.Glob},
		Output:   output{Dir: cfg.OutputDir},
		Workers:  workers{Count: cfg.Workers},
	})
	require.NoError(t, err)
	return b
}

// TestParseRunConfigKeysAreCaseSensitive: a key spelled with other cases is
// an unknown key with its line and a hint, never taken for the key.
func TestParseRunConfigKeysAreCaseSensitive(t *testing.T) {
	base := "[model]\nuri = \"m\"\n[input]\nglob = \"a\"\n[output]\ndir = \"b\"\n"
	for _, tc := range []struct{ name, data, want string }{
		{"key in a table", base + "[sampling]\nTemperature = 0.5\n", `run.toml:8: sampling.Temperature: unknown key (keys are case-sensitive: did you mean "sampling.temperature"?)`},
		{"table", base + "[Workers]\ncount = 2\n", `run.toml:7: Workers: unknown key (keys are case-sensitive: did you mean "workers"?)`},
		{"top-level key", "NAME = \"x\"\n" + base, `run.toml:1: NAME: unknown key (keys are case-sensitive: did you mean "name"?)`},
		{"key in an inline table", "model = { URI = \"m\" }\ninput = { glob = \"a\" }\noutput = { dir = \"b\" }\n", `run.toml:1: model.URI: unknown key`},
		{"plain unknown key keeps its reason", base + "[sampling]\nfoo = 1\n", "run.toml:8: sampling.foo: unknown key (the keys are"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseRunConfig([]byte(tc.data), "run.toml")
			require.Nil(t, cfg)
			require.ErrorIs(t, err, ErrInvalidRunConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
}
