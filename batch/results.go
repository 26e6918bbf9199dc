package batch

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unicode/utf8"

	"github.com/rollout/rollout/internal/jsonscan"
)

// The files an output directory holds.
const (
	// ResultsFile holds one line per finished item in input order: prompt
	// lines merged with their completion (or error), OpenAI Batch lines as
	// OpenAI Batch output lines that succeeded.
	ResultsFile = "results.jsonl"
	// ErrorsFile holds the OpenAI Batch output lines of OpenAI Batch
	// requests that failed, in input order.
	ErrorsFile = "errors.jsonl"
)

// EncodeCompletionResult is the result a backend reports for a prompt-format
// item: {"completion": ..., "finish_reason": ...}.
func EncodeCompletionResult(completion, finishReason string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"` + KeyCompletion + `":`)
	b.Write(jsonString(completion))
	b.WriteString(`,"` + KeyFinishReason + `":`)
	b.Write(jsonString(finishReason))
	b.WriteByte('}')
	return b.Bytes()
}

// OpenAIResult is the result a backend reports for an OpenAI Batch item: the
// HTTP status, the server's request id and the response body verbatim.
type OpenAIResult struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

// Encode returns r as one compact JSON object in valid UTF-8. Body must be
// valid JSON; invalid UTF-8 in it (which JSON syntax allows only inside
// strings) is replaced by U+FFFD, byte by byte, as encoding/json does.
func (r OpenAIResult) Encode() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"status_code":%d,"request_id":`, r.StatusCode)
	b.Write(jsonString(r.RequestID))
	b.WriteString(`,"body":`)
	if len(bytes.TrimSpace(r.Body)) == 0 {
		b.WriteString("null")
	} else {
		b.Write(validUTF8(compactJSON(r.Body)))
	}
	b.WriteByte('}')
	return b.Bytes()
}

// validUTF8 returns b, or a copy with every byte that is not part of a
// valid UTF-8 sequence replaced by U+FFFD.
func validUTF8(b []byte) []byte {
	if utf8.Valid(b) {
		return b
	}
	out := make([]byte, 0, len(b)+len(b)/2)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		out = utf8.AppendRune(out, r) // RuneError for an invalid byte (n == 1)
		b = b[n:]
	}
	return out
}

// ParseOpenAIResult decodes an OpenAIResult (ErrInvalidResult on failure).
func ParseOpenAIResult(b []byte) (OpenAIResult, error) {
	var r OpenAIResult
	if err := json.Unmarshal(b, &r); err != nil {
		return OpenAIResult{}, fmt.Errorf("%w: not an OpenAI Batch result: %v", ErrInvalidResult, err)
	}
	if r.StatusCode == 0 || len(r.Body) == 0 {
		return OpenAIResult{}, fmt.Errorf("%w: OpenAI Batch result without status_code or body", ErrInvalidResult)
	}
	return r, nil
}

// Error codes of OpenAI Batch error lines.
const (
	// CodeItemFailed: the request failed on every attempt the run allowed.
	CodeItemFailed = "item_failed"
	// CodeInvalidRequest: the input line was invalid and recorded with
	// --skip-invalid.
	CodeInvalidRequest = "invalid_request"
	// CodeUnrenderable: the item's id, payload or result could not be
	// rendered (see UnrenderableLine).
	CodeUnrenderable = "unrenderable_item"
)

// OpenAIBatchID is the "id" of an item's OpenAI Batch output line:
// "batch_req_" and the sample id in hex.
func OpenAIBatchID(sampleID [32]byte) string {
	return "batch_req_" + hex.EncodeToString(sampleID[:])
}

// OpenAIOutputLine is the OpenAI Batch output line of a request that
// succeeded:
//
//	{"id":"batch_req_…","custom_id":…,"response":{"status_code":200,"request_id":…,"body":{…}},"error":null}
func OpenAIOutputLine(customID string, sampleID [32]byte, r OpenAIResult) []byte {
	var b bytes.Buffer
	b.WriteString(`{"id":`)
	b.Write(jsonString(OpenAIBatchID(sampleID)))
	b.WriteString(`,"custom_id":`)
	b.Write(jsonString(customID))
	b.WriteString(`,"response":`)
	b.Write(r.Encode())
	b.WriteString(`,"error":null}`)
	return b.Bytes()
}

