package exec

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/internal/jsonscan"
	"github.com/rollout/rollout/worker"
)

// encodeRequest returns the line (with its '\n') that hands item to a
// program:
//
//	{"id":"<hex of the item's id>","run":"<run>","index":N,"payload":{...}}
//
// The payload is the item's payload compacted onto one line; a payload that
// is not JSON is ErrBadPayload (nothing is sent).
func encodeRequest(item worker.Item) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(len(item.Payload) + len(item.Run) + 2*len(item.ID) + 64)
	b.WriteString(`{"id":"`)
	b.WriteString(hex.EncodeToString(item.ID))
	b.WriteString(`","run":`)
	run, err := json.Marshal(item.Run)
	if err != nil {
		return nil, fmt.Errorf("%w: run name: %v", ErrBadPayload, err)
	}
	b.Write(run)
	b.WriteString(`,"index":`)
	b.WriteString(strconv.FormatUint(item.Index, 10))
	b.WriteString(`,"payload":`)
	if jsonscan.Valid(item.Payload) {
		// Valid JSON: compacted by copying (what json.Compact writes).
		b.Write(appendCompact(b.AvailableBuffer(), item.Payload))
	} else if err := json.Compact(&b, item.Payload); err != nil {
		return nil, fmt.Errorf("%w: item %d of run %q: the payload is not JSON: %v", ErrBadPayload, item.Index, item.Run, err)
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

// appendCompact appends valid JSON src to dst without the white space
// outside its strings: json.Compact's output, copied in one pass.
func appendCompact(dst, src []byte) []byte {
	inString, escaped := false, false
	from := 0
	for i, c := range src {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			dst = append(dst, src[from:i]...)
			from = i + 1
		}
	}
	return append(dst, src[from:]...)
}

// answer is one line a program wrote: the answer for one id, either a
// result (a JSON object) or an error.
type answer struct {
	id        string
	result    []byte // set when !isErr
	isErr     bool
	message   string // the error, when isErr
	retryable bool   // when isErr
}

// maxQuoted bounds the part of a bad line quoted in a protocol error.
const maxQuoted = 120

// quote renders at most maxQuoted bytes of line for an error message.
func quote(line []byte) string {
	if len(line) > maxQuoted {
		return strconv.Quote(string(line[:maxQuoted])) + fmt.Sprintf(" (%d bytes)", len(line))
	}
	return strconv.Quote(string(line))
}

// parseAnswer decodes one line (without its '\n') a program wrote:
//
//	{"id": "...", "result": {...}}
//	{"id": "...", "error": "...", "retryable": true|false}
//
// "retryable" may be left out (true). Members other than these are
// ignored. Anything else - a line that is not a JSON object, an id that is
// not a string, both or neither of result and error, a result that is not
// an object or is longer than maxResult bytes, an error that is not a
// string - is an error naming what was wrong (the caller wraps it as a
// protocol error).
func parseAnswer(line []byte, maxResult int) (answer, error) {
	if a, ok := parseAnswerFast(line, maxResult); ok {
		return a, nil
	}
	return parseAnswerSlow(line, maxResult)
}

// answerFields are the members parseAnswer reads.
var answerFields = [...]string{"id", "result", "error", "retryable"}

// parseAnswerFast is parseAnswer of a well-formed answer without a
// decoder: one validating pass (jsonscan.Valid) and one walk of the
// members (jsonscan.Members). It reports false, leaving the line to
// parseAnswerSlow (which then accepts it the same or says what is wrong),
// for anything but a plain answer: a line that is not a valid JSON object,
// a key written with an escape or one that matches a member only without
// regard to case (as encoding/json would match it), a string with an
// escape or not valid UTF-8, a result that is not an object or is over
// maxResult, a "retryable" that is not true, false or null.
func parseAnswerFast(line []byte, maxResult int) (answer, bool) {
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 || trimmed[0] != '{' || !jsonscan.Valid(trimmed) {
		return answer{}, false
	}
	var id, result, errv, retry []byte
	plain := jsonscan.Members(trimmed, func(ks, ke, vs, ve int) bool {
		k, v := trimmed[ks:ke], trimmed[vs:ve]
		switch string(k) {
		case "id":
			id = v
		case "result":
			result = v
		case "error":
			errv = v
		case "retryable":
			retry = v
		default:
			if !isASCII(k) {
				return false
			}
			for _, f := range answerFields {
				if bytes.EqualFold(k, []byte(f)) {
					return false
				}
			}
		}
		return true
	})
	if !plain {
		return answer{}, false
	}
	var a answer
	var ok bool
	if a.id, ok = plainString(id); !ok {
		return answer{}, false
	}
	isNull := func(v []byte) bool { return v == nil || string(v) == "null" }
	switch {
	case isNull(result) == isNull(errv):
		return answer{}, false
	case !isNull(errv):
		if a.message, ok = plainString(errv); !ok {
			return answer{}, false
		}
		a.isErr, a.retryable = true, true
		switch string(retry) {
		case "", "null", "true":
		case "false":
			a.retryable = false
		default:
			return answer{}, false
		}
		return a, true
	}
	if result[0] != '{' || len(result) > maxResult {
		return answer{}, false
	}
	a.result = bytes.Clone(result) // the line's buffer is the reader's
	return a, true
}

