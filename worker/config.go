package worker

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/internal/limits"
)

// Config configures a Worker. Zero numeric and duration fields select their
// defaults; negative ones are invalid.
type Config struct {
	// ID is the worker's identity in the ledger (with mutual TLS, the name
	// in its certificate). Required: UTF-8, at most 128 bytes, no whitespace
	// or control characters.
	ID string
	// Kinds are the run kinds (RunSpec.kind) the backend runs, sent with
	// Register: the ledger gives the worker items of these kinds only
	// ("batch" names the default kind). Empty: every kind.
	Kinds []string
	// Models are the models (RunSpec.model) the backend serves, sent with
	// Register: the ledger gives the worker items of runs whose model is
	// one of them (or that name no model). Empty: every model. At most
	// limits.MaxWorkerModels, each non-empty printable UTF-8 of at most
	// limits.MaxModelBytes.
	Models []string
	// Concurrency is how many items run on the backend at once (default 8).
	Concurrency int
	// Backlog is how many items the worker holds at most, executing and
	// waiting together (default 2*Concurrency; at least Concurrency).
	Backlog int
	// ClaimWait is how long one Claim long-polls (default 5s).
	ClaimWait time.Duration
	// HeartbeatInterval is the time between heartbeats (default 1s).
	HeartbeatInterval time.Duration
	// ReportInterval is how often finished outcomes are flushed (default
	// 20ms); a batch of MaxReportBatch is flushed at once.
	ReportInterval time.Duration
	// MaxReportBatch caps the reports of one Report call (default 256).
	MaxReportBatch int
	// Steal lets an idle worker ask to steal work (DefaultConfig: true).
	Steal bool
	// DrainTimeout is the drain budget when Run's context ends, or when a
	// notice gives no deadline of its own (a signal hint is built with it):
	// the drain - nack unstarted items, finish or nack in-flight ones,
	// report, deregister - targets ending within it (default 25s).
	DrainTimeout time.Duration
	// ShutdownTimeout caps each step after the in-flight phase of a drain:
	// waiting for cancelled items, flushing reports, deregistering
	// (default 10s). Within the deadline a step gets the time left; past
	// it (or when forced) it still gets up to a second, to nack what it can.
	ShutdownTimeout time.Duration
	// ClaimHorizon sizes claims from measured throughput: once items have
	// completed, the worker holds at most enough items for ClaimHorizon at
	// its measured items/s (never fewer than Concurrency, never more than
	// Backlog); before the first completion it holds up to Backlog
	// (default 2s).
	ClaimHorizon time.Duration
	// Hints deliver preemption notices (see ComputeHint): a notice starts a
	// drain to the notice's deadline, as the end of Run's context does.
	Hints []ComputeHint
	// ReconcileInterval is the longest time between two reconciliations
	// with the ledger's OwnedItems (default 10s); they also happen at once
	// after claims with an unknown outcome and on term changes.
	ReconcileInterval time.Duration
	// RateWindow is the sliding window of the measured items/s (default 10s).
	RateWindow time.Duration
	// Logger receives the worker's logs. Nil discards them.
	Logger hclog.Logger
	// Recorder, when not nil, receives the history of the worker's
	// coordinator calls and of its epoch guard's decisions (see Recorder).
	Recorder Recorder
	// Observer, when not nil, receives timings and drain events (for
	// metrics; counters are in Worker.Stats).
	Observer Observer
	// OpenStore opens a run's object store from its URL (RunSpec.store)
	// the first time an item of a run with that store needs it; the worker
	// keeps it open until Run returns. Nil selects OpenStore (store.Open,
	// credentials from the environment).
	OpenStore StoreOpener
	// DataFaultBackoff and DataFaultMaxBackoff space out the failures of
	// items whose input cannot be read or checked: the n-th consecutive
	// fault on one store object holds the item's failure report for a
	// random delay in [c/2, c], c = min(DataFaultBackoff·2^(n-1),
	// DataFaultMaxBackoff)
	// (defaults 1s and 30s), so that a store fault does not use up an
	// item's max_failures within seconds. The item stays owned (and its
	// executor busy) meanwhile; a drain cuts the wait short and nacks it.
	// A fault that may go away (store unreachable, slow, 5xx, a full disk)
	// counts no failure: after the wait the item is nacked. Results whose
	// write fails so are held and written again after the store's backoff
	// (the same delays); held for 4·DataFaultMaxBackoff, their items are
	// nacked. A missing or changed input object is reported held at once
	// (its run stalls; no wait, no failure).
	DataFaultBackoff, DataFaultMaxBackoff time.Duration
	// MaxRangeIndexes bounds the indexes a claim asks for (max_indexes)
	// when a run is made of ranges (SubmitRanges): claims are sized for
	// ClaimHorizon at the measured rate, at least Concurrency, at most this
	// (default 4096; at least Backlog).
	MaxRangeIndexes int
	// RangeReportInterval and RangeReportIndexes pace the progress reports
	// of a range: its finished prefix is reported about every
	// RangeReportInterval (default 1s), every RangeReportIndexes finished
	// indexes (default 1024), and when the range is finished.
	RangeReportInterval time.Duration
	RangeReportIndexes  int
	// MaxUnreportedBytes bounds the bytes of finished range results
	// waiting to be written and reported (default 64 MiB): past it the
	// worker claims nothing more until reports land (its executors finish
	// what they hold), so a slow store costs throughput, never unbounded
	// memory.
	MaxUnreportedBytes int
}