// OpenAIErrorLine is the OpenAI Batch output line of a request that failed:
//
//	{"id":"batch_req_…","custom_id":…,"response":null,"error":{"code":…,"message":…}}
func OpenAIErrorLine(customID string, sampleID [32]byte, code, message string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"id":`)
	b.Write(jsonString(OpenAIBatchID(sampleID)))
	b.WriteString(`,"custom_id":`)
	b.Write(jsonString(customID))
	b.WriteString(`,"response":null,"error":{"code":`)
	b.Write(jsonString(code))
	b.WriteString(`,"message":`)
	b.Write(jsonString(message))
	b.WriteString(`}}`)
	return b.Bytes()
}

// FinishedItem is a Done or Dead item as the output needs it.
type FinishedItem struct {
	Index uint64
	// ID is the item's id as the ledger holds it; when set, it must be 32
	// bytes long for the item to render. SampleID holds those 32 bytes.
	ID       []byte
	SampleID [32]byte
	// Payload is the item's payload: an input line (prompt or OpenAI Batch
	// format) or an InvalidPayload.
	Payload []byte
	// Done tells a Done item (Result set) from a Dead one (Reason set).
	Done   bool
	Result []byte
	Reason string
	// Cancelled marks an item that never ran because its run was
	// cancelled (not Done, Reason set): it renders as a Dead item does, and
	// summaries count it apart from the Dead ones.
	Cancelled bool
	// Parsed, when set, is ParseInput(Payload), kept by a caller that
	// parsed the line already (for its sample id): RenderLine and
	// OutputLine then do not parse it again.
	Parsed *Input
}

// OutputLine formats the output line of a finished item and says whether it
// belongs in the errors file:
//
//   - a prompt line: MergeResult (the input's members, then "completion" and
//     "finish_reason", or "error", then "sample_id"); never an error line;
//   - an OpenAI Batch line: OpenAIOutputLine when Done, else OpenAIErrorLine
//     with CodeItemFailed (an error line);
//   - an invalid line recorded with --skip-invalid (InvalidPayload): with a
//     custom_id, OpenAIErrorLine with CodeInvalidRequest (an error line);
//     otherwise MergeResult with its "error".
//
// An empty reason of a Dead item is reported as "failed (no reason
// recorded)".
func OutputLine(it FinishedItem) (line []byte, isError bool, err error) {
	in := it.Parsed
	if in == nil {
		in = ParseInput(it.Payload)
	}
	return in.outputLine(it)
}

// Input is one input line parsed once, so that its sample id and its
// output line come from one parse (the results walk needs both for every
// line). The zero value is not usable: make one with ParseInput.
type Input struct {
	raw    []byte
	fields []field
	err    error // parseObject's reason, nil when fields hold the object
	req    Request
	reqErr error // parseRequest's reason, nil when req is the request
}

// ParseInput parses line (an input line or an item's payload). It never
// fails: what is wrong with line is kept for SampleID and for OutputLine
// (FinishedItem.Parsed), which treat it exactly as SampleIDOfLine and
// OutputLine of the bare line do.
func ParseInput(line []byte) *Input { return parseInput(line, parseObject) }

// ParseInputShared is ParseInput without a copy of line: the Input's
// members are line's own bytes, so line must not change while the Input is
// used (a results walk renders from the chunk bytes it checked, held until
// their lines are written).
func ParseInputShared(line []byte) *Input { return parseInput(line, parseObjectShared) }

// parseInput is ParseInput with parse as parseObject.
func parseInput(line []byte, parse func([]byte) ([]field, error)) *Input {
	in := &Input{raw: line}
	obj := bytes.Trim(line, jsonSpace)
	in.fields, in.err = parse(obj)
	switch {
	case len(obj) == 0:
		in.reqErr = errors.New("line is empty")
	case in.err != nil:
		in.reqErr = in.err
	default:
		in.req, in.reqErr = requestOf(in.fields)
	}
	return in
}

// Request is ParseRequest of the parsed line (its error matches
// ErrInvalidLine).
func (in *Input) Request() (Request, error) {
	if in.reqErr != nil {
		return Request{}, fmt.Errorf("%w: %s", ErrInvalidLine, in.reqErr.Error())
	}
	return in.req, nil
}

// SampleID is SampleIDOfLine of the parsed line.
func (in *Input) SampleID(model string, p SamplingParams, index uint64) [32]byte {
	if in.reqErr == nil {
		return SampleID(model, in.req.SamplePrompt, p, index)
	}
	return SampleID(model, string(bytes.Trim(in.raw, jsonSpace)), p, index)
}

// parseObjectShared is parseObject (the same fields or error) whose fields
// share data's memory instead of a copy: for data that does not change
// while they are used.
func parseObjectShared(data []byte) ([]field, error) {
	if utf8.Valid(data) && jsonscan.Valid(data) {
		var fields []field
		ok := jsonscan.Members(data, func(ks, ke, vs, ve int) bool {
			name := string(data[ks:ke])
			for _, f := range fields {
				if f.name == name {
					return false // a duplicate key: parseObject says so
				}
			}
			fields = append(fields, field{name: name, key: data[ks-1 : ke+1 : ke+1], value: json.RawMessage(data[vs:ve:ve])})
			return true
		})
		if ok {
			return fields, nil
		}
	}
	return parseObject(data)
}

// outputLine is OutputLine of it, whose Payload is in's line.
func (in *Input) outputLine(it FinishedItem) (line []byte, isError bool, err error) {
	return in.appendOutputLine(nil, it)
}

// appendOutputLine appends outputLine's line to dst (nothing on error).
func (in *Input) appendOutputLine(dst []byte, it FinishedItem) (line []byte, isError bool, err error) {
	if it.ID != nil && len(it.ID) != len(it.SampleID) {
		return nil, false, fmt.Errorf("%w: item %d has a %d-byte id, want %d", ErrInvalidLine, it.Index, len(it.ID), len(it.SampleID))
	}
	reason := it.Reason
	if !it.Done && reason == "" {
		reason = "failed (no reason recorded)"
	}
	if in.err != nil {
		return nil, false, fmt.Errorf("%w: item %d payload: %s", ErrInvalidLine, it.Index, in.err.Error())
	}
	fields := in.fields
	if findField(fields, KeyInvalidLine) != nil && findField(fields, "prompt") == nil && findField(fields, "body") == nil {
		if v := findField(fields, KeyCustomID); v != nil {
			var id string
			if json.Unmarshal(v, &id) == nil {
				return append(dst, OpenAIErrorLine(id, it.SampleID, CodeInvalidRequest, reason)...), true, nil
			}
		}
		line, err := mergeFields(dst, fields, len(in.raw), it.SampleID, nil, reason)
		return line, false, err
	}
	if in.reqErr != nil || in.req.Format == FormatPrompt {
		// A prompt line, or a payload this version cannot classify:
		// MergeResult keeps whatever the input held.
		if it.Done {
			line, err = mergeFields(dst, fields, len(in.raw), it.SampleID, it.Result, "")
		} else {
			line, err = mergeFields(dst, fields, len(in.raw), it.SampleID, nil, reason)
		}
		if err != nil {
			return nil, false, fmt.Errorf("item %d: %w", it.Index, err)
		}
		return line, false, nil
	}
	if !it.Done {
		return append(dst, OpenAIErrorLine(in.req.CustomID, it.SampleID, CodeItemFailed, reason)...), true, nil
	}
	r, err := ParseOpenAIResult(it.Result)
	if err != nil {
		return nil, false, fmt.Errorf("item %d: %w", it.Index, err)
	}
	return append(dst, OpenAIOutputLine(in.req.CustomID, it.SampleID, r)...), false, nil
}

// UnrenderableLine is the output line of a finished item that OutputLine
// cannot render (an id that is not 32 bytes, a payload that is not a JSON
// object, a result the payload's format cannot take: an item that reached
// the ledger without the API's checks), so that one such item never stops a
// run's output. reason is why (OutputLine's error). When the payload is a
// JSON object with a string "custom_id" the line is an OpenAI Batch error
// line (CodeUnrenderable; openAI is true: it belongs in the errors file);
// otherwise it is
//
//	{"index":N,"error":"cannot render item: …","sample_id":"<hex of the id>"}
func UnrenderableLine(it FinishedItem, reason string) (line []byte, openAI bool) {
	id := it.ID
	if id == nil {
		id = it.SampleID[:]
	}
	msg := "cannot render item: " + reason
	if fields, err := parseObject(bytes.Trim(it.Payload, jsonSpace)); err == nil {
		if v := findField(fields, KeyCustomID); v != nil {
			var customID string
			if json.Unmarshal(v, &customID) == nil {
				var b bytes.Buffer
				b.WriteString(`{"id":`)
				b.Write(jsonString("batch_req_" + hex.EncodeToString(id)))
				b.WriteString(`,"custom_id":`)
				b.Write(jsonString(customID))
				b.WriteString(`,"response":null,"error":{"code":`)
				b.Write(jsonString(CodeUnrenderable))
				b.WriteString(`,"message":`)
				b.Write(jsonString(msg))
				b.WriteString(`}}`)
				return b.Bytes(), true
			}
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"index":%d,"%s":`, it.Index, KeyError)
	b.Write(jsonString(msg))
	b.WriteString(`,"` + KeySampleID + `":`)
	b.Write(jsonString(hex.EncodeToString(id)))
	b.WriteByte('}')
	return b.Bytes(), false
}

