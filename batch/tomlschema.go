package batch

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// A TOMLSchema describes the keys of one strict TOML front door: the run
// config (this package) or another, such as a training config
// (batch/train). Its methods do what every such front door needs before it
// reads values: name the line of every key, report every unknown or
// misspelt key, and turn go-toml's decoding errors into *ConfigErrors that
// name the file, the line and the key. Every error they return matches
// Kind with errors.Is.
type TOMLSchema struct {
	// Kind is the sentinel of every error (nil: ErrInvalidRunConfig).
	Kind error
	// KeyType names the TOML type a known key or table wants ("a table",
	// "a string", "an integer", ...), or "" for an unknown one. Only keys
	// of type "a table" have their keys checked one level down.
	KeyType func(key string) string
	// UnknownKey is the reason given for an unknown key inside a known
	// table; UnknownTable for an unknown top-level key or table. Both
	// should list what is known.
	UnknownKey, UnknownTable string
}

// tomlTypeRE finds the TOML type in go-toml's "cannot decode TOML <type>
// into" message; it is compiled once and never changed.
var tomlTypeRE = regexp.MustCompile(`cannot decode TOML ([a-z ]+?) into`)

// KeyLines is the package's KeyLines with the schema's Kind on a syntax
// error.
func (s TOMLSchema) KeyLines(data []byte, path string) (map[string]int, error) {
	idx, err := KeyLines(data, path)
	var ce *ConfigError
	if errors.As(err, &ce) {
		return nil, s.errorAt(ce.File, ce.Line, ce.Key, ce.Reason)
	}
	return idx, err
}

// CheckKeys reports every key of data that is not one of the schema's
// keys spelled exactly (go-toml matches struct fields case-insensitively,
// so the typed decoding alone would take "Temperature" for "temperature"),
// each at its line in lines (from KeyLines). The keys of the known tables
// are checked one level down; a known key holding the wrong type is left
// to the typed decoding (see DecodeError). The errors are joined in line
// order; a key that differs from a known one only in case is told which.
func (s TOMLSchema) CheckKeys(data []byte, lines map[string]int, path string) error {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		return s.DecodeError(err, path)
	}
	var errs []*ConfigError
	unknown := func(key, reason string) {
		if want := strings.ToLower(key); want != key && s.KeyType(want) != "" {
			reason = fmt.Sprintf("unknown key (keys are case-sensitive: did you mean %q?)", want)
		}
		errs = append(errs, s.errorAt(path, lines[key], key, reason))
	}
	for k, v := range doc {
		if s.KeyType(k) == "" {
			unknown(k, s.UnknownTable)
			continue
		}
		table, ok := v.(map[string]any)
		if !ok || s.KeyType(k) != "a table" {
			continue
		}
		for sub := range table {
			if key := k + "." + sub; s.KeyType(key) == "" {
				unknown(key, s.UnknownKey)
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	slices.SortFunc(errs, func(a, b *ConfigError) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), strings.Compare(a.Key, b.Key))
	})
	joined := make([]error, len(errs))
	for i, e := range errs {
		joined[i] = e
	}
	return errors.Join(joined...)
}

// DecodeError turns an error of go-toml's decoding (with
// DisallowUnknownFields) into *ConfigErrors: each unknown key at its line,
// or the key holding the wrong type ("must be an integer, got a TOML
// string"), or the error's text when it names no key.
func (s TOMLSchema) DecodeError(err error, path string) error {
	var sm *toml.StrictMissingError
	if errors.As(err, &sm) {
		errs := make([]error, 0, len(sm.Errors))
		for i := range sm.Errors {
			e := &sm.Errors[i]
			line, _ := e.Position()
			key := strings.Join(e.Key(), ".")
			reason := s.UnknownKey
			if !strings.Contains(key, ".") {
				reason = s.UnknownTable
			}
			errs = append(errs, s.errorAt(path, line, key, reason))
		}
		return errors.Join(errs...)
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, _ := de.Position()
		key := strings.Join(de.Key(), ".")
		reason := strings.TrimPrefix(de.Error(), "toml: ")
		if want := s.KeyType(key); want != "" {
			if m := tomlTypeRE.FindStringSubmatch(de.Error()); m != nil {
				reason = fmt.Sprintf("must be %s, got a TOML %s", want, m[1])
			}
		}
		return s.errorAt(path, line, key, reason)
	}
	return s.errorAt(path, 0, "", err.Error())
}

