// Package worker is the rollout worker runtime: it long-polls the
// coordinator for items, runs them on a Backend, reports their outcomes, and
// keeps its view of what it owns in line with the ledger.
//
// A Worker registers with the coordinator before it claims (workers are
// never registered implicitly). When the coordinator says it is not
// registered (an operator evicted it, or it expired while silent), it
// registers again and reconciles with OwnedItems: after an eviction it owns
// nothing, so its unstarted items are dropped and what it still reports is
// refused as a CAS miss.
//
// A Worker never loses an item: everything it holds is eventually reported
// (Done, Failed or Nack), or dropped because the ledger says it is no longer
// the worker's (a heartbeat's lost list, a CAS miss, an OwnedItems answer
// that does not list it and is not truncated), or dropped unreported
// because the backend refused it as delivered in a stale term
// (ErrStaleItem), after which the worker reconciles and the ledger hands it
// out again if it is still the worker's. Exactly-once completion is the
// coordinator's job; the worker reports each outcome until the ledger
// answers it.
//
// Items carry what the backend needs beyond the payload: the run's kind,
// the results of the items they depend on (Item.Deps) and the term of the
// reply that delivered them (Item.Term), which a backend that launches
// work on a device compares with the newest term seen before every launch.
//
// # Runs with an object store
//
// When a run has a store (Item.store, RunSpec.store), its items carry
// references instead of bytes. The worker opens the store from the run's
// URL (once per URL, with Config.OpenStore; credentials from the
// environment; the URL is logged only redacted) and, before an item runs:
//   - reads the payloads of the items of one delivery (a claim, a steal,
//     an adoption) together: per object, one ranged read per span that is at
//     most twice the bytes referenced and 16 MiB;
//   - checks each payload: against its reference's blake3 when it has one,
//     else, for a batch item (kind ""), by recomputing its sample id from
//     model, the line, sampling and index (batch.SampleIDOfLine);
//   - reads each dependency's result by reference and checks its blake3.
//
// A missing, short, changed or unreadable object fails the attempt with a
// reason naming the object (wrapping ErrData); the backend never runs on
// bytes that are not the item's. Backends see Payload and Deps[i].Result
// filled as for inline runs.
//
// At each report flush the Done results of a run with a store are written
// as one content-addressed object (store.ResultPrefix) and reported by
// reference (object, offset, length, blake3 of the item's bytes) with no
// inline result, only after the write returned nil; a write that fails
// after the store's retries fails those attempts naming the store error.
// A Backend that implements Summarizer adds a small summary to each Done
// report (ItemReport.summary).
//
// # Ranges
//
// A run submitted with SubmitRanges hands out ranges (Item.count > 0): the
// worker runs each index as a sub-item (the chunk's line, its sample id),
// within the same Concurrency, and reports the finished prefix with
// ReportRange, one result object per report (see ranges.go). Claims ask
// for max_indexes sized from the measured rate (Config.MaxRangeIndexes);
// the queued, executing and held counts and the heartbeat's backlog count
// indexes.
package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/internal/jsonscan"
	"github.com/rollout/rollout/internal/limits"
)

var (
	// ErrInvalidConfig is wrapped by every Config.Validate error and by New
	// for missing arguments.
	ErrInvalidConfig = errors.New("worker: invalid config")
	// ErrAlreadyRun is returned by a second call of Run.
	ErrAlreadyRun = errors.New("worker: Run was already called")
	// ErrRevoked is returned by Run when the cluster refused a call because
	// the worker's certificate is revoked (it wraps coordclient.ErrRevoked
	// and the refusal, which names who revoked it, when and why): the
	// worker stops at once, since nothing it sends will be accepted again.
	ErrRevoked = errors.New("worker: the certificate is revoked")
	// ErrStaleItem is what a Backend's Run returns (wrapped) when it
	// refuses to execute an item because the item came in a reply older
	// than the newest term the worker has seen (Item.Term; the epoch guard
	// before a GPU launch). The worker then drops the item without
	// reporting anything, counts it in Stats.StaleDropped and reconciles
	// with the ledger, which hands the item out again (under the new term)
	// if it is still this worker's.
	ErrStaleItem = errors.New("worker: item is from a stale term")

	// ErrPermanent is what a Backend's Run returns (wrapped) for a failure
	// that retrying cannot fix (the exec backend's "retryable": false): the
	// item is reported failed for good and goes Dead at once with the
	// reason, whatever the run's max_failures.
	ErrPermanent = errors.New("worker: permanent failure")
)

// Backend runs items. Implementations (mock, openai, gpu) must be safe for
// concurrent use by Concurrency goroutines.
type Backend interface {
	// Run executes one item and returns its result: a JSON object (bytes).
	// An error fails the item with err.Error() as the reason, except one
	// wrapping ErrStaleItem, which drops the item unreported. Run must
	// return promptly when ctx is cancelled.
	Run(ctx context.Context, item Item) ([]byte, error)
}

// Item is one unit of work as given to a Backend.
type Item struct {
	Run   string
	ID    []byte
	Index uint64
	// Payload is the item's input: inline, or read from the run's store
	// and checked (see the package doc).
	Payload []byte
	// Attempt is the ledger's fencing token for this ownership.
	Attempt uint64
	// Model and Sampling are the run's model and sampling parameters
	// (canonical JSON, see batch.SamplingParams.JSON); empty when the run
	// names none.
	Model    string
	Sampling []byte
	// Kind is the run's kind (RunSpec.kind): "" for batch inference,
	// "train" for a training run.
	Kind string
	// Deps are the items this one depends on, in depends_on order, with
	// their results; all of them were Done when the item was handed out.
	Deps []Dependency
	// Term is the term (epoch) of the coordinator reply that delivered the
	// item: a Claim, a Steal, or the OwnedItems reply it was adopted from
	// (a newer delivery of the same item raises it). A backend compares it
	// with the newest term seen (coordclient's guard) before it launches
	// work, and returns ErrStaleItem for an item from an older term.
	Term uint64
	// Input, when set, is Payload parsed (batch.ParseInput, or
	// ParseInputShared when Payload is an immutable chunk's line): the worker
	// parsed it to compute the sample id of an index of a range. A backend
	// that needs the request may take it from Input.Request instead of
	// parsing Payload again; nil means parse Payload.
	Input *batch.Input
}

// Dependency is a finished dependency of an Item: its id and result.
type Dependency struct {
	ID     []byte
	Result []byte
	// Summary is the dependency's result summary (see Summarizer), if any.
	Summary []byte
}

