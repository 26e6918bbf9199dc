package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// errUploadTooSlow ends a request body that arrived slower than
// Config.MinUploadRate allows.
var errUploadTooSlow = errors.New("the request body arrived too slowly")

// pacedBody reads a request body under a moving read deadline: by
// grace+t after start, at least t*rate bytes must have come. The deadline
// is the connection's (http.ResponseController), so a client that sends
// nothing at all is cut too.
type pacedBody struct {
	body  io.ReadCloser
	rc    *http.ResponseController
	start time.Time
	grace time.Duration
	rate  int64
	n     int64
	// slow is set once the deadline cut the body; ended once it ended.
	slow, ended bool
}

// pace puts r's body under Config.MinUploadRate; the returned pacedBody
// says whether it was cut (nil when there is no minimum). done clears the
// deadline: call it once the body is read, before any slow work (over
// HTTP/1 the server's read of the next request starts at the body's end
// and would otherwise time out, cancelling the request's context).
func (s *Server) pace(w http.ResponseWriter, r *http.Request) (p *pacedBody, done func()) {
	if s.cfg.MinUploadRate <= 0 || r.Body == nil || r.Body == http.NoBody {
		return nil, func() {}
	}
	p = &pacedBody{body: r.Body, rc: http.NewResponseController(w), start: time.Now(), grace: s.cfg.UploadGrace, rate: s.cfg.MinUploadRate}
	r.Body = p
	return p, func() { _ = p.rc.SetReadDeadline(time.Time{}) }
}

func (p *pacedBody) Read(b []byte) (int, error) {
	switch {
	case p.slow:
		return 0, errUploadTooSlow
	case p.ended:
		return p.body.Read(b)
	}
	due := p.start.Add(p.grace + time.Duration(float64(p.n)/float64(p.rate)*float64(time.Second)))
	// A writer that cannot take a deadline (not a server's) is not paced.
	_ = p.rc.SetReadDeadline(due)
	n, err := p.body.Read(b)
	p.n += int64(n)
	switch {
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		p.slow = true
		return n, errUploadTooSlow
	case err != nil:
		p.ended = true
		_ = p.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (p *pacedBody) Close() error { return p.body.Close() }

// tooSlow is the 408 for a body the deadline cut, or nil.
func (p *pacedBody) tooSlow() *apiError {
	if p == nil || !p.slow {
		return nil
	}
	took := time.Since(p.start).Round(time.Millisecond)
	return &apiError{Status: http.StatusRequestTimeout, Type: typeInvalidRequest, Code: "upload_too_slow",
		Message: fmt.Sprintf("the request body arrived too slowly: %d bytes in %v, under the gateway's minimum of %d bytes/s after %v (rollout gateway --upload-min-rate, --upload-grace)",
			p.n, took, p.rate, p.grace)}
}
