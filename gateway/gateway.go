package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/store"
)

// Cluster is what a gateway needs of a coordinator client
// (*coordclient.Client implements it).
type Cluster interface {
	runs.Coordinator
	CancelRun(ctx context.Context, req *rolloutv1.CancelRunRequest) (*rolloutv1.CancelRunResponse, error)
	DeleteRun(ctx context.Context, req *rolloutv1.DeleteRunRequest) (*rolloutv1.DeleteRunResponse, error)
}

// Defaults (OpenAI's limits where OpenAI states one).
const (
	DefaultMaxFileBytes = 200 << 20
	DefaultMaxRequests  = 50_000
	DefaultWindow       = 24 * time.Hour
	// DefaultResumeAfter is how long a batch may stay "validating" before
	// a gateway that reads it fails it (the gateway creating it died before
	// answering, so its client made it again).
	DefaultResumeAfter = 2 * time.Minute
	// DefaultSweepEvery: see Config.SweepEvery.
	DefaultSweepEvery = 30 * time.Second
	// DefaultMinUploadRate and DefaultUploadGrace: see Config.MinUploadRate.
	DefaultMinUploadRate = 16 << 10
	DefaultUploadGrace   = 30 * time.Second
	// maxJSONBody bounds a JSON request body (batches.create).
	maxJSONBody = 1 << 20
	// maxMetadata bounds a batch's metadata as OpenAI does.
	maxMetadataPairs, maxMetadataKey, maxMetadataValue = 16, 64, 512
)

// Config configures a gateway.
type Config struct {
	// Cluster is the rollout cluster the gateway submits to; Store holds
	// the gateway's files and records and is every batch's run store.
	Cluster Cluster
	Store   *store.Store
	// Keys authenticates requests.
	Keys *Keys
	// MaxFileBytes bounds an upload (413 over it); MaxRequests the request
	// lines of one input file (400 over it).
	MaxFileBytes int64
	MaxRequests  int
	// Window is how long the one completion window, "24h", lasts (tests
	// shorten it).
	Window time.Duration
	// MaxFailures is how many failed attempts fail a request (the run's
	// max_failures).
	MaxFailures uint32
	// TenantPerKey submits each batch's run for its API key's name as the
	// run's tenant (RunSpec.tenant), so that each key gets its fair share
	// and its quotas; the cluster honours it from a gateway (or admin)
	// certificate. False: every run is the tenant of the gateway's own
	// certificate. Either way a batch runs at its key's priority.
	TenantPerKey bool
	// CallTimeout bounds each call to the cluster.
	CallTimeout time.Duration
	// ResumeAfter: see DefaultResumeAfter.
	ResumeAfter time.Duration
	// SweepEvery is how often the gateway moves on the batches no client
	// reads (expiry, finalizing, a dead gateway's submit): every unfinished
	// batch of every key, as a read would (0: never; reads still do).
	SweepEvery time.Duration
	// KeepRuns keeps a finalized batch's run in the ledger, and its input
	// and result objects in the store. By default both are deleted once the
	// output and error files are written (they hold every result), so the
	// ledger holds only unfinished batches.
	KeepRuns bool
	// MinUploadRate (bytes per second) and UploadGrace bound how slowly a
	// request body may arrive: by UploadGrace+t after the handler starts
	// reading it, at least t*MinUploadRate bytes must have come, or the
	// request is cut with a 408 (code "upload_too_slow"), so that a client
	// that trickles its upload (or stops sending) does not hold a
	// connection and an upload open for ever. 0 MinUploadRate: no minimum.
	MinUploadRate int64
	UploadGrace   time.Duration
	// Now is the clock (time.Now when nil).
	Now    func() time.Time
	Logger hclog.Logger
	// Registerer, when set, gets the gateway's metrics
	// (rollout_gateway_*).
	Registerer prometheus.Registerer
}

// DefaultConfig returns the defaults; Cluster, Store and Keys must be set.
func DefaultConfig() Config {
	return Config{
		MaxFileBytes: DefaultMaxFileBytes,
		MaxRequests:  DefaultMaxRequests,
		Window:       DefaultWindow,
		MaxFailures:  runs.DefaultMaxFailures,
		CallTimeout:  runs.DefaultTimeout,
		ResumeAfter:  DefaultResumeAfter,
		SweepEvery:   DefaultSweepEvery,

		MinUploadRate: DefaultMinUploadRate,
		UploadGrace:   DefaultUploadGrace,
	}
}