// RenderLine is OutputLine that never fails: an item OutputLine cannot
// render becomes its UnrenderableLine (unrenderable is true; isError when
// it is an OpenAI Batch error line).
func RenderLine(it FinishedItem) (line []byte, isError, unrenderable bool) {
	line, isError, err := OutputLine(it)
	if err == nil {
		return line, isError, false
	}
	line, isError = UnrenderableLine(it, err.Error())
	return line, isError, true
}

// AppendRenderLine appends RenderLine's line of it to dst and returns the
// extended slice, with RenderLine's isError and unrenderable: a caller that
// renders many lines renders them into one buffer.
func AppendRenderLine(dst []byte, it FinishedItem) (out []byte, isError, unrenderable bool) {
	in := it.Parsed
	if in == nil {
		in = ParseInput(it.Payload)
	}
	out, isError, err := in.appendOutputLine(dst, it)
	if err == nil {
		return out, isError, false
	}
	line, isError := UnrenderableLine(it, err.Error())
	return append(dst, line...), isError, true
}

// OutputSummary counts what an OutputDir wrote.
type OutputSummary struct {
	// Results and Errors count the lines of ResultsFile and ErrorsFile.
	Results, Errors uint64
	// Done, Dead and Cancelled count the finished items written: Dead the
	// items that failed, Cancelled those that never ran because their run
	// was cancelled.
	Done, Dead, Cancelled uint64
	// Unrenderable counts the finished items written as an
	// UnrenderableLine (included in Done and Dead).
	Unrenderable uint64
}