// Stats are a Worker's counters since New.
type Stats struct {
	// Claimed, Adopted and Stolen count items received from Claim, from
	// OwnedItems (owned but not held) and from Steal.
	Claimed, Adopted, Stolen uint64
	// Completed, Failed and Nacked count reports the ledger applied;
	// InputsHeld counts the held reports it applied (an item's input
	// object was missing or changed).
	Completed, Failed, Nacked, InputsHeld uint64
	// StoreHeld counts the held reports the ledger applied that said the
	// run's store could not be reached (store_unavailable; see
	// docs/RECOVERY.md): the item went back without a failure.
	StoreHeld uint64
	// ResultWritesDeferred counts the results whose write to their run's
	// store failed with a fault that may go away (their items stayed owned
	// and were written again after the store's backoff).
	ResultWritesDeferred uint64
	// Dropped counts items given up because the ledger says they are not
	// this worker's: lost in a heartbeat, CAS miss, not found, or absent
	// from OwnedItems before they started.
	Dropped uint64
	// Conflicts counts Done reports refused because another result stands;
	// Invalid counts reports the coordinator refused as malformed.
	Conflicts, Invalid uint64
	// ReportErrors counts Report calls that failed and were retried.
	ReportErrors uint64
	// StaleDropped counts items dropped unreported because the backend
	// refused them as from a stale term (ErrStaleItem).
	StaleDropped uint64
	// Reregistered counts registrations after the first: the coordinator
	// said this worker was not registered (evicted, or expired).
	Reregistered uint64
	// StaleRepliesRejected counts coordinator replies the epoch guard
	// rejected (from the client's guard).
	StaleRepliesRejected uint64
	// Term is the highest term seen.
	Term uint64
	// Queued, Executing and Held (queued, executing and finished but not yet
	// reported) describe the worker now.
	Queued, Executing, Held int
	// ItemsPerSec is the measured backend completion rate (Done and Failed)
	// over the sliding window.
	ItemsPerSec float64
	// HoldTarget is how many items the worker now aims to hold, sized from
	// ItemsPerSec (see Config.ClaimHorizon).
	HoldTarget int
	// StoreReads counts the ranged reads of payloads and dependency
	// results from runs' stores; StoreWrites the result objects written.
	StoreReads, StoreWrites uint64
}

type key struct{ run, id string }

type entryState int

const (
	queued entryState = iota + 1
	executing
	finished
)

// entry is one held item. All fields are guarded by Worker.mu.
type entry struct {
	item   Item
	state  entryState
	lost   bool               // the ledger took it while it executed
	cancel context.CancelFunc // while executing
	// started is when it began executing; drained is set when a drain
	// cancelled it (its outcome is then a nack).
	started time.Time
	drained bool
	// data says where the item's payload and dependency results live when
	// its run has a store (nil: inline).
	data *dataRef
	// rng is the progress of a range (Item.count > 0 when received; nil
	// for a plain item). A range stays queued while it has indexes to
	// start; its state field is then queued, else executing.
	rng *rangeState
}

func (e *entry) key() key { return key{e.item.Run, string(e.item.ID)} }

// outcome is a finished item's report, waiting to be sent.
type outcome struct {
	e      *entry
	kind   rolloutv1.Outcome
	result []byte
	reason string
	// permanent marks a failure that retrying cannot fix (ErrPermanent).
	permanent bool
	// summary is the backend's summary of a Done result (Summarizer); ref
	// is where the result was stored (runs with a store), set once the
	// store's write returned nil.
	summary []byte
	ref     *rolloutv1.DataRef
	// heldObject names the missing input object of an OUTCOME_HELD;
	// storeDown says the store could not be reached reading it.
	heldObject string
	storeDown  bool
	// deferredSince is when its result write first failed with a store
	// fault (zero: never); see Worker.deferred.
	deferredSince time.Time
}

// Worker pulls, executes and reports items. Create it with New; call Run
// once.
type Worker struct {
	cfg     Config
	client  *coordclient.Client
	backend Backend
	stores  stores
	log     hclog.Logger
	ran     atomic.Bool
	calls   atomic.Uint64 // Recorder call ids

	wake      chan struct{} // work was queued (passed on between executors)
	space     chan struct{} // room to claim opened
	reconcile chan struct{} // an OwnedItems reconciliation is wanted
	flush     chan struct{} // a full report batch is waiting
	// kick wakes a reporter that sleeps without a timer (reporterIdle):
	// there is something to report again.
	kick chan struct{}
	// wakeups counts the reporter's wake-ups (an idle worker's must not
	// grow: see reporter).
	wakeups atomic.Uint64
	// revoked is closed, once, when a call was refused because this
	// worker's certificate is revoked (revokedErr is that refusal).
	revoked     chan struct{}
	revokedOnce sync.Once
	revokedErr  error

	mu            sync.Mutex
	held          map[key]*entry
	queue         []*entry
	executing     int
	stopping      bool
	needReconcile bool
	// aheadStale: a range was queued since the read-ahead last looked at
	// the queue (readAheadLocked).
	aheadStale bool
	// claimPaused: the claimer claims nothing because the unreported
	// results passed Config.MaxUnreportedBytes.
	claimPaused bool
	// reporterIdle: the reporter found nothing to report and sleeps
	// without a timer until kicked (armReporterLocked).
	reporterIdle bool
	// forgotten records, while a reconciliation's OwnedItems call is under
	// way, the attempts of items that stopped being held, so that the
	// (older) answer does not bring them back.
	forgotten map[key]uint64
	pending   []*outcome
	// deferred holds Done outcomes whose results could not be written to
	// their run's store (a fault that may go away): they are not reported
	// (the items stay owned, no failure counts) until the store's backoff
	// (resultRetry, by store URL) passes; at shutdown, or once held for
	// resultHoldLimit, they are nacked (another worker may reach the store).
	deferred    []*outcome
	resultRetry map[string]time.Time
	rate        *rateWindow
	faults      *faultBackoff // spaces out the failures of unreadable inputs
	st          Stats
	// nacked lists the nacks applied while stopping; drained is the report
	// of the drain that ended Run.
	nacked  []ItemRef
	drained *DrainReport
}