// Decode reads a config file's data the strict way: the line of every
// key (KeyLines), every unknown or misspelt key (CheckKeys), then a
// decoding with DisallowUnknownFields into each of into in turn, the
// first that fails stopping it (DecodeError). It returns the keys' lines
// for the checks of the values (Problems).
func (s TOMLSchema) Decode(data []byte, path string, into ...any) (map[string]int, error) {
	lines, err := s.KeyLines(data, path)
	if err != nil {
		return nil, err
	}
	if err := s.CheckKeys(data, lines, path); err != nil {
		return nil, err
	}
	for _, v := range into {
		dec := toml.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			return nil, s.DecodeError(err, path)
		}
	}
	return lines, nil
}

// Problems returns an empty collector of the problems of path's values,
// each to be named at its key's line in lines (from Decode).
func (s TOMLSchema) Problems(path string, lines map[string]int) *ConfigProblems {
	return &ConfigProblems{schema: s, path: path, lines: lines}
}

// ConfigProblems collects the problems of one config file's values, so
// that a front door reports every one of them, not only the first.
type ConfigProblems struct {
	schema TOMLSchema
	path   string
	lines  map[string]int
	errs   []error
}

// Bad records that key's value is wrong: a *ConfigError at the key's line
// whose reason is the formatted text.
func (p *ConfigProblems) Bad(key, format string, args ...any) {
	p.errs = append(p.errs, p.schema.errorAt(p.path, p.lines[key], key, fmt.Sprintf(format, args...)))
}

// Missing records that table lacks a required key: at the table's line
// ("[table] has no key (required)") when the table is there, without a
// line ("[table] key is required") when it is not.
func (p *ConfigProblems) Missing(table, key string) {
	line, reason := p.lines[table], fmt.Sprintf("[%s] %s is required", table, key)
	if line > 0 {
		reason = fmt.Sprintf("[%s] has no %s (required)", table, key)
	}
	p.errs = append(p.errs, p.schema.errorAt(p.path, line, table+"."+key, reason))
}

// Err returns every recorded problem (errors.Join, in the order they were
// recorded), or nil when there is none.
func (p *ConfigProblems) Err() error { return errors.Join(p.errs...) }

func (s TOMLSchema) errorAt(file string, line int, key, reason string) *ConfigError {
	return &ConfigError{Kind: s.Kind, File: file, Line: line, Key: key, Reason: reason}
}

// KeyLines parses TOML data far enough to know the 1-based line of every
// dotted key and table (each table implied by a dotted key too, at the
// first line it appears on). A syntax error is returned as a *ConfigError
// naming path and the line. Other strict TOML front doors (batch/train) use
// it to name the line of a bad key.
func KeyLines(data []byte, path string) (map[string]int, error) {
	idx := map[string]int{}
	var p unstable.Parser
	p.Reset(data)
	// add indexes the key of n (a table header or a key/value) under
	// prefix, and every table it implies ("a" and "a.b" of a.b.c), each at
	// the first line it appears on; the keys of an inline table value are
	// indexed under the key. It returns the full key.
	var add func(prefix []string, n *unstable.Node) []string
	add = func(prefix []string, n *unstable.Node) []string {
		full := append([]string(nil), prefix...)
		line := 0
		for it := n.Key(); it.Next(); {
			k := it.Node()
			if line == 0 {
				line = p.Shape(k.Raw).Start.Line
			}
			full = append(full, string(k.Data))
		}
		for i := range full {
			if name := strings.Join(full[:i+1], "."); idx[name] == 0 {
				idx[name] = line
			}
		}
		if n.Kind == unstable.KeyValue && n.Value().Kind == unstable.InlineTable {
			for it := n.Value().Children(); it.Next(); {
				if c := it.Node(); c.Kind == unstable.KeyValue {
					add(full, c)
				}
			}
		}
		return full
	}
	var table []string
	for p.NextExpression() {
		switch n := p.Expression(); n.Kind {
		case unstable.Table, unstable.ArrayTable:
			table = add(nil, n)
		case unstable.KeyValue:
			add(table, n)
		}
	}
	if err := p.Error(); err != nil {
		var pe *unstable.ParserError
		line := 0
		if errors.As(err, &pe) && len(pe.Highlight) > 0 {
			if off := highlightOffset(data, pe.Highlight); off >= 0 {
				line = 1 + bytes.Count(data[:off], []byte("\n"))
			}
		}
		return nil, &ConfigError{File: path, Line: line, Reason: "TOML syntax: " + strings.TrimPrefix(err.Error(), "toml: ")}
	}
	return idx, nil
}

// highlightOffset finds where sub (a sub-slice of data) starts in data.
func highlightOffset(data, sub []byte) int {
	if len(sub) == 0 || len(data) == 0 {
		return -1
	}
	for i := range data {
		if &data[i] == &sub[0] {
			return i
		}
	}
	return -1
}
