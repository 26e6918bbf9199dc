package batch

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"lukechampine.com/blake3"

	"github.com/rollout/rollout/internal/limits"
	"github.com/rollout/rollout/store/storeurl"
)

// Limits of a run config.
const (
	// MaxRunNameBytes bounds a run name (the ledger's limit).
	MaxRunNameBytes = limits.MaxRunNameBytes
	// MaxModelBytes bounds [model] uri (the ledger's limit).
	MaxModelBytes = limits.MaxModelBytes
	// MaxWorkersHint bounds [workers] count.
	MaxWorkersHint = 100000
	// maxConfigBytes bounds the config file itself.
	maxConfigBytes = 1 << 20
)

// RunConfig is a batch run described by a TOML file:
//
//	name = "haiku-v1"                     # optional; default DefaultRunName
//
//	[model]
//	uri = "Qwen/Qwen2.5-0.5B-Instruct"     # required
//
//	[sampling]                            # optional; defaults as shown
//	temperature = 1.0                     # [0, 2]
//	top_p       = 1.0                     # (0, 1]
//	max_tokens  = 256                     # >= 1
//	seed        = 0                       # >= 0; 0 = none chosen
//
//	[input]
//	glob = "prompts/*.jsonl"              # required
//
//	[output]
//	dir = "out"                           # required
//
//	[workers]
//	count = 1                             # a hint, >= 1
//
// Relative paths (glob, dir) are relative to the directory of the config
// file. Keys are case-sensitive. Unknown keys and tables, wrong types and
// out-of-range values are errors naming the key and its line.
type RunConfig struct {
	// Name is the run name: the "name" key, else DefaultRunName.
	Name string
	// Model is [model] uri: the model the backends run, hashed into every
	// sample id.
	Model string
	// Sampling is [sampling], keys not given taking DefaultSamplingParams'.
	Sampling SamplingParams
	// Glob is [input] glob as written; InputGlob is it resolved against
	// BaseDir.
	Glob      string
	InputGlob string
	// OutputDir is [output] dir resolved against BaseDir.
	OutputDir string
	// Workers is [workers] count: how many workers the run is meant for (a
	// hint shown to the user; 1 when not given).
	Workers int
	// Retain is the "retain" key (a Go duration such as "720h"): how long
	// after it finished the run is deleted by the cluster on its own (0:
	// kept until deleted).
	Retain time.Duration
	// Store is the "store" key: the run's object store URL ("" when not
	// given; --store and its default apply).
	Store string
	// Priority is the "priority" key: 1 (lowest) to 5 (highest); 0 when
	// not given (the cluster's default, 3).
	Priority uint32
	// Tenant is the "tenant" key: the tenant the run is submitted for (""
	// when not given: the certificate's name; naming another needs an
	// admin certificate).
	Tenant string
	// Path is the config file as given; BaseDir is its directory.
	Path    string
	BaseDir string
}

// ConfigError is one problem with a config file: a run config (it
// matches ErrInvalidRunConfig) or another front door's TOML file, such as
// a training config (batch/train, which sets Kind to its own sentinel).
type ConfigError struct {
	// Kind is the sentinel the error matches with errors.Is; nil means
	// ErrInvalidRunConfig.
	Kind error
	File string
	// Line is the 1-based line of the key (0 when the problem has no line,
	// such as a missing table).
	Line int
	// Key is the dotted key ("sampling.temperature"), or "" for a syntax
	// error.
	Key    string
	Reason string
}

