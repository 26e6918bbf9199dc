package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Format is the line format of an input item.
type Format uint8

// The input line formats.
const (
	// FormatPrompt is {"prompt": "...", ...extra}: the extra members are
	// kept verbatim and copied to the output line.
	FormatPrompt Format = iota + 1
	// FormatOpenAI is an OpenAI Batch request line:
	// {"custom_id": "...", "method": "POST", "url": "/v1/chat/completions",
	// "/v1/completions" or "/v1/embeddings", "body": {...}}.
	FormatOpenAI
)

// String returns "prompt" or "openai".
func (f Format) String() string {
	switch f {
	case FormatPrompt:
		return "prompt"
	case FormatOpenAI:
		return "openai"
	}
	return fmt.Sprintf("format(%d)", uint8(f))
}

// The endpoints an OpenAI Batch request line may name.
const (
	EndpointChat        = "/v1/chat/completions"
	EndpointCompletions = "/v1/completions"
	EndpointEmbeddings  = "/v1/embeddings"
)

// Endpoints lists the endpoints an OpenAI Batch request line may name, in
// the order error messages list them.
func Endpoints() []string { return []string{EndpointChat, EndpointCompletions, EndpointEmbeddings} }

// endpointList is Endpoints for an error message: "/v1/a", "/v1/b" or "/v1/c".
func endpointList() string {
	e := Endpoints()
	var b strings.Builder
	for i, u := range e {
		switch {
		case i == len(e)-1 && i > 0:
			b.WriteString(" or ")
		case i > 0:
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(u))
	}
	return b.String()
}

// maxEmbeddingInputs is the most entries an embeddings "input" array may
// have (OpenAI's limit).
const maxEmbeddingInputs = 2048

// maxJSONDepth bounds the nesting of a request body (CanonicalJSON).
const maxJSONDepth = 256

// Request is one valid input line, parsed.
type Request struct {
	Format Format
	// Prompt is the "prompt" of a FormatPrompt line.
	Prompt string
	// CustomID, URL and Body are the members of a FormatOpenAI line; Body
	// is the request body verbatim (a JSON object).
	CustomID string
	URL      string
	Body     json.RawMessage
	// SamplePrompt is what the sample id hashes as the prompt: Prompt for
	// a prompt line; for an OpenAI Batch line, CanonicalJSON of Body (so
	// the id changes with anything in the request but not with its
	// formatting or key order).
	SamplePrompt string
}

// ParseRequest parses one input line (surrounding whitespace allowed). A line
// with a "prompt" member is FormatPrompt: "prompt" must be a string. Any
// other line must be an OpenAI Batch request: "custom_id" a non-empty string,
// "method" "POST", "url" EndpointChat, EndpointCompletions or
// EndpointEmbeddings, "body" an object; a chat body needs a non-empty
// "messages" array, a completions body a "prompt", an embeddings body an
// "input" as OpenAI accepts it (see checkEmbeddingInput); "stream": true is
// refused (a batch collects whole responses).
// Other top-level members of an OpenAI Batch line are ignored. In both
// formats the line must be one JSON object in valid UTF-8 without duplicate
// keys. The error matches ErrInvalidLine and says what is wrong.
func ParseRequest(raw []byte) (Request, error) {
	r, _, err := parseRequest(raw)
	if err != nil {
		return Request{}, fmt.Errorf("%w: %s", ErrInvalidLine, err.Error())
	}
	return r, nil
}

// parseRequest is ParseRequest with a bare reason for an error; it also
// returns the object trimmed of surrounding whitespace (a sub-slice of raw).
func parseRequest(raw []byte) (Request, []byte, error) { return parseRequestIn(raw, true, false) }

// parseRequestIn is parseRequest; with own false the request (its Body)
// may share raw's bytes (for raw never changed afterwards); with formatOnly
// the request holds only its Format (a validation pass: no prompt copied).
func parseRequestIn(raw []byte, own, formatOnly bool) (Request, []byte, error) {
	obj := bytes.Trim(raw, jsonSpace)
	if len(obj) == 0 {
		return Request{}, nil, errors.New("line is empty")
	}
	fields, err := parseObjectIn(obj, own)
	if err != nil {
		return Request{}, nil, err
	}
	if formatOnly {
		// A prompt line's check without copying its prompt: as requestOf,
		// whose decoding of a string value (valid JSON) cannot fail.
		if v := findField(fields, "prompt"); v != nil {
			if v[0] != '"' {
				return Request{}, nil, fmt.Errorf(`"prompt" must be a string, got %s`, valueKind(v))
			}
			return Request{Format: FormatPrompt}, obj, nil
		}
	}
	r, err := requestOf(fields)
	if err != nil {
		return Request{}, nil, err
	}
	if formatOnly {
		r = Request{Format: r.Format}
	}
	return r, obj, nil
}