// Validate reports the first problem (ErrInvalidConfig).
func (c *Config) Validate() error {
	var what string
	switch {
	case c.Cluster == nil:
		what = "Cluster is nil"
	case c.Store == nil:
		what = "Store is nil"
	case c.Keys == nil:
		what = "Keys is nil"
	case c.MaxFileBytes <= 0:
		what = fmt.Sprintf("MaxFileBytes must be positive, got %d", c.MaxFileBytes)
	case c.MaxRequests <= 0:
		what = fmt.Sprintf("MaxRequests must be positive, got %d", c.MaxRequests)
	case c.Window <= 0:
		what = fmt.Sprintf("Window must be positive, got %v", c.Window)
	case c.MaxFailures == 0:
		what = "MaxFailures must be positive"
	case c.CallTimeout <= 0:
		what = fmt.Sprintf("CallTimeout must be positive, got %v", c.CallTimeout)
	case c.ResumeAfter <= 0:
		what = fmt.Sprintf("ResumeAfter must be positive, got %v", c.ResumeAfter)
	case c.SweepEvery < 0:
		what = fmt.Sprintf("SweepEvery must not be negative, got %v", c.SweepEvery)
	case c.MinUploadRate < 0:
		what = fmt.Sprintf("MinUploadRate must not be negative, got %d", c.MinUploadRate)
	case c.MinUploadRate > 0 && c.UploadGrace <= 0:
		what = fmt.Sprintf("UploadGrace must be positive with a MinUploadRate, got %v", c.UploadGrace)
	default:
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidConfig, what)
}

// Server is a gateway. Create it with New; serve its Handler; Close waits
// for the background work (finalizing, resubmitting) it started.
type Server struct {
	cfg Config
	log hclog.Logger
	mux *http.ServeMux

	// ctx bounds background work; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	met *metrics

	mu sync.Mutex
	// busy holds the batches this process is finalizing or submitting.
	busy map[string]bool
	// limit is the cluster's per-item limit as last asked (0: unknown),
	// and when it was asked.
	limit   int
	limitAt time.Time
}

// How long the cluster's per-item limit is kept, and how long an upload
// waits for the cluster to say it.
const (
	limitFor        = time.Minute
	limitRetryAfter = 10 * time.Second
	limitAskTimeout = 5 * time.Second
)

// itemLimit is the cluster's per-item limit (the largest request line a
// batch may have), asked of the cluster at most once a minute. While the
// cluster cannot say, the last answer stands; with none it is 0 (no
// check at upload: batches.create checks again when it submits).
func (s *Server) itemLimit(ctx context.Context) int {
	s.mu.Lock()
	limit, at := s.limit, s.limitAt
	s.mu.Unlock()
	if !at.IsZero() && (time.Since(at) < limitFor || (limit == 0 && time.Since(at) < limitRetryAfter)) {
		return limit
	}
	cctx, cancel := context.WithTimeout(ctx, min(s.cfg.CallTimeout, limitAskTimeout))
	defer cancel()
	var lerr error
	resp, err := s.cfg.Cluster.Cluster(cctx, "")
	if err == nil {
		var l validate.Limits
		if l, lerr = validate.FromProto(resp.GetLimits()); lerr == nil {
			limit = l.MaxPayloadBytes
		}
	} else {
		lerr = err
	}
	if lerr != nil {
		s.log.Warn("asking the cluster for its per-item limit (an upload's lines are checked against it)", "error", lerr, "using", limit)
	}
	s.mu.Lock()
	s.limit, s.limitAt = limit, time.Now()
	s.mu.Unlock()
	return limit
}

