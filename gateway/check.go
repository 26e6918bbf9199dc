package gateway

import (
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
	// maxItemBytes, when positive, is the cluster's per-item limit
	// (validate.Limits.MaxPayloadBytes): a request line longer than that
	// could never be an item of the batch's run.
	maxItemBytes int

	ids      map[string]int
	model    string
	requests int
	errs     []batchError
	more     int
}

// newChecker checks request lines for a batch of endpoint ("" for an
// upload: any endpoint), at most maxRequests of them, each at most
// maxItemBytes (0: unbounded).
func newChecker(endpoint string, maxRequests, maxItemBytes int) *checker {
	return &checker{endpoint: endpoint, maxRequests: maxRequests, maxItemBytes: maxItemBytes, ids: map[string]int{}}
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

// read checks every line of r, one input file, as batch's Scanner reads
// runs' inputs (blank lines skipped, a line over batch.DefaultMaxLineBytes
// invalid). The error is only for r failing.
func (c *checker) read(r io.Reader) error {
	cfg := batch.DefaultConfig()
	cfg.MaxReportedErrors = 0
	cfg.Open = func(string) (io.ReadCloser, error) { return io.NopCloser(r), nil }
	sc, err := batch.NewScanner([]string{"input"}, cfg)
	if err != nil {
		return err
	}
	defer sc.Close()
	for {
		rec, err := sc.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		c.record(rec)
	}
}

// record checks one non-blank line.
func (c *checker) record(rec batch.Record) {
	n := rec.Line
	c.requests++
	if c.requests == c.maxRequests+1 {
		c.fail(n, "too_many_requests", "", "the file has more than %d requests, the limit of one batch", c.maxRequests)
	}
	if rec.Err != nil {
		c.fail(n, "invalid_request", "", "line %d: %s", n, rec.Err.Reason)
		return
	}
	req := rec.Request
	if c.maxItemBytes > 0 && len(rec.Raw) > c.maxItemBytes {
		c.fail(n, "request_too_large", "", "line %d: the request is %d bytes, over the cluster's limit of %d bytes per request", n, len(rec.Raw), c.maxItemBytes)
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
