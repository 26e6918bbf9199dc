package hint

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/rollout/rollout/worker"
)

// pollSpec is what a metadata hint gives the watch loop both providers
// share: how to read the metadata once and how to pace the reads.
type pollSpec struct {
	// what names the value read, for the logs ("preemption flag"), and
	// notice the log message of a notice read ("preemption notice").
	what, notice string
	// url is the metadata service, for the logs.
	url string
	// every paces the reads at a fixed rate (a ticker, AWS's polling).
	// Zero means a long poll: the next read starts at once after a good
	// read, and retry after a failed one.
	every time.Duration
	// retry is the pause after a failed read when every is zero.
	retry time.Duration
	// read reads the metadata once. It returns a notice when the machine is
	// being taken away, nil without error when not yet, and an error when
	// the metadata could not be read (logged and retried). It may keep
	// state between calls (a token, an ETag): one spec serves one Watch.
	read func(ctx context.Context) (*worker.Notice, error)
}

// poll runs the watch loop of spec: it reads until a notice is read
// (delivered on ch, which is buffered) or ctx ends, then closes ch. The
// first failure of a series is logged as a warning, the rest at debug
// level, and a good read after failures at info level.
func (w *watcher) poll(ctx context.Context, ch chan<- worker.Notice, spec pollSpec) {
	defer close(ch)
	var tick <-chan time.Time
	if spec.every > 0 {
		t := time.NewTicker(spec.every)
		defer t.Stop()
		tick = t.C
	}
	failures := 0
	for ctx.Err() == nil {
		n, err := spec.read(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			failures++
			if failures == 1 {
				w.log.Warn("reading the "+spec.what+" failed; retrying", "url", spec.url, "error", err)
			} else {
				w.log.Debug("reading the "+spec.what+" failed", "failures", failures, "error", err)
			}
		case n != nil:
			w.log.Warn(spec.notice, "reason", n.Reason, "drain_deadline", n.Deadline)
			ch <- *n // buffered, read once
			return
		default:
			if failures > 0 {
				w.log.Info(spec.what+" readable again", "after_failures", failures)
			}
			failures = 0
		}
		switch {
		case tick != nil:
			select {
			case <-ctx.Done():
				return
			case <-tick:
			}
		case err != nil:
			t := time.NewTimer(spec.retry)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// fetch makes one request to the metadata service, bounded by timeout, with
// header key set to value, and reads at most maxBody bytes of the answer.
// what names the request in a transport error ("GET /path").
func (w *watcher) fetch(ctx context.Context, timeout time.Duration, method, url, what, key, value string) (*http.Response, []byte, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, method, url, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set(key, value)
	resp, err := w.client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("hint: %s: %w", what, err)
	}
	body, err := readBody(resp.Body)
	return resp, body, err
}
