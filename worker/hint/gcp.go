package hint

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/worker"
)

// GCP metadata server path and headers.
const (
	DefaultGCPBaseURL = "http://metadata.google.internal"
	GCPPreemptedPath  = "/computeMetadata/v1/instance/preempted"
	GCPFlavorHeader   = "Metadata-Flavor"
	GCPFlavor         = "Google"
)

// GCP defaults.
const (
	// DefaultGCPWaitTimeout is the timeout_sec of one wait_for_change
	// request.
	DefaultGCPWaitTimeout = 60 * time.Second
	// DefaultGCPRetryInterval is the pause after a failed request.
	DefaultGCPRetryInterval = time.Second
)

// GCPConfig configures the Compute Engine preemption hint.
type GCPConfig struct {
	// BaseURL is the metadata server (DefaultGCPBaseURL); tests point it
	// at a fake.
	BaseURL string
	// WaitTimeout is how long one wait_for_change request may hang
	// (timeout_sec, whole seconds, at least 1s).
	WaitTimeout time.Duration
	// RetryInterval is the pause after a failed request.
	RetryInterval time.Duration
	// RequestTimeout bounds the first, immediate read.
	RequestTimeout time.Duration
	// Lead is the notice Compute Engine gives (GCPNoticeLead) and Budget the
	// drain deadline targeted (GCPDrainBudget).
	Lead, Budget time.Duration
	// Client makes the requests; nil means a client that never uses a
	// proxy.
	Client *http.Client
	// Logger receives the hint's logs; nil discards them.
	Logger hclog.Logger
}

// DefaultGCPConfig returns the production configuration.
func DefaultGCPConfig() GCPConfig {
	return GCPConfig{
		BaseURL:        DefaultGCPBaseURL,
		WaitTimeout:    DefaultGCPWaitTimeout,
		RetryInterval:  DefaultGCPRetryInterval,
		RequestTimeout: DefaultRequestTimeout,
		Lead:           GCPNoticeLead,
		Budget:         GCPDrainBudget,
	}
}

// Validate reports the first problem with c, naming the field.
func (c GCPConfig) Validate() error {
	if err := checkBaseURL("BaseURL", c.BaseURL); err != nil {
		return err
	}
	if c.WaitTimeout < time.Second {
		return fmt.Errorf("%w: WaitTimeout must be at least 1s, got %v", ErrInvalidConfig, c.WaitTimeout)
	}
	if c.RetryInterval < time.Millisecond {
		return fmt.Errorf("%w: RetryInterval must be at least 1ms, got %v", ErrInvalidConfig, c.RetryInterval)
	}
	if c.RequestTimeout <= 0 {
		return fmt.Errorf("%w: RequestTimeout must be positive, got %v", ErrInvalidConfig, c.RequestTimeout)
	}
	return checkBudget(c.Budget, c.Lead)
}

// GCP watches the Compute Engine metadata server for preemption: it reads
// instance/preempted (header Metadata-Flavor: Google) once, then hangs on
// it with wait_for_change=true and the last ETag, so the server answers as
// soon as the value changes. The body is TRUE once the VM is being
// preempted, FALSE before.
type GCP struct {
	watcher
	cfg GCPConfig
}

var _ worker.ComputeHint = (*GCP)(nil)

// NewGCP returns a GCP hint for cfg.
func NewGCP(cfg GCPConfig) (*GCP, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &GCP{watcher: newWatcher(cfg.Client, cfg.Logger, "hint-gcp"), cfg: cfg}, nil
}

// Watch waits until the VM is preempted (delivered once; then the channel
// closes) or ctx ends. Metadata errors are logged and retried. It may be
// called once.
func (g *GCP) Watch(ctx context.Context) (<-chan worker.Notice, error) {
	return g.start(ctx, g.wait)
}

func (g *GCP) wait(ctx context.Context, ch chan<- worker.Notice) {
	defer close(ch)
	etag, wait := "", false
	failures := 0
	for ctx.Err() == nil {
		preempted, tag, err := g.read(ctx, wait, etag)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			if failures == 1 {
				g.log.Warn("reading the preemption flag failed; retrying", "url", g.cfg.BaseURL, "error", err)
			} else {
				g.log.Debug("reading the preemption flag failed", "failures", failures, "error", err)
			}
			t := time.NewTimer(g.cfg.RetryInterval)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		}
		failures = 0
		if preempted {
			now := time.Now()
			n := worker.Notice{
				Provider:  worker.ProviderGCP,
				Reason:    "Compute Engine instance/preempted is TRUE",
				Received:  now,
				Terminate: now.Add(g.cfg.Lead),
				Deadline:  now.Add(g.cfg.Budget),
			}
			g.log.Warn("preemption notice", "drain_deadline", n.Deadline)
			ch <- n // buffered, read once
			return
		}
		etag, wait = tag, true
	}
}

// read reads instance/preempted: at once unless wait, else waiting for a
// change (wait_for_change=true) from the value with ETag etag (the server
// answers at once when the value no longer has it, or after WaitTimeout
// unchanged; without an ETag it waits for the next change).
func (g *GCP) read(ctx context.Context, wait bool, etag string) (preempted bool, tag string, err error) {
	u := strings.TrimRight(g.cfg.BaseURL, "/") + GCPPreemptedPath
	timeout := g.cfg.RequestTimeout
	if wait {
		q := url.Values{"wait_for_change": {"true"}, "timeout_sec": {strconv.Itoa(int(g.cfg.WaitTimeout / time.Second))}}
		if etag != "" {
			q.Set("last_etag", etag)
		}
		u += "?" + q.Encode()
		timeout = g.cfg.WaitTimeout + g.cfg.RequestTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
	if err != nil {
		return false, "", err
	}
	req.Header.Set(GCPFlavorHeader, GCPFlavor)
	resp, err := g.client.Do(req)
	if err != nil {
		return false, "", fmt.Errorf("hint: GET %s: %w", GCPPreemptedPath, err)
	}
	body, err := readBody(resp.Body)
	if err != nil {
		return false, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return false, "", fmt.Errorf("%w: GET %s: HTTP %d", ErrBadResponse, GCPPreemptedPath, resp.StatusCode)
	}
	if resp.Header.Get(GCPFlavorHeader) != GCPFlavor {
		return false, "", fmt.Errorf("%w: GET %s: answer without %s: %s (not a metadata server?)", ErrBadResponse, GCPPreemptedPath, GCPFlavorHeader, GCPFlavor)
	}
	switch v := strings.TrimSpace(string(body)); v {
	case "TRUE":
		return true, resp.Header.Get("ETag"), nil
	case "FALSE":
		return false, resp.Header.Get("ETag"), nil
	default:
		return false, "", fmt.Errorf("%w: GET %s: body %q (want TRUE or FALSE)", ErrBadResponse, GCPPreemptedPath, truncate(v, 64))
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