// plainString returns the string a JSON string value v (valid JSON, from
// parseObject: UTF-8 checked, no raw control characters) holds when it has
// no escapes: the bytes between its quotes, as json.Unmarshal would decode
// them. ok is false for any other value (decode it the slow way).
func plainString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' || bytes.IndexByte(v, '\\') >= 0 {
		return "", false
	}
	return string(v[1 : len(v)-1]), true
}

// requestOf classifies the members of a parsed input object as
// parseRequest does (a bare reason for an error).
func requestOf(fields []field) (Request, error) {
	if v := findField(fields, "prompt"); v != nil {
		prompt, ok := plainString(v)
		if !ok && (v[0] != '"' || json.Unmarshal(v, &prompt) != nil) {
			return Request{}, fmt.Errorf(`"prompt" must be a string, got %s`, valueKind(v))
		}
		return Request{Format: FormatPrompt, Prompt: prompt, SamplePrompt: prompt}, nil
	}
	if findField(fields, "custom_id") == nil && findField(fields, "body") == nil {
		return Request{}, errors.New(`"prompt" is missing (a prompt line needs "prompt"; an OpenAI Batch line needs "custom_id", "method", "url" and "body")`)
	}
	r, err := parseOpenAI(fields)
	if err != nil {
		return Request{}, fmt.Errorf("OpenAI Batch request: %s", err.Error())
	}
	return r, nil
}

// stringField returns the string value of member name, or an error naming
// it.
func stringField(fields []field, name string) (string, error) {
	v := findField(fields, name)
	if v == nil {
		return "", fmt.Errorf("%q is missing", name)
	}
	var s string
	if v[0] != '"' || json.Unmarshal(v, &s) != nil {
		return "", fmt.Errorf("%q must be a string, got %s", name, valueKind(v))
	}
	return s, nil
}

func parseOpenAI(fields []field) (Request, error) {
	id, err := stringField(fields, "custom_id")
	if err != nil {
		return Request{}, err
	}
	if id == "" {
		return Request{}, errors.New(`"custom_id" is empty`)
	}
	method, err := stringField(fields, "method")
	if err != nil {
		return Request{}, err
	}
	if method != "POST" {
		return Request{}, fmt.Errorf(`"method" must be "POST", got %s`, quoteShort(method))
	}
	url, err := stringField(fields, "url")
	if err != nil {
		return Request{}, err
	}
	if !slices.Contains(Endpoints(), url) {
		return Request{}, fmt.Errorf(`"url" must be %s, got %s`, endpointList(), quoteShort(url))
	}
	body := findField(fields, "body")
	if body == nil {
		return Request{}, errors.New(`"body" is missing`)
	}
	if valueKind(body) != "an object" {
		return Request{}, fmt.Errorf(`"body" must be an object, got %s`, valueKind(body))
	}
	bf, err := parseObject(body)
	if err != nil {
		return Request{}, fmt.Errorf(`"body": %s`, err.Error())
	}
	switch url {
	case EndpointChat:
		m := findField(bf, "messages")
		if m == nil {
			return Request{}, errors.New(`"body" of a chat request needs "messages"`)
		}
		if m = bytes.Trim(m, jsonSpace); valueKind(m) != "an array" || len(bytes.Trim(m[1:len(m)-1], jsonSpace)) == 0 {
			return Request{}, fmt.Errorf(`"body.messages" must be a non-empty array, got %s`, describeArray(m))
		}
	case EndpointCompletions:
		if findField(bf, "prompt") == nil {
			return Request{}, errors.New(`"body" of a completions request needs "prompt"`)
		}
	case EndpointEmbeddings:
		in := findField(bf, "input")
		if in == nil {
			return Request{}, errors.New(`"body" of an embeddings request needs "input"`)
		}
		if err := checkEmbeddingInput(in); err != nil {
			return Request{}, fmt.Errorf(`"body.input" %s`, err.Error())
		}
	}
	if s := findField(bf, "stream"); s != nil && string(bytes.TrimSpace(s)) == "true" {
		return Request{}, errors.New(`"body.stream" must not be true: a batch collects whole responses`)
	}
	canon, err := CanonicalJSON(body)
	if err != nil {
		return Request{}, fmt.Errorf(`"body": %s`, err.Error())
	}
	return Request{Format: FormatOpenAI, CustomID: id, URL: url, Body: body, SamplePrompt: string(canon)}, nil
}