// Error returns "file:line: key: reason" (parts that are unknown left out).
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap makes errors.Is(err, Kind) hold (ErrInvalidRunConfig when Kind
// is nil).
func (e *ConfigError) Unwrap() error {
	if e.Kind != nil {
		return e.Kind
	}
	return ErrInvalidRunConfig
}

// LoadRunConfig reads and parses the run config at path.
func LoadRunConfig(path string) (*RunConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("batch: run config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("batch: reading run config %s: %w", path, err)
	}
	if len(data) > maxConfigBytes {
		return nil, &ConfigError{File: path, Reason: fmt.Sprintf("file is larger than %d bytes", maxConfigBytes)}
	}
	return ParseRunConfig(data, path)
}

// MaxPriority is the highest run priority (1 is the lowest).
const MaxPriority = 5

// tomlRunConfig is the file's shape; pointers tell given from absent.
type tomlRunConfig struct {
	Name     *string `toml:"name"`
	Retain   *string `toml:"retain"`
	Store    *string `toml:"store"`
	Priority *int64  `toml:"priority"`
	Tenant   *string `toml:"tenant"`
	Model    *struct {
		URI *string `toml:"uri"`
	} `toml:"model"`
	Sampling *struct {
		Temperature *float64 `toml:"temperature"`
		TopP        *float64 `toml:"top_p"`
		MaxTokens   *int64   `toml:"max_tokens"`
		Seed        *int64   `toml:"seed"`
	} `toml:"sampling"`
	Input *struct {
		Glob *string `toml:"glob"`
	} `toml:"input"`
	Output *struct {
		Dir *string `toml:"dir"`
	} `toml:"output"`
	Workers *struct {
		Count *int64 `toml:"count"`
	} `toml:"workers"`
}

// tomlShape has tomlRunConfig's keys with any type: decoding into it finds
// every unknown key before a type error can stop the decoder.
type tomlShape struct {
	Name     any `toml:"name"`
	Retain   any `toml:"retain"`
	Store    any `toml:"store"`
	Priority any `toml:"priority"`
	Tenant   any `toml:"tenant"`
	Model    *struct {
		URI any `toml:"uri"`
	} `toml:"model"`
	Sampling *struct {
		Temperature any `toml:"temperature"`
		TopP        any `toml:"top_p"`
		MaxTokens   any `toml:"max_tokens"`
		Seed        any `toml:"seed"`
	} `toml:"sampling"`
	Input *struct {
		Glob any `toml:"glob"`
	} `toml:"input"`
	Output *struct {
		Dir any `toml:"dir"`
	} `toml:"output"`
	Workers *struct {
		Count any `toml:"count"`
	} `toml:"workers"`
}

// keyType names the TOML type a known key wants ("" for an unknown key).
func keyType(key string) string {
	switch key {
	case "model", "sampling", "input", "output", "workers":
		return "a table"
	case "name", "retain", "store", "tenant", "model.uri", "input.glob", "output.dir":
		return "a string"
	case "sampling.temperature", "sampling.top_p":
		return "a float"
	case "sampling.max_tokens", "sampling.seed", "workers.count", "priority":
		return "an integer"
	}
	return ""
}

// ParseRunConfig parses a run config; path names it in errors and anchors
// relative paths. Every problem found is reported (errors.Join of
// *ConfigError, each matching ErrInvalidRunConfig); nothing is partially
// returned.
func ParseRunConfig(data []byte, path string) (*RunConfig, error) {
	// First the keys (every unknown key is reported), then the types:
	// tomlShape takes any type, so every unknown key is found before a
	// type error can stop the decoder.
	var shape tomlShape
	var tc tomlRunConfig
	lines, err := runConfigSchema().Decode(data, path, &shape, &tc)
	if err != nil {
		return nil, err
	}
	problems := runConfigSchema().Problems(path, lines)
	bad, missing := problems.Bad, problems.Missing

	cfg := &RunConfig{Path: path, BaseDir: filepath.Dir(path), Sampling: DefaultSamplingParams(), Workers: 1}
	if tc.Model == nil || tc.Model.URI == nil {
		missing("model", "uri")
	} else {
		cfg.Model = *tc.Model.URI
		if err := CheckConfigText(cfg.Model, MaxModelBytes); err != nil {
			bad("model.uri", "%s", err)
		}
	}
	if s := tc.Sampling; s != nil {
		if v := s.Temperature; v != nil {
			if math.IsNaN(*v) || *v < 0 || *v > 2 {
				bad("sampling.temperature", "%v is not in [0, 2]", *v)
			}
			cfg.Sampling.Temperature = *v
		}
		if v := s.TopP; v != nil {
			if math.IsNaN(*v) || *v <= 0 || *v > 1 {
				bad("sampling.top_p", "%v is not in (0, 1]", *v)
			}
			cfg.Sampling.TopP = *v
		}
		if v := s.MaxTokens; v != nil {
			if *v < 1 || *v > math.MaxUint32 {
				bad("sampling.max_tokens", "%d is not in [1, %d]", *v, uint64(math.MaxUint32))
			}
			cfg.Sampling.MaxTokens = uint32(min(max(*v, 0), math.MaxUint32))
		}
		if v := s.Seed; v != nil {
			if *v < 0 {
				bad("sampling.seed", "%d is negative", *v)
			}
			cfg.Sampling.Seed = uint64(max(*v, 0))
		}
	}
	if tc.Input == nil || tc.Input.Glob == nil {
		missing("input", "glob")
	} else {
		cfg.Glob = *tc.Input.Glob
		if err := CheckConfigText(cfg.Glob, 4096); err != nil {
			bad("input.glob", "%s", err)
		} else if _, err := filepath.Match(cfg.Glob, ""); err != nil {
			bad("input.glob", "%q is not a valid pattern: %v", cfg.Glob, err)
		}
		cfg.InputGlob = resolve(cfg.BaseDir, cfg.Glob)
	}
	if tc.Output == nil || tc.Output.Dir == nil {
		missing("output", "dir")
	} else {
		if err := CheckConfigText(*tc.Output.Dir, 4096); err != nil {
			bad("output.dir", "%s", err)
		}
		cfg.OutputDir = resolve(cfg.BaseDir, *tc.Output.Dir)
	}
	if cfg.InputGlob != "" && cfg.OutputDir != "" {
		if name, ok := outputMatchesGlob(cfg.OutputDir, cfg.InputGlob); ok {
			bad("output.dir", "%s is inside the input glob %s: its %s would match the glob and be read back as input; choose an output dir outside the glob or a narrower glob",
				cfg.OutputDir, cfg.InputGlob, name)
		}
	}
	if tc.Workers != nil && tc.Workers.Count != nil {
		if c := *tc.Workers.Count; c < 1 || c > MaxWorkersHint {
			bad("workers.count", "%d is not in [1, %d]", c, MaxWorkersHint)
		} else {
			cfg.Workers = int(c)
		}
	}
	if tc.Name != nil {
		cfg.Name = *tc.Name
		if err := CheckRunName(cfg.Name); err != nil {
			bad("name", "%s", strings.TrimPrefix(err.Error(), "batch: invalid run config: "))
		}
	}
	if tc.Retain != nil {
		d, err := time.ParseDuration(*tc.Retain)
		switch {
		case err != nil:
			bad("retain", "%q is not a duration such as \"720h\"", *tc.Retain)
		case d <= 0:
			bad("retain", "%s must be positive", *tc.Retain)
		default:
			cfg.Retain = d
		}
	}
	if tc.Store != nil {
		if err := storeurl.Check(*tc.Store); err != nil {
			bad("store", "%v", err)
		} else {
			cfg.Store = *tc.Store
		}
	}
	if tc.Priority != nil {
		if p := *tc.Priority; p < 1 || p > MaxPriority {
			bad("priority", "%d is not in [1, %d] (1 lowest, 5 highest; 3 when not given)", p, MaxPriority)
		} else {
			cfg.Priority = uint32(p)
		}
	}
	if tc.Tenant != nil {
		cfg.Tenant = *tc.Tenant
		if err := CheckRunName(cfg.Tenant); err != nil {
			bad("tenant", "%s", strings.Replace(strings.TrimPrefix(err.Error(), "batch: invalid run config: "), "run name", "tenant name", 1))
		}
	}
	if err := problems.Err(); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = DefaultRunName(cfg)
	}
	return cfg, nil
}