// Defaults.
const (
	DefaultConcurrency         = 8
	DefaultClaimWait           = 5 * time.Second
	DefaultHeartbeatInterval   = time.Second
	DefaultReportInterval      = 20 * time.Millisecond
	DefaultMaxReportBatch      = 256
	DefaultDrainTimeout        = 25 * time.Second
	DefaultShutdownTimeout     = 10 * time.Second
	DefaultRateWindow          = 10 * time.Second
	DefaultClaimHorizon        = 2 * time.Second
	DefaultReconcileInterval   = 10 * time.Second
	DefaultDataFaultBackoff    = time.Second
	DefaultDataFaultMaxBackoff = 30 * time.Second
	DefaultMaxUnreportedBytes  = 64 << 20
)

// DefaultConfig returns the default configuration (without an ID).
func DefaultConfig() Config {
	return Config{
		Concurrency:       DefaultConcurrency,
		ClaimWait:         DefaultClaimWait,
		HeartbeatInterval: DefaultHeartbeatInterval,
		ReportInterval:    DefaultReportInterval,
		MaxReportBatch:    DefaultMaxReportBatch,
		Steal:             true,
		DrainTimeout:      DefaultDrainTimeout,
		ShutdownTimeout:   DefaultShutdownTimeout,
		RateWindow:        DefaultRateWindow,
		ClaimHorizon:      DefaultClaimHorizon,
		ReconcileInterval: DefaultReconcileInterval,
	}
}