// checkEmbeddingInput checks the "input" of an embeddings body the way
// OpenAI's API does: a non-empty string, or a non-empty array (at most
// maxEmbeddingInputs entries) of non-empty strings, or of token ids
// (non-negative integers: one tokenized input), or of non-empty arrays of
// token ids. The error completes the sentence `"body.input" ...`.
func checkEmbeddingInput(v json.RawMessage) error {
	v = bytes.Trim(v, jsonSpace)
	switch valueKind(v) {
	case "a string":
		var s string
		if json.Unmarshal(v, &s) != nil {
			return errors.New("must be a string or an array, got an invalid string")
		}
		if s == "" {
			return errors.New("must not be an empty string")
		}
		return nil
	case "an array":
	default:
		return fmt.Errorf("must be a string or an array, got %s", valueKind(v))
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(v, &elems); err != nil {
		return fmt.Errorf("must be a string or an array: %s", jsonReason(err))
	}
	switch {
	case len(elems) == 0:
		return errors.New("must not be an empty array")
	case len(elems) > maxEmbeddingInputs:
		return fmt.Errorf("has %d entries, more than the limit of %d", len(elems), maxEmbeddingInputs)
	}
	first := valueKind(elems[0])
	for i, e := range elems {
		if k := valueKind(e); k != first {
			return fmt.Errorf("[%d] is %s, but [0] is %s: the entries must be all strings, all token ids or all token arrays", i, k, first)
		}
		switch first {
		case "a string":
			var s string
			if json.Unmarshal(e, &s) != nil || s == "" {
				return fmt.Errorf("[%d] must be a non-empty string", i)
			}
		case "a number":
			if !isTokenID(e) {
				return fmt.Errorf("[%d] must be a token id (an integer >= 0), got %s", i, quoteShort(string(bytes.Trim(e, jsonSpace))))
			}
		case "an array":
			var toks []json.RawMessage
			if json.Unmarshal(e, &toks) != nil || len(toks) == 0 {
				return fmt.Errorf("[%d] must be a non-empty array of token ids", i)
			}
			for j, t := range toks {
				if !isTokenID(t) {
					return fmt.Errorf("[%d][%d] must be a token id (an integer >= 0), got %s", i, j, valueKind(t))
				}
			}
		default:
			return fmt.Errorf("[%d] must be a string, a token id or an array of token ids, got %s", i, first)
		}
	}
	return nil
}

// isTokenID reports whether v is a JSON number written as a non-negative
// integer without fraction or exponent that fits in 32 bits.
func isTokenID(v json.RawMessage) bool {
	s := string(bytes.Trim(v, jsonSpace))
	n, err := strconv.ParseUint(s, 10, 32)
	return err == nil && strconv.FormatUint(n, 10) == s
}

func describeArray(v json.RawMessage) string {
	if valueKind(v) == "an array" {
		return "an empty array"
	}
	return valueKind(v)
}

// CanonicalJSON returns the canonical form of one JSON value: object keys
// sorted (by their UTF-8 bytes), no insignificant whitespace, strings
// re-encoded the one way encoding/json writes them (without HTML escaping),
// numbers kept exactly as written. Two texts of the same JSON value that
// differ only in whitespace, key order or string escapes give the same bytes.
// Duplicate keys (at any depth), invalid UTF-8, nesting deeper than 256 and
// trailing data are errors.
func CanonicalJSON(v []byte) ([]byte, error) {
	if !utf8.Valid(v) {
		return nil, errors.New("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var out bytes.Buffer
	if err := canonicalValue(dec, &out, 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return out.Bytes(), nil
}

func canonicalValue(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("nested deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("not valid JSON: %s", jsonReason(err))
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			type member struct {
				key string
				val []byte
			}
			var members []member
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return fmt.Errorf("not valid JSON: %s", jsonReason(err))
				}
				k, ok := kt.(string)
				if !ok {
					return fmt.Errorf("not valid JSON: object key is %s", tokenKind(kt))
				}
				var vb bytes.Buffer
				if err := canonicalValue(dec, &vb, depth+1); err != nil {
					return err
				}
				members = append(members, member{key: k, val: vb.Bytes()})
			}
			if _, err := dec.Token(); err != nil {
				return fmt.Errorf("not valid JSON: %s", jsonReason(err))
			}
			slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
			out.WriteByte('{')
			for i, m := range members {
				if i > 0 {
					if members[i-1].key == m.key {
						return fmt.Errorf("duplicate key %s", quoteShort(m.key))
					}
					out.WriteByte(',')
				}
				out.Write(jsonString(m.key))
				out.WriteByte(':')
				out.Write(m.val)
			}
			out.WriteByte('}')
		case '[':
			out.WriteByte('[')
			for n := 0; dec.More(); n++ {
				if n > 0 {
					out.WriteByte(',')
				}
				if err := canonicalValue(dec, out, depth+1); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return fmt.Errorf("not valid JSON: %s", jsonReason(err))
			}
			out.WriteByte(']')
		default:
			return fmt.Errorf("not valid JSON: unexpected %q", string(t))
		}
	case string:
		out.Write(jsonString(t))
	case json.Number:
		out.WriteString(t.String())
	case bool:
		if t {
			out.WriteString("true")
		} else {
			out.WriteString("false")
		}
	case nil:
		out.WriteString("null")
	default:
		return fmt.Errorf("not valid JSON: unexpected %T", tok)
	}
	return nil
}