// New returns a Worker for cfg that talks through client and runs items on
// backend. The Worker registers a term-change callback on client (used to
// trigger reconciliation); the caller owns client and closes it after Run.
func New(cfg Config, client *coordclient.Client, backend Backend) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalidConfig)
	}
	if backend == nil {
		return nil, fmt.Errorf("%w: backend is nil", ErrInvalidConfig)
	}
	cfg = cfg.withDefaults()
	w := &Worker{
		cfg:       cfg,
		client:    client,
		backend:   backend,
		stores:    stores{open: cfg.OpenStore},
		log:       cfg.Logger.Named("worker").With("worker", cfg.ID),
		wake:      make(chan struct{}, 1),
		space:     make(chan struct{}, 1),
		reconcile: make(chan struct{}, 1),
		revoked:   make(chan struct{}),
		flush:     make(chan struct{}, 1),
		kick:      make(chan struct{}, 1),
		held:      make(map[key]*entry),
		rate:      newRateWindow(cfg.RateWindow, time.Now()),
		faults:    newFaultBackoff(cfg.DataFaultBackoff, cfg.DataFaultMaxBackoff),
	}
	client.OnTermChange(func(old, cur uint64) {
		if old != 0 {
			w.requestReconcile()
		}
	})
	if rec := cfg.Recorder; rec != nil {
		client.OnGuard(func(g coordclient.GuardEvent) { rec.Record(Event{Kind: EventGuard, Op: g.Method, Guard: g}) })
	}
	return w, nil
}

// Stats returns a snapshot of the worker's counters.
func (w *Worker) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.st
	s.Queued, s.Executing, s.Held = w.queuedLocked(), w.executing, w.heldIndexesLocked()
	s.ItemsPerSec = w.rate.rate(time.Now())
	s.HoldTarget = w.holdTargetLocked(time.Now())
	g := w.client.Guard()
	s.StaleRepliesRejected, s.Term = g.Rejected(), g.Highest()
	return s
}

// Run registers the worker (Register), starts its hints (see
// Config.Hints), adopts the items the ledger says it owns, and then claims,
// executes and reports items until ctx ends or a hint delivers a preemption
// notice. A registration refused by the coordinator, or a hint that cannot
// start, is returned as an error.
//
// Then Run drains (see DrainReport) to a deadline: the notice's, or
// DrainTimeout after ctx ended. It stops pulling, nacks held items that have
// not started, lets each in-flight item finish only while its expected
// remaining time (from the measured execution times) fits the remaining
// budget and cancels and nacks it otherwise, flushes the outstanding
// reports, deregisters and returns nil. A later notice with an earlier
// deadline, or a forcing one (a second SIGTERM), shortens the drain; the
// deadline cancels whatever still runs, and the nacks are still sent.
// Whatever could not be reported is re-pended by the coordinator on
// deregistration or failure detection.
func (w *Worker) Run(ctx context.Context) error {
	if !w.ran.CompareAndSwap(false, true) {
		return ErrAlreadyRun
	}
	return w.run(ctx)
}

