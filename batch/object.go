package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rollout/rollout/internal/jsonscan"
)

// field is one member of a JSON object, kept as written.
type field struct {
	name  string          // the key, unescaped
	key   []byte          // the key as written, quotes included
	value json.RawMessage // the value as written
}

// jsonSpace is JSON's insignificant whitespace.
const jsonSpace = " \t\r\n"

// parseObject splits data, which must be exactly one JSON object (optionally
// surrounded by whitespace), into its members in their original order, each
// kept byte for byte. Invalid UTF-8, duplicate keys and trailing data are
// errors. The error text is a reason fit for a LineError (no prefix).
func parseObject(data []byte) ([]field, error) { return parseObjectIn(data, true) }

// parseObjectIn is parseObject; with own false the fields share data's
// bytes instead of a copy (for data never changed afterwards: a block of
// ScanBlocks).
func parseObjectIn(data []byte, own bool) ([]field, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("line is not valid UTF-8")
	}
	if fields, ok := parseObjectFast(data, own); ok {
		return fields, nil
	}
	return parseObjectSlow(data)
}

// parseObjectSlow is parseObject with a token decoder, for what
// parseObjectFast leaves: it finds what is wrong and says so.
func parseObjectSlow(data []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %s", jsonReason(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("not a JSON object (got %s)", tokenKind(tok))
	}
	var fields []field
	seen := make(map[string]struct{})
	for dec.More() {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not valid JSON: %s", jsonReason(err))
		}
		name, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("not valid JSON: object key is %s", tokenKind(tok))
		}
		end := dec.InputOffset()
		key := bytes.TrimLeft(data[start:end], jsonSpace+",")
		if _, dup := seen[name]; dup {
			return nil, fmt.Errorf("duplicate key %s", quoteShort(name))
		}
		seen[name] = struct{}{}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("not valid JSON: value of %s: %s", quoteShort(name), jsonReason(err))
		}
		fields = append(fields, field{name: name, key: bytes.Clone(key), value: v})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, fmt.Errorf("not valid JSON: %s", jsonReason(err))
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, fmt.Errorf("data after the JSON object: %s", jsonReason(err))
		}
		return nil, fmt.Errorf("data after the JSON object (%s)", tokenKind(tok))
	}
	return fields, nil
}

// parseObjectFast is parseObject without a decoder for the common line: one
// valid JSON object whose keys are distinct and free of escapes. It returns
// ok=false for anything else (parseObjectSlow then decides and explains).
// The fields' key and value share one copy of data (data itself when not
// own), each capped so that an append to one cannot overwrite another.
func parseObjectFast(data []byte, own bool) (_ []field, ok bool) {
	if !jsonscan.Valid(data) {
		return nil, false
	}
	var fields []field
	var buf []byte
	ok = jsonscan.Members(data, func(ks, ke, vs, ve int) bool {
		name := string(data[ks:ke])
		for _, f := range fields {
			if f.name == name {
				return false
			}
		}
		if buf == nil {
			buf = data
			if own {
				buf = bytes.Clone(data)
			}
		}
		fields = append(fields, field{name: name, key: buf[ks-1 : ke+1 : ke+1], value: json.RawMessage(buf[vs:ve:ve])})
		return true
	})
	if !ok {
		return nil, false
	}
	return fields, true
}

// maxQuotedBytes bounds how much of a string from the input an error quotes.
const maxQuotedBytes = 64

// quoteShort quotes s (Go syntax, as %q) for an error reason, cut to its
// first maxQuotedBytes bytes (at a character boundary) and "..." when
// longer, so that a reason stays short whatever the input holds: it becomes
// the dead reason of an item recorded with --skip-invalid, which the ledger
// bounds.
func quoteShort(s string) string {
	if len(s) <= maxQuotedBytes {
		return strconv.Quote(s)
	}
	cut := maxQuotedBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}

// jsonReason turns a decoder error into a short reason.
func jsonReason(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of line"
	}
	return err.Error()
}

// tokenKind names the kind of a json.Token for error messages.
func tokenKind(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			return "an array"
		case '{':
			return "an object"
		}
		return fmt.Sprintf("%q", string(t))
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

// valueKind names the kind of a raw JSON value for error messages.
func valueKind(v json.RawMessage) string {
	s := strings.TrimLeft(string(v), jsonSpace)
	if s == "" {
		return "nothing"
	}
	switch s[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// findField returns the value of the member called name, or nil.
func findField(fields []field, name string) json.RawMessage {
	for _, f := range fields {
		if f.name == name {
			return f.value
		}
	}
	return nil
}

// parseLine checks one non-blank input line and returns its prompt and the
// object trimmed of surrounding whitespace (a sub-slice of raw). The error is
// a bare reason.
func parseLine(raw []byte) (string, []byte, error) {
	obj := bytes.Trim(raw, jsonSpace)
	if len(obj) == 0 {
		return "", nil, errors.New("line is empty")
	}
	fields, err := parseObject(obj)
	if err != nil {
		return "", nil, err
	}
	v := findField(fields, "prompt")
	if v == nil {
		return "", nil, errors.New(`"prompt" is missing`)
	}
	var prompt string
	if v[0] != '"' || json.Unmarshal(v, &prompt) != nil {
		return "", nil, fmt.Errorf(`"prompt" must be a string, got %s`, valueKind(v))
	}
	return prompt, obj, nil
}

// ParseLine checks one input line: it must be a JSON object (surrounding
// whitespace allowed) with a string field "prompt", valid UTF-8, with no
// duplicate keys and nothing after the object. It returns the prompt and the
// object trimmed of surrounding whitespace, a sub-slice of raw (copy it to
// keep it). The error matches ErrInvalidLine and says what is wrong.
func ParseLine(raw []byte) (prompt string, object []byte, err error) {
	prompt, object, err = parseLine(raw)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %s", ErrInvalidLine, err.Error())
	}
	return prompt, object, nil
}
