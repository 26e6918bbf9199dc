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
	return firstError(
		checkBaseURL("BaseURL", c.BaseURL),
		checkAtLeast("WaitTimeout", c.WaitTimeout, time.Second),
		checkAtLeast("RetryInterval", c.RetryInterval, time.Millisecond),
		checkPositive("RequestTimeout", c.RequestTimeout),
		checkBudget(c.Budget, c.Lead),
	)
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
	etag, wait := "", false // the first read is immediate, then long polls
	return g.start(ctx, pollSpec{
		what:   "preemption flag",
		notice: "preemption notice",
		url:    g.cfg.BaseURL,
		retry:  g.cfg.RetryInterval,
		read: func(ctx context.Context) (*worker.Notice, error) {
			preempted, tag, err := g.read(ctx, wait, etag)
			switch {
			case err != nil:
				return nil, err
			case preempted:
				return g.notice(time.Now()), nil
			}
			etag, wait = tag, true // not yet: wait for the value to change
			return nil, nil
		},
	})
}

// notice is the notice for a preemption read at now: Compute Engine gives
// no time, so the VM goes the full Lead after now.
func (g *GCP) notice(now time.Time) *worker.Notice {
	return &worker.Notice{
		Provider:  worker.ProviderGCP,
		Reason:    "Compute Engine instance/preempted is TRUE",
		Received:  now,
		Terminate: now.Add(g.cfg.Lead),
		Deadline:  now.Add(g.cfg.Budget),
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
	resp, body, err := g.fetch(ctx, timeout, http.MethodGet, u, "GET "+GCPPreemptedPath, GCPFlavorHeader, GCPFlavor)
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