// waitFor waits for wg up to d; it reports whether wg finished.
func waitFor(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// notify does a non-blocking send on a one-slot signal channel.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// requestReconcile asks the claimer to reconcile with OwnedItems.
func (w *Worker) requestReconcile() {
	w.mu.Lock()
	w.needReconcile = true
	w.mu.Unlock()
	notify(w.reconcile)
}

// sleep waits a jittered backoff (100ms doubling to 2s) for the n-th
// consecutive failure, or until ctx ends.
func sleep(ctx context.Context, n int) {
	d := 100 * time.Millisecond
	for i := 1; i < n && d < 2*time.Second; i++ {
		d *= 2
	}
	d = min(d, 2*time.Second)
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// claimer keeps the local backlog filled: it reconciles when asked (at
// start, after a claim or steal with an unknown outcome, on a term change, on
// a CAS miss) and every ReconcileInterval, claims up to the free room, and
// steals when idle. A request that arrives during a long poll is served when
// the poll returns (at most ClaimWait later). It returns when ctx ends.
func (w *Worker) claimer(ctx context.Context) {
	failures := 0
	lastReconcile := time.Now()
	// quickTried is set once an idle worker's no-wait claim and steal found
	// nothing; the next claim long-polls. Any item received resets it.
	quickTried := false
	for ctx.Err() == nil {
		w.mu.Lock()
		reconcile := w.needReconcile || time.Since(lastReconcile) >= w.cfg.ReconcileInterval
		w.needReconcile = false
		queued := w.queuedLocked()
		room := w.holdTargetLocked(time.Now()) - queued - w.executing
		w.claimPaused = w.unreportedLocked() >= w.cfg.MaxUnreportedBytes
		if w.claimPaused {
			// Finished results wait on the store and the ledger: claim
			// nothing more until reports land (sendRangeReports).
			room = 0
		}
		// Ranges are sized in indexes: enough for ClaimHorizon at the
		// measured rate (a range takes seconds), claimed only while the
		// items' room is open.
		idxRoom := max(w.rangeTargetLocked(time.Now())-queued-w.executing, room)
		idle := queued == 0 && w.executing == 0
		busy := w.executing > 0
		w.mu.Unlock()

		if reconcile {
			lastReconcile = time.Now()
			if err := w.reconcileOwned(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				// The client already retried transient errors: this one
				// will not pass soon. Keep claiming; the periodic
				// reconciliation tries again.
				w.log.Warn("reconciling owned items failed; retrying in the next interval", "error", err, "interval", w.cfg.ReconcileInterval)
				failures++
				sleep(ctx, failures)
				continue
			}
			failures = 0
			continue
		}
		if room <= 0 {
			t := time.NewTimer(w.cfg.ReconcileInterval)
			select {
			case <-ctx.Done():
			case <-w.space:
			case <-w.reconcile:
			case <-t.C:
			}
			t.Stop()
			continue
		}

		// An idle worker asks without waiting and, when nothing is pending,
		// steals at once rather than after a whole long poll: a straggler's
		// items move as soon as a thief is free. A busy worker polls for at
		// most busyClaimWait, so that it notices soon when it runs dry.
		wait := w.cfg.ClaimWait
		quick := false
		if w.cfg.Steal {
			switch {
			case idle && !quickTried:
				wait, quick = 0, true
			case busy:
				wait = min(wait, busyClaimWait)
			}
		}
		doubt := w.client.ClaimsInDoubt()
		resp, err := record(ctx, w, "Claim", w.client.Claim, &rolloutv1.ClaimRequest{
			WorkerId:   w.cfg.ID,
			MaxItems:   uint32(room),
			WaitMs:     uint32(wait / time.Millisecond),
			MaxIndexes: uint64(idxRoom),
		})
		if w.client.ClaimsInDoubt() != doubt {
			w.requestReconcile()
		}
		if errors.Is(err, coordclient.ErrNotRegistered) {
			if rerr := w.reregister(ctx, err); rerr != nil && ctx.Err() == nil {
				failures++
				sleep(ctx, failures)
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// The outcome is unknown: items may be ours that we never saw.
			w.log.Warn("claim failed", "error", err)
			w.requestReconcile()
			failures++
			sleep(ctx, failures)
			continue
		}
		failures = 0
		n := w.hold(resp.GetItems(), resp.GetHeader().GetTerm(), &w.st.Claimed)
		if n > 0 || len(resp.GetItems()) > 0 || !w.cfg.Steal {
			quickTried = false
			continue
		}
		if w.maybeSteal(ctx) > 0 {
			quickTried = false
			continue
		}
		if quick {
			quickTried = true
		}
	}
}

// busyClaimWait bounds the long poll of a worker that is executing items,
// so that it tries to steal soon after it runs dry.
const busyClaimWait = time.Second

// maybeSteal asks for work when no item waits for an executor and an
// executor is free. It returns how many items it received.
func (w *Worker) maybeSteal(ctx context.Context) int {
	w.mu.Lock()
	idle := w.queuedLocked() == 0 && w.executing < w.cfg.Concurrency
	w.mu.Unlock()
	if !idle {
		return 0
	}
	resp, err := record(ctx, w, "Steal", w.client.Steal, &rolloutv1.StealRequest{WorkerId: w.cfg.ID, Backlog: 0})
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		if errors.Is(err, coordclient.ErrNotRegistered) {
			_ = w.reregister(ctx, err)
			return 0
		}
		if status.Code(err) == codes.FailedPrecondition {
			w.log.Debug("steal refused", "error", err)
			return 0
		}
		// Unknown outcome: items may have moved to us.
		w.log.Warn("steal failed", "error", err)
		w.requestReconcile()
		return 0
	}
	n := w.hold(resp.GetItems(), resp.GetHeader().GetTerm(), &w.st.Stolen)
	if n > 0 {
		w.log.Debug("stole items", "count", n, "victim", resp.GetVictim())
	}
	return len(resp.GetItems())
}

// reconcileOwned asks the ledger which items this worker owns, adopts those
// it does not hold, and drops queued (unstarted) items the ledger no longer
// gives it. It runs on the claimer goroutine, so no claim races with it.
func (w *Worker) reconcileOwned(ctx context.Context) error {
	w.mu.Lock()
	w.forgotten = make(map[key]uint64)
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.forgotten = nil
		w.mu.Unlock()
	}()
	resp, err := record(ctx, w, "OwnedItems", w.client.OwnedItems, &rolloutv1.OwnedItemsRequest{WorkerId: w.cfg.ID})
	if err != nil {
		return err
	}
	owned := make(map[key]bool, len(resp.GetItems()))
	for _, it := range resp.GetItems() {
		owned[key{it.GetRun(), string(it.GetId())}] = true
	}
	w.mu.Lock()
	dropped := 0
	w.queue = slices.DeleteFunc(w.queue, func(e *entry) bool {
		// A truncated list (more owned items than one reply holds) proves
		// nothing about the items it does not name.
		if owned[e.key()] || resp.GetTruncated() {
			return false
		}
		if e.rng != nil && (len(e.rng.running) > 0 || len(e.rng.res) > 0 || e.rng.next > e.rng.lo) {
			return false // started: its reports decide
		}
		w.forgetLocked(e)
		dropped++
		return true
	})
	w.st.Dropped += uint64(dropped)
	w.mu.Unlock()
	adopted := w.hold(resp.GetItems(), resp.GetHeader().GetTerm(), &w.st.Adopted)
	if dropped > 0 || adopted > 0 {
		w.log.Info("reconciled with ledger", "owned", len(resp.GetItems()), "adopted", adopted, "dropped", dropped)
		notify(w.space)
	}
	return nil
}

// hold takes items the ledger gave this worker. An item already held with
// the same or a newer attempt is skipped, and so is one forgotten during the
// current reconciliation; a queued or executing one takes a newer attempt in
// place; a finished (reporting) or lost one is superseded by a new queued
// entry. It returns how many new entries were queued and adds that to
// *counter.
func (w *Worker) hold(items []*rolloutv1.Item, term uint64, counter *uint64) int {
	if len(items) == 0 {
		return 0
	}
	w.mu.Lock()
	n := 0
	var fresh []*rolloutv1.Item // the items of the new entries
	var plain []*entry          // the new entries of plain items
	for _, it := range items {
		if it.GetCount() > 0 {
			if w.holdRangeLocked(it, term) {
				n++
				*counter += it.GetCount() - 1 // counted in indexes
			}
			continue
		}
		k := key{it.GetRun(), string(it.GetId())}
		if e, ok := w.held[k]; ok {
			if it.GetAttempt() <= e.item.Attempt {
				continue // this ownership is already held, reported or lost
			}
			if e.state != finished && !e.lost {
				// Same work, newer ownership: report under the new attempt.
				e.item.Attempt = it.GetAttempt()
				e.item.Term = max(e.item.Term, term)
				continue
			}
			// A finished entry's outcome belongs to its own attempt (it may
			// already be applied: a failed or nacked item came back); a lost
			// one is being cancelled. The newer attempt is new work.
		}
		if a, ok := w.forgotten[k]; ok && it.GetAttempt() <= a {
			continue // reported or dropped while a reconciliation read was under way
		}
		e := &entry{state: queued, item: Item{
			Run: it.GetRun(), ID: bytes.Clone(it.GetId()), Index: it.GetIndex(),
			Payload: bytes.Clone(it.GetPayload()), Attempt: it.GetAttempt(),
			Model: it.GetModel(), Sampling: bytes.Clone(it.GetSampling()),
			Kind: it.GetKind(), Deps: toDeps(it.GetDeps()), Term: term,
		}}
		w.held[k] = e
		w.queue = append(w.queue, e)
		fresh = append(fresh, it)
		plain = append(plain, e)
		n++
	}
	// The new entries' references into their runs' stores: their payloads
	// are read together, with as few ranged reads as their objects allow.
	for i, d := range newDataRefs(fresh) {
		plain[i].data = d
	}
	*counter += uint64(n)
	w.mu.Unlock()
	if n > 0 {
		notify(w.wake)
	}
	return n
}

// forgetLocked removes e from the held set (if it is still the entry held
// for its key).
func (w *Worker) forgetLocked(e *entry) {
	if w.held[e.key()] != e {
		return
	}
	delete(w.held, e.key())
	if w.forgotten != nil {
		w.forgotten[e.key()] = max(w.forgotten[e.key()], e.item.Attempt)
	}
}

// executor runs queued items until stop is closed or ctx ends.
func (w *Worker) executor(ctx context.Context, stop <-chan struct{}) {
	for {
		t, ictx := w.next(ctx, stop)
		if t.e == nil {
			return
		}
		if t.sub != nil {
			w.executeIndex(ctx, ictx, t.e, t.idx, t.sub)
			continue
		}
		w.execute(ctx, ictx, t.e)
	}
}

// task is what an executor runs: a plain item, or index idx of a range
// (sub set).
type task struct {
	e   *entry
	idx uint64
	sub *subExec
}

// next takes the oldest queued item and marks it executing; it returns nil
// when stopping.
func (w *Worker) next(ctx context.Context, stop <-chan struct{}) (task, context.Context) {
	for {
		w.mu.Lock()
		if w.stopping {
			w.mu.Unlock()
			return task{}, nil
		}
		if len(w.queue) > 0 && w.queue[0].rng != nil {
			e := w.queue[0]
			if e.rng.queued() == 0 || e.lost {
				w.unqueueLocked(e)
				w.mu.Unlock()
				continue
			}
			if e.rng.chunk == nil || w.aheadStale {
				w.readAheadLocked(ctx)
			}
			idx, sub, ictx := w.nextIndexLocked(ctx, e)
			more := len(w.queue) > 0
			w.mu.Unlock()
			if more {
				notify(w.wake)
			}
			return task{e: e, idx: idx, sub: sub}, ictx
		}
		if len(w.queue) > 0 {
			e := w.queue[0]
			w.queue[0] = nil
			w.queue = w.queue[1:]
			e.state = executing
			e.started = time.Now()
			w.executing++
			ictx, cancel := context.WithCancel(ctx)
			e.cancel = cancel
			more := len(w.queue) > 0
			w.mu.Unlock()
			if more {
				notify(w.wake)
			}
			return task{e: e}, ictx
		}
		w.mu.Unlock()
		select {
		case <-w.wake:
		case <-stop:
		case <-ctx.Done():
			return task{}, nil
		}
	}
}

// execute runs e on the backend and queues its outcome. ctx is the
// executors' context (cancelled at the drain deadline); ictx is e's own.
func (w *Worker) execute(ctx, ictx context.Context, e *entry) {
	w.mu.Lock()
	item := e.item
	w.mu.Unlock()

	item, err := w.loadData(ctx, ictx, e.data, item)
	// A missing or changed input is reported held at once (the ledger
	// stalls the run; no failure counts); so is a store that cannot be
	// reached (after the store's own retries), with store_unavailable: no
	// failure counts either, the ledger isolates the run once two workers
	// say so and spaces out its probes, and waiting here would only keep
	// an executor from other runs' items. A refusal (access denied) fails
	// the attempt at once; other data faults after the object's backoff.
	var held, storeFault bool
	if e.data != nil {
		switch {
		case err == nil:
			w.faults.ok(e.data.faultKey())
		case ictx.Err() != nil:
		case errors.Is(err, ErrInputMissing) && e.data.payload != nil:
			held = true
			w.log.Warn("an item's input object is missing or changed; reporting it held (its run stalls until the object is back)",
				"run", item.Run, "index", item.Index, "object", e.data.payload.GetObject(), "error", err)
		default:
			storeFault = transientStore(err)
			// A refusal retrying cannot change (access denied) fails the
			// attempt at once, like a store that cannot be reached is held
			// at once: waiting would keep an executor from other runs.
			if (!storeFault || e.data.storeObject() == "") && !refusedStore(err) {
				w.waitFault(ictx, e.data.faultKey(), err)
			}
		}
	}
	var res, summary []byte
	if err == nil {
		res, err = w.runBackend(ictx, item)
	}
	if err == nil {
		summary = w.summary(item, res) // outside the lock: it may decode the result
	}

	w.mu.Lock()
	e.cancel()
	e.cancel = nil
	e.state = finished
	w.executing--
	if e.lost {
		w.forgetLocked(e)
		w.st.Dropped++
		w.mu.Unlock()
		notify(w.space)
		return
	}
	if errors.Is(err, ErrStaleItem) {
		// The backend refused an item from a stale term: report nothing
		// (its result could not be trusted to the new leader's ledger
		// anyway) and ask the ledger what is ours now.
		w.forgetLocked(e)
		w.st.StaleDropped++
		w.mu.Unlock()
		w.log.Debug("dropped an item from a stale term", "run", item.Run, "index", item.Index, "term", item.Term)
		w.requestReconcile()
		notify(w.space)
		return
	}
	o := &outcome{e: e}
	switch {
	case err == nil && w.resultObject(res):
		o.kind, o.result = rolloutv1.Outcome_OUTCOME_DONE, res
		o.summary = summary
	case err == nil:
		o.kind, o.reason = rolloutv1.Outcome_OUTCOME_FAILED, "backend returned a result that is not a JSON object"
	case ctx.Err() != nil || e.drained:
		o.kind = rolloutv1.Outcome_OUTCOME_NACK
	case held:
		o.kind, o.reason, o.heldObject = rolloutv1.Outcome_OUTCOME_HELD, limits.CleanReason(err.Error()), e.data.payload.GetObject()
	case storeFault && e.data.storeObject() != "":
		o.kind, o.reason, o.heldObject = rolloutv1.Outcome_OUTCOME_HELD, limits.CleanReason(err.Error()), e.data.storeObject()
		o.storeDown = true
	case storeFault:
		o.kind = rolloutv1.Outcome_OUTCOME_NACK
	default:
		o.kind, o.reason = rolloutv1.Outcome_OUTCOME_FAILED, limits.CleanReason(err.Error())
		o.permanent = errors.Is(err, ErrPermanent)
	}
	took := time.Since(e.started)
	if o.kind != rolloutv1.Outcome_OUTCOME_NACK && o.kind != rolloutv1.Outcome_OUTCOME_HELD {
		w.rate.addTimed(time.Now(), took)
	}
	w.pending = append(w.pending, o)
	w.armReporterLocked()
	full := len(w.pending) >= w.cfg.MaxReportBatch
	w.mu.Unlock()
	if obs := w.cfg.Observer; obs != nil {
		obs.ObserveItem(took, o.kind)
	}
	notify(w.space)
	if full {
		notify(w.flush)
	}
}

// waitFault holds the failure of an item whose data could not be loaded
// for the backoff of its object (Config.DataFaultBackoff), or until ictx
// ends (the item was lost, or a drain cancelled it: it is then nacked).
func (w *Worker) waitFault(ictx context.Context, object string, err error) {
	d := w.faults.fault(object)
	if d <= 0 {
		return
	}
	w.log.Debug("holding a data fault's report", "object", object, "delay", d, "error", err)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ictx.Done():
	}
}

