// Package hint implements worker.ComputeHint for the places a worker's
// machine can be taken away from: EC2 spot instances (AWS), preemptible and
// spot Compute Engine VMs (GCP), and processes stopped with SIGTERM or
// SIGINT (Kubernetes, systemd, an operator).
//
// The cloud hints talk plain HTTP to the instance metadata service; no cloud
// SDK is imported. Each turns the provider's notice into a worker.Notice
// whose Deadline leaves a margin before the machine goes: the drain budget
// is half the notice the provider promises (AWS: 120 s notice, 60 s drain;
// GCP: 30 s notice, 15 s drain).
package hint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/worker"
)

var (
	// ErrInvalidConfig is wrapped by every Validate error.
	ErrInvalidConfig = errors.New("hint: invalid config")
	// ErrWatching is returned by a second call of Watch.
	ErrWatching = errors.New("hint: Watch was already called")
	// ErrClosed is returned by Watch after Close.
	ErrClosed = errors.New("hint: closed")
	// ErrBadResponse wraps a metadata answer of an unexpected shape.
	ErrBadResponse = errors.New("hint: unexpected metadata response")
)

// Provider notice leads and drain budgets.
const (
	// AWSNoticeLead is the notice EC2 gives before it reclaims a spot
	// instance; AWSDrainBudget is the drain deadline targeted after it.
	AWSNoticeLead  = 120 * time.Second
	AWSDrainBudget = 60 * time.Second
	// GCPNoticeLead is the notice Compute Engine gives before it stops a
	// preemptible or spot VM; GCPDrainBudget is the drain deadline targeted
	// after it.
	GCPNoticeLead  = 30 * time.Second
	GCPDrainBudget = 15 * time.Second
)

// maxBody caps what is read of a metadata answer.
const maxBody = 64 << 10

// checkBaseURL accepts an absolute http or https URL without query or
// fragment.
func checkBaseURL(field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: %s %q: %v", ErrInvalidConfig, field, raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%w: %s %q: want http(s)://host[:port][/path]", ErrInvalidConfig, field, raw)
	}
	return nil
}

// checkAtLeast requires got >= least.
func checkAtLeast(field string, got, least time.Duration) error {
	if got < least {
		return fmt.Errorf("%w: %s must be at least %v, got %v", ErrInvalidConfig, field, least, got)
	}
	return nil
}

// checkPositive requires got > 0.
func checkPositive(field string, got time.Duration) error {
	if got <= 0 {
		return fmt.Errorf("%w: %s must be positive, got %v", ErrInvalidConfig, field, got)
	}
	return nil
}

// firstError returns the first non-nil error of errs: a Validate lists its
// checks in field order and reports the first problem.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkBudget requires 0 < budget <= lead.
func checkBudget(budget, lead time.Duration) error {
	if lead <= 0 {
		return fmt.Errorf("%w: Lead must be positive, got %v", ErrInvalidConfig, lead)
	}
	if budget <= 0 || budget > lead {
		return fmt.Errorf("%w: Budget must be in (0, Lead=%v], got %v", ErrInvalidConfig, lead, budget)
	}
	return nil
}

// metadataClient is an HTTP client for a link-local metadata service: it
// never uses a proxy and dials quickly.
func metadataClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// readBody reads at most maxBody bytes of r and closes it.
func readBody(r io.ReadCloser) ([]byte, error) {
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxBody+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxBody {
		return nil, fmt.Errorf("%w: body larger than %d bytes", ErrBadResponse, maxBody)
	}
	return b, nil
}

// earliest returns the earlier of a and b, ignoring a zero b.
func earliest(a, b time.Time) time.Time {
	if !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// watcher is what the metadata hints share: an HTTP client for the metadata
// server, a logger, and the once-only start of the goroutine that watches.
type watcher struct {
	client   *http.Client
	log      hclog.Logger
	watching atomic.Bool
}

// newWatcher fills in a metadata client and a null logger when none is given.
func newWatcher(client *http.Client, log hclog.Logger, name string) watcher {
	if client == nil {
		client = metadataClient()
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return watcher{client: client, log: log.Named(name)}
}

// start runs the watch loop of spec (poll) in a goroutine that delivers at
// most one notice on the returned channel and closes it; a second call is
// ErrWatching.
func (w *watcher) start(ctx context.Context, spec pollSpec) (<-chan worker.Notice, error) {
	if !w.watching.CompareAndSwap(false, true) {
		return nil, ErrWatching
	}
	ch := make(chan worker.Notice, 1)
	go w.poll(ctx, ch, spec)
	return ch, nil
}
