package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/rollout/rollout/batch"
)

// The endpoints a batch may name (OpenAI's Batch API endpoints that a
// rollout worker serves).
const (
	endpointChat        = "/v1/chat/completions"
	endpointCompletions = "/v1/completions"
	endpointEmbeddings  = "/v1/embeddings"
)

var endpoints = []string{endpointChat, endpointCompletions, endpointEmbeddings}

func knownEndpoint(e string) bool {
	for _, x := range endpoints {
		if e == x {
			return true
		}
	}
	return false
}

// maxLineBytes bounds one request line of an input file.
const maxLineBytes = batch.DefaultMaxLineBytes

// maxBatchErrors bounds the errors a failed batch lists (the count of the
// rest is said in a last entry).
const maxBatchErrors = 1000

// checker checks the request lines of an input file, as OpenAI checks a
// batch's input: each line one request in the Batch format with a unique
// custom_id, a body naming a model, and (for a batch) the batch's endpoint
// and one model throughout.
type checker struct {
	// endpoint, when set, is the batch's: every line must name it.
	endpoint    string
	maxRequests int

	ids      map[string]int
	model    string
	requests int
	errs     []batchError
	more     int
}

func newChecker(endpoint string, maxRequests int) *checker {
	return &checker{endpoint: endpoint, maxRequests: maxRequests, ids: map[string]int{}}
}

func (c *checker) fail(line int, code, param, format string, args ...any) {
	if len(c.errs) >= maxBatchErrors {
		c.more++
		return
	}
	l := line
	e := batchError{Code: code, Message: fmt.Sprintf(format, args...), Line: &l}
	if param != "" {
		e.Param = &param
	}
	c.errs = append(c.errs, e)
}

// line checks line number n (1-based) of the file.
func (c *checker) line(n int, raw []byte) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return // blank lines are skipped, as the runs' reader skips them
	}
	c.requests++
	if c.requests == c.maxRequests+1 {
		c.fail(n, "too_many_requests", "", "the file has more than %d requests, the limit of one batch", c.maxRequests)
	}
	req, err := batch.ParseRequest(raw)
	if err != nil {
		c.fail(n, "invalid_request", "", "line %d: %s", n, trimLineErr(err))
		return
	}
	if req.Format != batch.FormatOpenAI {
		c.fail(n, "invalid_request", "", `line %d: not a Batch API request: want {"custom_id", "method": "POST", "url", "body"}`, n)
		return
	}
	if first, dup := c.ids[req.CustomID]; dup {
		c.fail(n, "duplicate_custom_id", "custom_id", "line %d: custom_id %q is also on line %d; each request needs its own", n, req.CustomID, first)
	} else {
		c.ids[req.CustomID] = n
	}
	if c.endpoint != "" && req.URL != c.endpoint {
		c.fail(n, "invalid_url", "url", "line %d: url %q is not the batch's endpoint %q", n, req.URL, c.endpoint)
	}
	var body struct {
		Model json.RawMessage `json:"model"`
	}
	_ = json.Unmarshal(req.Body, &body)
	var model string
	if len(body.Model) == 0 || json.Unmarshal(body.Model, &model) != nil || model == "" {
		c.fail(n, "missing_required_parameter", "body.model", "line %d: body.model must name the model (a non-empty string)", n)
		return
	}
	switch {
	case c.model == "":
		c.model = model
	case model != c.model && c.endpoint != "":
		c.fail(n, "mismatched_model", "body.model", "line %d: model %q differs from %q on the lines before; a batch runs one model", n, model, c.model)
	}
}

// errors returns the errors found, with a last entry counting those left
// out; and, when there is no request at all, says so.
func (c *checker) errors() []batchError {
	out := c.errs
	if c.requests == 0 && len(out) == 0 {
		out = append(out, batchError{Code: "empty_file", Message: "the file holds no request"})
	}
	if c.more > 0 {
		out = append(out, batchError{Code: "too_many_errors", Message: fmt.Sprintf("and %d more invalid lines", c.more)})
	}
	return out
}

// trimLineErr drops the package prefix of a batch line error.
func trimLineErr(err error) string {
	s := err.Error()
	if p := batch.ErrInvalidLine.Error() + ": "; len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// errLineTooLong: a line longer than maxLineBytes.
var errLineTooLong = errors.New("line too long")

// scanLines calls fn with each line of r (without its newline) and its
// 1-based number; a line over maxLineBytes ends it with an error naming it.
func scanLines(r io.Reader, fn func(n int, line []byte)) error {
	br := bufio.NewReaderSize(r, 1<<16)
	var long []byte
	for n := 1; ; n++ {
		long = long[:0]
		var line []byte
		for {
			chunk, err := br.ReadSlice('\n')
			if len(long)+len(chunk) > maxLineBytes+1 {
				return fmt.Errorf("%w: line %d is longer than %d bytes", errLineTooLong, n, maxLineBytes)
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				long = append(long, chunk...)
				continue
			}
			if long != nil && len(long) > 0 {
				line = append(long, chunk...)
			} else {
				line = chunk
			}
			if err == io.EOF {
				if len(line) > 0 {
					fn(n, line)
				}
				return nil
			}
			if err != nil {
				return err
			}
			break
		}
		fn(n, bytes.TrimSuffix(bytes.TrimSuffix(line, []byte{'\n'}), []byte{'\r'}))
	}
}