// runBackend calls the backend, turning a panic into an error.
func (w *Worker) runBackend(ctx context.Context, item Item) (res []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("backend panicked: %v", p)
		}
	}()
	return w.backend.Run(ctx, item)
}

// resultObject reports whether a backend's result is one JSON object:
// checked (isJSONObject), unless the backend makes only objects
// (ObjectResults).
func (w *Worker) resultObject(b []byte) bool {
	if o, ok := w.backend.(ObjectResults); ok && o.ResultsAreObjects() {
		return true
	}
	return isJSONObject(b)
}

func isJSONObject(b []byte) bool {
	b = bytes.TrimLeft(b, " \t\r\n")
	return len(b) > 0 && b[0] == '{' && jsonscan.Valid(b)
}

// reporter flushes outcomes every ReportInterval or when a batch is full.
// After stop is closed it flushes what is left (bounded by ShutdownTimeout)
// and returns; it also returns when ctx ends. Its ticker runs only while
// there is something to report (reportWorkLocked): an idle worker's
// reporter sleeps until an outcome or a range result arms it again
// (armReporterLocked), so that idle costs no wake-ups.
func (w *Worker) reporter(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTicker(w.cfg.ReportInterval)
	defer t.Stop()
	armed := true
	failures := 0
	for {
		var tick <-chan time.Time
		if armed {
			tick = t.C
		}
		select {
		case <-ctx.Done():
			return
		case <-stop:
			sctx, cancel := context.WithTimeout(ctx, w.cfg.ShutdownTimeout)
			defer cancel()
			failures = 0
			w.nackDeferred()
			for (w.pendingReports() > 0 || w.rangesLeft() > 0) && sctx.Err() == nil {
				err := w.flushOnce(sctx)
				if err == nil {
					err = w.flushRanges(sctx, true)
				}
				if err != nil {
					failures++
					sleep(sctx, failures)
				}
			}
			if n := w.rangesLeft(); n > 0 {
				w.log.Warn("range reports left unsent at shutdown", "ranges", n)
			}
			if n := w.pendingReports(); n > 0 {
				w.log.Warn("reports left unsent at shutdown", "count", n)
			}
			return
		case <-w.kick:
			w.wakeups.Add(1)
			if !armed {
				armed = true
				t.Reset(w.cfg.ReportInterval)
			}
			continue
		case <-tick:
		case <-w.flush:
		}
		w.wakeups.Add(1)
		w.requeueDeferred(time.Now())
		for w.pendingReports() > 0 && ctx.Err() == nil {
			if err := w.flushOnce(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				w.log.Warn("report failed; will retry", "error", err)
				failures++
				sleep(ctx, failures)
				break
			}
			failures = 0
		}
		if ctx.Err() == nil {
			if err := w.flushRanges(ctx, false); err != nil && ctx.Err() == nil {
				w.log.Warn("range report failed; will retry", "error", err)
				failures++
				sleep(ctx, failures)
			}
		}
		w.mu.Lock()
		idle := !w.reportWorkLocked()
		if idle && w.rangesHeldLocked() == 0 {
			// Nothing left to run: an idle worker keeps no chunk.
			w.stores.chunks.clear()
		}
		w.reporterIdle = idle
		w.mu.Unlock()
		switch {
		case idle && armed:
			armed = false
			t.Stop()
		case !idle && !armed:
			armed = true
			t.Reset(w.cfg.ReportInterval)
		}
	}
}