// Validate reports the first problem with c, naming the field.
func (c Config) Validate() error {
	if c.ID == "" {
		return fmt.Errorf("%w: ID is required", ErrInvalidConfig)
	}
	if len(c.ID) > 128 || !utf8.ValidString(c.ID) {
		return fmt.Errorf("%w: ID must be valid UTF-8 of at most 128 bytes", ErrInvalidConfig)
	}
	if i := strings.IndexFunc(c.ID, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return fmt.Errorf("%w: ID %q has a space or control character at byte %d", ErrInvalidConfig, c.ID, i)
	}
	if err := checkModels(c.Models); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"Concurrency", int64(c.Concurrency)},
		{"Backlog", int64(c.Backlog)},
		{"ClaimWait", int64(c.ClaimWait)},
		{"HeartbeatInterval", int64(c.HeartbeatInterval)},
		{"ReportInterval", int64(c.ReportInterval)},
		{"MaxReportBatch", int64(c.MaxReportBatch)},
		{"DrainTimeout", int64(c.DrainTimeout)},
		{"ShutdownTimeout", int64(c.ShutdownTimeout)},
		{"RateWindow", int64(c.RateWindow)},
		{"ClaimHorizon", int64(c.ClaimHorizon)},
		{"ReconcileInterval", int64(c.ReconcileInterval)},
		{"DataFaultBackoff", int64(c.DataFaultBackoff)},
		{"DataFaultMaxBackoff", int64(c.DataFaultMaxBackoff)},
		{"MaxRangeIndexes", int64(c.MaxRangeIndexes)},
		{"RangeReportInterval", int64(c.RangeReportInterval)},
		{"RangeReportIndexes", int64(c.RangeReportIndexes)},
		{"MaxUnreportedBytes", int64(c.MaxUnreportedBytes)},
	} {
		if f.v < 0 {
			return fmt.Errorf("%w: %s must be >= 0, got %d", ErrInvalidConfig, f.name, f.v)
		}
	}
	d := c.withDefaults()
	if d.Backlog < d.Concurrency {
		return fmt.Errorf("%w: Backlog (%d) must be >= Concurrency (%d)", ErrInvalidConfig, d.Backlog, d.Concurrency)
	}
	if d.ClaimWait < time.Millisecond || d.ClaimWait > time.Duration(1<<32-1)*time.Millisecond {
		return fmt.Errorf("%w: ClaimWait %v is out of range (1ms..49d)", ErrInvalidConfig, d.ClaimWait)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"HeartbeatInterval", d.HeartbeatInterval},
		{"ReportInterval", d.ReportInterval},
		{"RateWindow", d.RateWindow},
		{"ReconcileInterval", d.ReconcileInterval},
	} {
		if f.v < time.Millisecond {
			return fmt.Errorf("%w: %s must be at least 1ms, got %v", ErrInvalidConfig, f.name, f.v)
		}
	}
	for i, h := range c.Hints {
		if h == nil {
			return fmt.Errorf("%w: Hints[%d] is nil", ErrInvalidConfig, i)
		}
	}
	if d.DataFaultMaxBackoff < d.DataFaultBackoff {
		return fmt.Errorf("%w: DataFaultMaxBackoff (%v) must be >= DataFaultBackoff (%v)", ErrInvalidConfig, d.DataFaultMaxBackoff, d.DataFaultBackoff)
	}
	if d.Backlog > 1<<20 {
		return fmt.Errorf("%w: Backlog %d is too large (max %d)", ErrInvalidConfig, d.Backlog, 1<<20)
	}
	return nil
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Backlog == 0 {
		c.Backlog = 2 * c.Concurrency
	}
	if c.ClaimWait == 0 {
		c.ClaimWait = DefaultClaimWait
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.ReportInterval == 0 {
		c.ReportInterval = DefaultReportInterval
	}
	if c.MaxReportBatch == 0 {
		c.MaxReportBatch = DefaultMaxReportBatch
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.RateWindow == 0 {
		c.RateWindow = DefaultRateWindow
	}
	if c.ClaimHorizon == 0 {
		c.ClaimHorizon = DefaultClaimHorizon
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = DefaultReconcileInterval
	}
	if c.DataFaultBackoff == 0 {
		c.DataFaultBackoff = DefaultDataFaultBackoff
	}
	if c.DataFaultMaxBackoff == 0 {
		c.DataFaultMaxBackoff = max(DefaultDataFaultMaxBackoff, c.DataFaultBackoff)
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.OpenStore == nil {
		c.OpenStore = OpenStore
	}
	if c.MaxRangeIndexes == 0 {
		c.MaxRangeIndexes = DefaultMaxRangeIndexes
	}
	c.MaxRangeIndexes = max(c.MaxRangeIndexes, c.Backlog)
	if c.RangeReportInterval == 0 {
		c.RangeReportInterval = DefaultRangeReportInterval
	}
	if c.RangeReportIndexes == 0 {
		c.RangeReportIndexes = DefaultRangeReportIndexes
	}
	if c.MaxUnreportedBytes == 0 {
		c.MaxUnreportedBytes = DefaultMaxUnreportedBytes
	}
	return c
}

// checkModels validates Config.Models as the ledger will (fsm's Register).
func checkModels(models []string) error {
	if len(models) > limits.MaxWorkerModels {
		return fmt.Errorf("%w: Models names %d models, limit %d", ErrInvalidConfig, len(models), limits.MaxWorkerModels)
	}
	for i, m := range models {
		switch {
		case m == "":
			return fmt.Errorf("%w: Models[%d] is empty", ErrInvalidConfig, i)
		case len(m) > limits.MaxModelBytes:
			return fmt.Errorf("%w: Models[%d] is %d bytes, limit %d", ErrInvalidConfig, i, len(m), limits.MaxModelBytes)
		case !utf8.ValidString(m) || strings.ContainsFunc(m, func(r rune) bool { return !unicode.IsPrint(r) }):
			return fmt.Errorf("%w: Models[%d] %q is not printable UTF-8", ErrInvalidConfig, i, m)
		}
	}
	return nil
}