// resolve makes p relative to base unless it is absolute.
// outputMatchesGlob reports whether a file an output directory dir gets
// (ResultsFile, ErrorsFile or their temporary files) matches the input
// glob, and which.
func outputMatchesGlob(dir, glob string) (string, bool) {
	glob = filepath.Clean(glob)
	for _, name := range []string{ResultsFile, ErrorsFile, "." + ResultsFile + ".tmp-0", "." + ErrorsFile + ".tmp-0"} {
		if ok, err := filepath.Match(glob, filepath.Join(dir, name)); err == nil && ok {
			return name, true
		}
	}
	return "", false
}

func resolve(base, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(base, p)
}

// CheckConfigText reports why s cannot be a config's text value (a name,
// a model URI, a path): it must be non-empty printable UTF-8 of at most
// limit bytes, without leading or trailing spaces. The reasons read after
// the value's name ("must not be empty", "is 300 bytes, limit 256").
func CheckConfigText(s string, limit int) error {
	switch {
	case s == "":
		return errors.New("must not be empty")
	case len(s) > limit:
		return fmt.Errorf("is %d bytes, limit %d", len(s), limit)
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8")
	case strings.TrimSpace(s) != s:
		return fmt.Errorf("%q has leading or trailing spaces", s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("has a non-printable character %U", r)
		}
	}
	return nil
}