// reportWorkLocked reports whether the reporter has anything to do: an
// outcome to report, one deferred (its store's backoff), or a held range
// with finished indexes or to give back.
func (w *Worker) reportWorkLocked() bool {
	if len(w.pending) > 0 || len(w.deferred) > 0 {
		return true
	}
	for _, e := range w.held {
		if r := e.rng; r != nil && !e.lost && r.lo < r.hi && (len(r.res) > 0 || r.nack) {
			return true
		}
	}
	return false
}

// armReporterLocked wakes the reporter if it sleeps without a timer: call
// it whenever something to report appears (see reportWorkLocked).
func (w *Worker) armReporterLocked() {
	if w.reporterIdle {
		w.reporterIdle = false
		notify(w.kick)
	}
}

// requeueDeferred moves the deferred outcomes whose store's backoff has
// passed at now back to the pending reports (their results are written
// again by the next flush).
func (w *Worker) requeueDeferred(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.deferred) == 0 {
		return
	}
	keep := w.deferred[:0]
	limit := w.resultHoldLimit()
	for _, o := range w.deferred {
		if now.Sub(o.deferredSince) >= limit {
			// This worker has not reached the store for long: give the
			// item back (no failure) rather than keep it from the others.
			o.kind, o.result, o.ref, o.summary = rolloutv1.Outcome_OUTCOME_NACK, nil, nil, nil
			w.pending = append(w.pending, o)
			continue
		}
		if o.e.lost {
			// The ledger took the item meanwhile: nothing to report.
			w.forgetLocked(o.e)
			w.st.Dropped++
			continue
		}
		if now.Before(w.resultRetry[o.e.data.store]) {
			keep = append(keep, o)
			continue
		}
		w.pending = append(w.pending, o)
	}
	clear(w.deferred[len(keep):])
	w.deferred = keep
}

// resultHoldLimit is how long a result whose write keeps failing with a
// store fault is held before its item is nacked: four times the longest
// backoff (2 min by default), at least a second.
func (w *Worker) resultHoldLimit() time.Duration {
	return max(4*w.cfg.DataFaultMaxBackoff, time.Second)
}