// plainString is the value of a JSON string v written without escapes in
// valid UTF-8; false for anything else.
func plainString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 || !utf8.Valid(v) {
		return "", false
	}
	return string(v[1 : len(v)-1]), true
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// parseAnswerSlow is parseAnswer with encoding/json: what parseAnswerFast
// leaves.
func parseAnswerSlow(line []byte, maxResult int) (answer, error) {
	var m struct {
		ID        json.RawMessage `json:"id"`
		Result    json.RawMessage `json:"result"`
		Error     json.RawMessage `json:"error"`
		Retryable json.RawMessage `json:"retryable"`
	}
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return answer{}, fmt.Errorf("a line that is not a JSON object: %s", quote(line))
	}
	if err := json.Unmarshal(trimmed, &m); err != nil {
		return answer{}, fmt.Errorf("a line that is not JSON (%v): %s", err, quote(line))
	}
	var a answer
	if m.ID == nil || json.Unmarshal(m.ID, &a.id) != nil || m.ID[0] != '"' {
		return answer{}, fmt.Errorf(`an answer without a string "id": %s`, quote(line))
	}
	isNull := func(v json.RawMessage) bool { return v == nil || string(v) == "null" }
	switch {
	case isNull(m.Result) && isNull(m.Error):
		return answer{}, fmt.Errorf(`an answer for id %q with neither "result" nor "error"`, a.id)
	case !isNull(m.Result) && !isNull(m.Error):
		return answer{}, fmt.Errorf(`an answer for id %q with both "result" and "error"`, a.id)
	case !isNull(m.Error):
		if m.Error[0] != '"' || json.Unmarshal(m.Error, &a.message) != nil {
			return answer{}, fmt.Errorf(`an answer for id %q whose "error" is not a string`, a.id)
		}
		a.isErr, a.retryable = true, true
		if !isNull(m.Retryable) {
			if err := json.Unmarshal(m.Retryable, &a.retryable); err != nil {
				return answer{}, fmt.Errorf(`an answer for id %q whose "retryable" is not true or false`, a.id)
			}
		}
		return a, nil
	}
	if m.Result[0] != '{' {
		return answer{}, fmt.Errorf(`an answer for id %q whose "result" is not a JSON object: %s`, a.id, quote(m.Result))
	}
	if len(m.Result) > maxResult {
		return answer{}, fmt.Errorf(`an answer for id %q whose result is %d bytes, over the limit of %d`, a.id, len(m.Result), maxResult)
	}
	a.result = m.Result
	return a, nil
}

// recordable returns the result the worker reports for a program's result
// object (one valid JSON object, as parseAnswer returns it): the object itself when it has a "completion" member (the shape of
// the built-in backends, which `rollout results` merges into the output
// line as it is), otherwise {"completion": result}, so that the output line
// shows the program's whole answer under "completion".
func recordable(result []byte) []byte {
	found := false
	walked := jsonscan.Members(result, func(ks, ke, _, _ int) bool {
		found = found || string(result[ks:ke]) == "completion"
		return true
	})
	if found {
		return result
	}
	var members map[string]json.RawMessage
	if !walked && json.Unmarshal(result, &members) == nil {
		// A key written with an escape: the decoder reads it.
		if _, ok := members["completion"]; ok {
			return result
		}
	}
	out := make([]byte, 0, len(result)+len(`{"completion":}`))
	out = append(out, `{"completion":`...)
	out = append(out, result...)
	return append(out, '}')
}

// recordableOpenAI returns the result the worker reports for a program's
// result object when the item is an OpenAI Batch request line: the object
// re-encoded as a batch.OpenAIResult when it is one (a "status_code" and a
// "body"), otherwise a 200 response whose body is the object.
func recordableOpenAI(result []byte) []byte {
	if r, err := batch.ParseOpenAIResult(result); err == nil {
		return r.Encode()
	}
	return batch.OpenAIResult{StatusCode: 200, Body: result}.Encode()
}