// CheckRunName reports why name cannot name a run (errors.Is
// ErrInvalidRunConfig): it must be non-empty printable UTF-8 of at most
// MaxRunNameBytes bytes, without leading or trailing spaces.
func CheckRunName(name string) error {
	if err := CheckConfigText(name, MaxRunNameBytes); err != nil {
		return fmt.Errorf("%w: run name %s", ErrInvalidRunConfig, err)
	}
	return nil
}

// DefaultRunName derives a run name from a config: the config file's base
// name without its extension (characters other than letters, digits, '.',
// '_' and '-' replaced by '-') and 8 hex digits of the blake3 hash of what
// decides the items' ids: the model, the canonical sampling parameters and
// the input glob as written. The same config always gives the same name, so
// submitting it again resumes the run; changing the model, a sampling
// parameter or the glob starts a new run.
func DefaultRunName(c *RunConfig) string {
	stem := strings.TrimSuffix(filepath.Base(c.Path), filepath.Ext(c.Path))
	stem = strings.Map(func(r rune) rune {
		if r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_' || r == '-') {
			return r
		}
		return '-'
	}, stem)
	if len(stem) > 64 {
		stem = stem[:64]
	}
	if strings.Trim(stem, ".-") == "" {
		stem = "run"
	}
	h := blake3.New(32, nil)
	for _, part := range [][]byte{[]byte(c.Model), c.Sampling.Canonical(), []byte(c.Glob)} {
		var n [8]byte
		for i := range n {
			n[i] = byte(uint64(len(part)) >> (8 * i))
		}
		h.Write(n[:])
		h.Write(part)
	}
	sum := h.Sum(nil)
	return stem + "-" + hex.EncodeToString(sum[:4])
}

// Reasons of an unknown key and an unknown table.
const (
	unknownKeyReason   = "unknown key (the keys are name, [model] uri, [sampling] temperature top_p max_tokens seed, [input] glob, [output] dir, [workers] count)"
	unknownTableReason = "unknown table or key (the tables are [model], [sampling], [input], [output], [workers])"
)

// runConfigSchema is the run config's keys, for the checks of TOMLSchema.
func runConfigSchema() TOMLSchema {
	return TOMLSchema{KeyType: keyType, UnknownKey: unknownKeyReason, UnknownTable: unknownTableReason}
}