// nackDeferred turns the deferred outcomes into nacks (at shutdown: their
// results could not be stored, so the items go back to Pending for
// another worker, without a failure).
func (w *Worker) nackDeferred() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, o := range w.deferred {
		o.kind, o.result, o.ref, o.summary = rolloutv1.Outcome_OUTCOME_NACK, nil, nil, nil
		w.pending = append(w.pending, o)
	}
	w.deferred = nil
}

func (w *Worker) pendingReports() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

// flushOnce sends one batch of outcomes and applies the ledger's answers.
// On error the batch goes back to the front of the pending list.
func (w *Worker) flushOnce(ctx context.Context) error {
	w.mu.Lock()
	n := min(len(w.pending), w.cfg.MaxReportBatch)
	if n == 0 {
		w.mu.Unlock()
		return nil
	}
	batch := slices.Clone(w.pending[:n])
	w.pending = slices.Delete(w.pending, 0, n)
	w.mu.Unlock()

	// Results of runs with a store are written there (durably) first: a
	// report never names bytes that are not stored. Those whose store
	// failed with a fault that may go away wait in deferred.
	if deferred := w.storeResults(ctx, batch); len(deferred) > 0 {
		batch = slices.DeleteFunc(batch, func(o *outcome) bool { return slices.Contains(deferred, o) })
		now := time.Now()
		for _, o := range deferred {
			if o.deferredSince.IsZero() {
				o.deferredSince = now
			}
		}
		w.mu.Lock()
		w.deferred = append(w.deferred, deferred...)
		w.st.ResultWritesDeferred += uint64(len(deferred))
		w.mu.Unlock()
		if n = len(batch); n == 0 {
			return nil
		}
	}

	w.mu.Lock()
	req := &rolloutv1.ReportRequest{WorkerId: w.cfg.ID, Reports: make([]*rolloutv1.ItemReport, n)}
	for i, o := range batch {
		req.Reports[i] = &rolloutv1.ItemReport{
			Run: o.e.item.Run, Id: o.e.item.ID, Attempt: o.e.item.Attempt,
			Outcome: o.kind, Result: o.result, Reason: o.reason, Permanent: o.permanent,
			ResultRef: o.ref, Summary: o.summary, HeldObject: o.heldObject, StoreUnavailable: o.storeDown,
		}
	}
	w.mu.Unlock()

	resp, err := record(ctx, w, "Report", w.client.Report, req)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.st.ReportErrors++
		w.pending = append(batch, w.pending...)
		return err
	}
	results := resp.GetResults()
	byID := make(map[string]*rolloutv1.ReportResult, len(results))
	for _, r := range results {
		byID[string(r.GetId())] = r
	}
	var retry []*outcome
	for i, o := range batch {
		var r *rolloutv1.ReportResult
		if i < len(results) && bytes.Equal(results[i].GetId(), o.e.item.ID) {
			r = results[i]
		} else {
			r = byID[string(o.e.item.ID)]
		}
		switch r.GetStatus() {
		case rolloutv1.ReportStatus_REPORT_STATUS_APPLIED:
			w.forgetLocked(o.e)
			switch o.kind {
			case rolloutv1.Outcome_OUTCOME_DONE:
				w.st.Completed++
			case rolloutv1.Outcome_OUTCOME_FAILED:
				w.st.Failed++
			case rolloutv1.Outcome_OUTCOME_HELD:
				if o.storeDown {
					w.st.StoreHeld++
				} else {
					w.st.InputsHeld++
				}
			default:
				w.st.Nacked++
				if w.stopping {
					w.nacked = append(w.nacked, ItemRef{Run: o.e.item.Run, ID: o.e.item.ID, Index: o.e.item.Index, Attempt: o.e.item.Attempt})
				}
			}
		case rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS, rolloutv1.ReportStatus_REPORT_STATUS_NOT_FOUND:
			w.forgetLocked(o.e)
			w.st.Dropped++
			w.log.Debug("dropping item the ledger no longer gives us", "run", o.e.item.Run, "index", o.e.item.Index, "status", r.GetStatus())
			if r.GetStatus() == rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS {
				w.needReconcile = true
				notify(w.reconcile)
			}
		case rolloutv1.ReportStatus_REPORT_STATUS_CONFLICT:
			w.forgetLocked(o.e)
			w.st.Conflicts++
			w.log.Warn("result conflicts with the one recorded; the first stands", "run", o.e.item.Run, "index", o.e.item.Index)
		case rolloutv1.ReportStatus_REPORT_STATUS_INVALID:
			if o.kind == rolloutv1.Outcome_OUTCOME_DONE {
				// Fail the item rather than leave it Running forever.
				o.kind, o.result, o.ref, o.summary = rolloutv1.Outcome_OUTCOME_FAILED, nil, nil, nil
				o.reason = limits.CleanReason("coordinator refused the result: " + r.GetMessage())
				retry = append(retry, o)
				continue
			}
			if o.kind == rolloutv1.Outcome_OUTCOME_HELD {
				// Give the item back instead (no failure counted).
				w.log.Error("coordinator refused a held report as invalid; giving the item back instead", "run", o.e.item.Run,
					"index", o.e.item.Index, "message", r.GetMessage())
				o.kind, o.reason, o.heldObject, o.storeDown = rolloutv1.Outcome_OUTCOME_NACK, "", "", false
				w.st.Invalid++
				retry = append(retry, o)
				continue
			}
			w.forgetLocked(o.e)
			w.st.Invalid++
			w.log.Error("coordinator refused a report as invalid", "run", o.e.item.Run, "index", o.e.item.Index, "outcome", o.kind, "message", r.GetMessage())
		default:
			// No answer for this report: send it again.
			retry = append(retry, o)
		}
	}
	w.pending = append(retry, w.pending...)
	return nil
}

// registerOnce sends Register (the client retries transient errors until
// ctx ends).
func (w *Worker) registerOnce(ctx context.Context) error {
	_, err := record(ctx, w, "Register", w.client.Register, &rolloutv1.RegisterRequest{WorkerId: w.cfg.ID, Kinds: w.cfg.Kinds, Models: w.cfg.Models})
	return err
}

// reregister registers again after the coordinator answered cause (this
// worker is not registered: it was evicted, or it expired while silent), and
// asks for a reconciliation with OwnedItems, which drops the unstarted items
// the ledger no longer gives this worker (all of them after an eviction).
// The heartbeat and claim loops may both call it; a second Register is a
// harmless refresh.
func (w *Worker) reregister(ctx context.Context, cause error) error {
	w.log.Warn("the coordinator says this worker is not registered (evicted or expired); registering again", "error", cause)
	err := w.registerOnce(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("registering again failed; will retry", "error", err)
		}
		return err
	}
	w.mu.Lock()
	w.st.Reregistered++
	w.mu.Unlock()
	w.requestReconcile()
	return nil
}