// New returns a gateway for cfg.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	var met *metrics
	if cfg.Registerer != nil {
		var err error
		if met, err = newMetrics(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("%w: Registerer: %v", ErrInvalidConfig, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, log: log, ctx: ctx, cancel: cancel, busy: map[string]bool{}, met: met}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/files", s.auth(s.uploadFile))
	mux.HandleFunc("GET /v1/files", s.auth(s.listFiles))
	mux.HandleFunc("GET /v1/files/{id}", s.auth(s.getFile))
	mux.HandleFunc("GET /v1/files/{id}/content", s.auth(s.fileContent))
	mux.HandleFunc("DELETE /v1/files/{id}", s.auth(s.deleteFile))
	mux.HandleFunc("POST /v1/batches", s.auth(s.createBatch))
	mux.HandleFunc("GET /v1/batches", s.auth(s.listBatches))
	mux.HandleFunc("GET /v1/batches/{id}", s.auth(s.getBatch))
	mux.HandleFunc("POST /v1/batches/{id}/cancel", s.auth(s.cancelBatch))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest,
			Message: fmt.Sprintf("Invalid URL (%s %s): this server serves the OpenAI Batch API (/v1/files, /v1/batches)", r.Method, r.URL.Path)})
	})
	s.mux = mux
	if cfg.SweepEvery > 0 {
		s.wg.Add(1)
		go s.sweepLoop()
	}
	return s, nil
}

// sweepLoop runs Sweep every SweepEvery until Close.
func (s *Server) sweepLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			if err := s.Sweep(s.ctx); err != nil && s.ctx.Err() == nil {
				s.log.Warn("sweeping the unfinished batches", "error", err)
			}
		}
	}
}

// Sweep reads every unfinished batch as a client's read would, so that a
// batch nobody polls still expires, is finalized, or fails after its
// gateway died while creating it. Several gateways may sweep at once: every step
// is idempotent.
func (s *Server) Sweep(ctx context.Context) error {
	var ids []string
	err := s.cfg.Store.List(ctx, activePrefix, func(o store.Object) error {
		ids = append(ids, o.Key[len(activePrefix):])
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !validID(id, "batch_") {
			continue
		}
		var rec batchRecord
		if err := getJSON(ctx, s.cfg.Store, batchKey(id), &rec); err != nil {
			if isNotFound(err) {
				_ = s.cfg.Store.Delete(ctx, activeKey(id))
				continue
			}
			s.log.Warn("sweep: reading a batch", "id", id, "error", err)
			continue
		}
		if rec.Final != nil || rec.Status == recFailed {
			_ = s.cfg.Store.Delete(ctx, activeKey(id))
			continue
		}
		if _, err := s.view(ctx, &rec); err != nil {
			s.log.Warn("sweep: a batch", "id", id, "error", err)
		}
	}
	return nil
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.met.instrument(s.mux) }

// Close stops the background work and waits for it.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
}

// ownerKey is the request context key of the authenticated Key.
type ownerKey struct{}

// ownerOf is the name of the request's key.
func ownerOf(r *http.Request) string { return keyOf(r).Name }

// keyOf is the request's key (its name and priority).
func keyOf(r *http.Request) Key { return r.Context().Value(ownerKey{}).(Key) }

// auth checks the bearer key and passes its name on to h in the request
// context; a missing or unknown key is a 401 in OpenAI's shape.
func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		hdr := r.Header.Get("Authorization")
		key, ok := strings.CutPrefix(hdr, "Bearer ")
		key = strings.TrimSpace(key)
		if hdr == "" || !ok || key == "" {
			writeError(w, &apiError{Status: http.StatusUnauthorized, Type: typeInvalidRequest,
				Message: "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."})
			return
		}
		k, found := s.cfg.Keys.Key(key)
		if !found {
			writeError(w, &apiError{Status: http.StatusUnauthorized, Type: typeInvalidRequest, Code: "invalid_api_key",
				Message: fmt.Sprintf("Incorrect API key provided: %s.", redact(key))})
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), ownerKey{}, k)))
	}
}

// redact shows the start and end of a key, as OpenAI's 401 does.
func redact(key string) string {
	if len(key) <= 8 {
		return strings.Repeat("*", len(key))
	}
	return key[:3] + strings.Repeat("*", min(len(key)-7, 20)) + key[len(key)-4:]
}

// now is the gateway's clock in Unix seconds.
func (s *Server) now() int64 { return s.cfg.Now().Unix() }

// background runs fn for batch id unless this process is already at it.
func (s *Server) background(id string, fn func(ctx context.Context)) {
	s.mu.Lock()
	if s.busy[id] || s.ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	s.busy[id] = true
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.busy, id)
			s.mu.Unlock()
		}()
		fn(s.ctx)
	}()
}

// isBusy reports whether this process is submitting or finalizing id.
func (s *Server) isBusy(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.busy[id]
}