// String is e.g. "results.jsonl: 98 lines, errors.jsonl: 2 lines (98 done, 2 failed)",
// with ", N cancelled" before the parenthesis closes when some items were
// cancelled, followed by "; 1 item could not be rendered (see its error
// line)" when some could not.
func (s OutputSummary) String() string {
	str := fmt.Sprintf("%s: %d lines, %s: %d lines (%d done, %d failed", ResultsFile, s.Results, ErrorsFile, s.Errors, s.Done, s.Dead)
	if s.Cancelled > 0 {
		str += fmt.Sprintf(", %d cancelled", s.Cancelled)
	}
	str += ")"
	if s.Unrenderable > 0 {
		str += fmt.Sprintf("; %d item(s) could not be rendered (see their error lines)", s.Unrenderable)
	}
	return str
}

// OutputDir writes a run's output files into a directory: ResultsFile and
// ErrorsFile, each atomically (see AtomicWriter). Add items in input order,
// then Commit; Abort (or a failed Commit) leaves the previous files as they
// were. An OutputDir is not safe for concurrent use.
type OutputDir struct {
	dir             string
	results, errors *AtomicWriter
	sum             OutputSummary
	// openAI is set once an OpenAI Batch item was written: the run is in
	// that format, and an unrenderable item's line goes to ErrorsFile.
	openAI bool
}

// CreateOutputDir creates dir (and its parents) if needed and starts both
// files.
func CreateOutputDir(dir string) (*OutputDir, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: empty output directory", ErrInvalidConfig)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("batch: output directory: %w", err)
	}
	rw, err := NewAtomicWriter(filepath.Join(dir, ResultsFile), 0o644)
	if err != nil {
		return nil, err
	}
	ew, err := NewAtomicWriter(filepath.Join(dir, ErrorsFile), 0o644)
	if err != nil {
		_ = rw.Abort()
		return nil, err
	}
	return &OutputDir{dir: dir, results: rw, errors: ew}, nil
}

// Add writes the output line of one finished item (see OutputLine). An item
// OutputLine cannot render is written as its UnrenderableLine, in ErrorsFile
// when it is an OpenAI Batch error line or the run is in the OpenAI Batch
// format (an OpenAI Batch item was added before), else in ResultsFile; the
// only errors are write errors.
func (o *OutputDir) Add(it FinishedItem) error {
	line, isErr, bad := RenderLine(it)
	if bad {
		o.sum.Unrenderable++
		isErr = isErr || o.openAI
	} else if isErr || isOpenAILine(line) {
		o.openAI = true
	}
	w := o.results
	if isErr {
		w = o.errors
		o.sum.Errors++
	} else {
		o.sum.Results++
	}
	switch {
	case it.Done:
		o.sum.Done++
	case it.Cancelled:
		o.sum.Cancelled++
	default:
		o.sum.Dead++
	}
	if _, err := w.Write(append(line, '\n')); err != nil {
		return err
	}
	return nil
}

// isOpenAILine reports whether an output line is an OpenAI Batch output
// line (it starts with the "id":"batch_req_ member).
func isOpenAILine(line []byte) bool { return bytes.HasPrefix(line, []byte(`{"id":"batch_req_`)) }

// Summary returns what was added so far.
func (o *OutputDir) Summary() OutputSummary { return o.sum }

// Commit puts both files in place: the errors file first, then the results
// file. On failure the files not yet committed are left as they were.
func (o *OutputDir) Commit() error {
	if err := o.errors.Commit(); err != nil {
		_ = o.results.Abort()
		return err
	}
	return o.results.Commit()
}

// Abort discards both files; a no-op after Commit.
func (o *OutputDir) Abort() {
	_ = o.results.Abort()
	_ = o.errors.Abort()
}