// heartbeats sends heartbeats until ctx ends: every HeartbeatInterval, or
// every interval the leader's last reply asked when that is longer (a large
// fleet's heartbeats are spread over the leader's budget), each interval
// shortened by a random jitter of up to a fifth so that a fleet started
// together does not heartbeat together. After a failed heartbeat the next
// comes after HeartbeatInterval (a new leader hears from it soon).
func (w *Worker) heartbeats(ctx context.Context) {
	asked := time.Duration(0)
	t := time.NewTimer(heartbeatJitter(w.cfg.HeartbeatInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, max(5*w.cfg.HeartbeatInterval, 5*time.Second))
		next, err := w.heartbeat(hctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			w.log.Warn("heartbeat failed", "error", err)
		}
		if err == nil && next != asked {
			if next > w.cfg.HeartbeatInterval {
				w.log.Debug("the leader asks for a longer heartbeat interval", "interval", next)
			}
			asked = next
		}
		if err != nil {
			asked = 0
		}
		t.Reset(heartbeatJitter(max(w.cfg.HeartbeatInterval, asked)))
	}
}

// maxAskedHeartbeat caps the interval a leader may ask between heartbeats.
const maxAskedHeartbeat = 10 * time.Minute

// heartbeatJitter shortens d by a random fraction of up to a fifth.
func heartbeatJitter(d time.Duration) time.Duration {
	return d - rand.N(d/5+1)
}

// backlogOf is a heartbeat's backlog (32-bit on the wire, and in the
// ledger's worker records) of a worker holding n unfinished items: n, or
// 4294967295 for more (a worker holding ranges may hold more than 2^32
// indexes). A plain conversion wrapped: a busy worker holding 2^32 indexes
// reported a backlog of 0, the backlog of an idle one.
func backlogOf(n int) uint32 {
	return uint32(min(max(n, 0), math.MaxUint32))
}

// heartbeat sends one heartbeat and drops the items the reply says are lost;
// it returns the interval the leader asks until the next one (0: the
// worker's own).
func (w *Worker) heartbeat(ctx context.Context) (time.Duration, error) {
	w.mu.Lock()
	req := &rolloutv1.HeartbeatRequest{
		WorkerId:    w.cfg.ID,
		Backlog:     backlogOf(w.queuedLocked() + w.executing),
		ItemsPerSec: w.rate.rate(time.Now()),
		Held:        make([]*rolloutv1.ItemKey, 0, len(w.held)),
	}
	for _, e := range w.held {
		k := &rolloutv1.ItemKey{Run: e.item.Run, Id: e.item.ID, Attempt: e.item.Attempt}
		req.Held = append(req.Held, k)
		if r := e.rng; r != nil {
			if !e.lost && (r.next > r.lo || len(r.running) > 0) {
				// The first index not started: a steal splits past it.
				req.Executing = append(req.Executing, &rolloutv1.ItemKey{Run: e.item.Run, Id: e.item.ID, Attempt: e.item.Attempt, Started: r.next})
			}
			continue
		}
		if e.state == executing {
			req.Executing = append(req.Executing, k)
		}
	}
	w.mu.Unlock()

	resp, err := record(ctx, w, "Heartbeat", w.client.Heartbeat, req)
	if errors.Is(err, coordclient.ErrNotRegistered) {
		return 0, w.reregister(ctx, err)
	}
	if err != nil {
		return 0, err
	}
	next := time.Duration(min(resp.GetNextHeartbeatMs(), uint64(maxAskedHeartbeat/time.Millisecond))) * time.Millisecond
	if len(resp.GetLost()) == 0 && len(resp.GetBounds()) == 0 {
		return next, nil
	}
	w.mu.Lock()
	for _, b := range resp.GetBounds() {
		e, ok := w.held[key{b.GetRun(), string(b.GetId())}]
		if ok && e.rng != nil && !e.lost && e.item.Attempt == b.GetAttempt() {
			w.applyBoundsLocked(e, b.GetLo(), b.GetHi())
		}
	}
	dropped := 0
	for _, k := range resp.GetLost() {
		e, ok := w.held[key{k.GetRun(), string(k.GetId())}]
		if !ok || e.item.Attempt != k.GetAttempt() || e.lost {
			continue
		}
		if e.rng != nil {
			w.dropRangeLocked(e)
			dropped++
			continue
		}
		switch e.state {
		case queued:
			w.queue = slices.DeleteFunc(w.queue, func(q *entry) bool { return q == e })
			e.state = finished
			w.forgetLocked(e)
			w.st.Dropped++
			dropped++
		case executing:
			// Cancelled; the executor drops it without reporting.
			e.lost = true
			e.cancel()
			dropped++
		case finished:
			// Its report is on the way; the ledger's answer decides.
		}
	}
	w.mu.Unlock()
	if dropped > 0 {
		w.log.Info("dropped items lost to another worker", "count", dropped)
		notify(w.space)
	}
	return next, nil
}

// toDeps copies a reply's dependencies.
func toDeps(deps []*rolloutv1.Dependency) []Dependency {
	if len(deps) == 0 {
		return nil
	}
	out := make([]Dependency, len(deps))
	for i, d := range deps {
		out[i] = Dependency{ID: bytes.Clone(d.GetId()), Result: bytes.Clone(d.GetResult()), Summary: bytes.Clone(d.GetSummary())}
	}
	return out
}

// summary asks a Summarizer backend for the summary of a Done result,
// dropping (with a log line) one over MaxSummaryBytes or one whose
// computation panicked.
func (w *Worker) summary(item Item, res []byte) (out []byte) {
	sz, ok := w.backend.(Summarizer)
	if !ok {
		return nil
	}
	defer func() {
		if p := recover(); p != nil {
			w.log.Warn("the backend's result summary panicked; reporting none", "run", item.Run, "index", item.Index, "panic", p)
			out = nil
		}
	}()
	s := sz.Summary(item, res)
	if len(s) > MaxSummaryBytes {
		w.log.Warn("the backend's result summary is too large; reporting none", "run", item.Run, "index", item.Index,
			"bytes", len(s), "limit", MaxSummaryBytes)
		return nil
	}
	return s
}
