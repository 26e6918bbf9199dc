package exec

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/rollout/rollout/batch"
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
	if err := json.Compact(&b, item.Payload); err != nil {
		return nil, fmt.Errorf("%w: item %d of run %q: the payload is not JSON: %v", ErrBadPayload, item.Index, item.Run, err)
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
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
// object: the object itself when it has a "completion" member (the shape of
// the built-in backends, which `rollout results` merges into the output
// line as it is), otherwise {"completion": result}, so that the output line
// shows the program's whole answer under "completion".
func recordable(result []byte) []byte {
	var members map[string]json.RawMessage
	if json.Unmarshal(result, &members) == nil {
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
