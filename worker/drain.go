package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/internal/limits"
)

// Drain timing.
const (
	// maxDrainReserve caps the part of a drain budget kept for the steps
	// after the in-flight phase (reports, deregistration).
	maxDrainReserve = 5 * time.Second
	// forceGrace is what each step after the in-flight phase still gets once
	// the deadline has passed (or the exit is forced), so that the nacks go
	// out where they can.
	forceGrace = time.Second
	// maxDrainTick bounds the time between two re-evaluations of the
	// in-flight items during a drain.
	maxDrainTick = 50 * time.Millisecond
)

// loops are the goroutines of a running Worker and their stop controls.
type loops struct {
	stopPulling, cancelExec, cancelRep, cancelHB context.CancelFunc
	claimWG, execWG, repWG, hbWG                 sync.WaitGroup
	// stop ends idle executors; repStop makes the reporter flush and return.
	stop, repStop chan struct{}
}

// run is Run after the check that it runs once.
func (w *Worker) run(ctx context.Context) error {
	defer w.stores.close()
	bg := context.WithoutCancel(ctx)
	hintCtx, cancelHints := context.WithCancel(bg)
	defer cancelHints()
	notices, err := w.watchHints(hintCtx)
	if err != nil {
		return err
	}

	early, err := w.register(ctx, notices)
	if early != nil {
		// Preempted before any work: nothing is held. Deregistering hands
		// back whatever the ledger still gives this worker from before.
		n := w.normalize(*early, time.Now())
		rep := DrainReport{Notice: n, Started: n.Received, Deadline: n.Deadline, Forced: n.Force}
		w.log.Info("preemption notice before registration; deregistering", "provider", n.Provider, "reason", n.Reason)
		rep.Deregistered = w.deregister(bg, w.stepBound(n.Deadline), leaveReason(n, nil))
		rep.Ended = time.Now()
		if obs := w.cfg.Observer; obs != nil {
			obs.ObserveDrainStart(n)
		}
		w.setDrained(rep)
		return nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, coordclient.ErrRevoked) {
			return fmt.Errorf("worker %s: register: %w: %w", w.cfg.ID, ErrRevoked, err)
		}
		return fmt.Errorf("worker: register %s: %w", w.cfg.ID, err)
	}
	w.log.Info("registered", "term", w.client.Guard().Highest(), "leader", w.client.Leader())
	w.requestReconcile()

	l := &loops{stop: make(chan struct{}), repStop: make(chan struct{})}
	var pullCtx, execCtx, repCtx, hbCtx context.Context
	pullCtx, l.stopPulling = context.WithCancel(ctx)
	defer l.stopPulling()
	execCtx, l.cancelExec = context.WithCancel(bg)
	defer l.cancelExec()
	repCtx, l.cancelRep = context.WithCancel(bg)
	defer l.cancelRep()
	hbCtx, l.cancelHB = context.WithCancel(bg)
	defer l.cancelHB()

	for range w.cfg.Concurrency {
		l.execWG.Go(func() { w.executor(execCtx, l.stop) })
	}
	l.repWG.Go(func() { w.reporter(repCtx, l.repStop) })
	l.hbWG.Go(func() { w.heartbeats(hbCtx) })
	l.claimWG.Go(func() { w.claimer(pullCtx) })

	var n Notice
	select {
	case <-ctx.Done():
		n = Notice{Provider: ProviderShutdown, Reason: "Run's context ended"}
	case n = <-notices:
	case <-w.revoked:
		return w.stopRevoked(l)
	}
	w.drain(ctx, l, w.normalize(n, time.Now()), notices)
	return nil
}

// noteRevoked records that a call was refused because the worker's
// certificate is revoked (the first such refusal is kept), which ends Run.
func (w *Worker) noteRevoked(err error) {
	w.revokedOnce.Do(func() {
		w.revokedErr = err
		close(w.revoked)
	})
}

// revokedGrace bounds how long a revoked worker waits for its loops to
// return: every call they make is refused already.
const revokedGrace = 5 * time.Second

// stopRevoked ends a worker whose certificate is revoked: nothing it sends
// will be accepted again (no report, no deregistration: the revocation
// evicted it and its items are pending for the others), so every loop is
// cancelled at once, and Run returns the refusal (ErrRevoked).
func (w *Worker) stopRevoked(l *loops) error {
	w.log.Error("this worker's certificate is revoked: stopping; nothing more is sent", "error", w.revokedErr)
	l.stopPulling()
	l.cancelExec()
	l.cancelRep()
	l.cancelHB()
	for _, wg := range []*sync.WaitGroup{&l.claimWG, &l.execWG, &l.repWG, &l.hbWG} {
		if !waitFor(wg, revokedGrace) {
			break
		}
	}
	return fmt.Errorf("worker %s: %w: %w", w.cfg.ID, ErrRevoked, w.revokedErr)
}

// watchHints starts every configured hint and merges their notices into one
// channel, which is never closed.
func (w *Worker) watchHints(ctx context.Context) (<-chan Notice, error) {
	out := make(chan Notice, len(w.cfg.Hints)+1)
	for i, h := range w.cfg.Hints {
		ch, err := h.Watch(ctx)
		if err != nil {
			return nil, fmt.Errorf("worker: starting hint %d (%T): %w", i, h, err)
		}
		go func() {
			for {
				select {
				case n, ok := <-ch:
					if !ok {
						return
					}
					select {
					case out <- n:
					case <-ctx.Done():
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	return out, nil
}

// register registers the worker with the coordinator. A notice arriving
// meanwhile cancels it and is returned instead.
func (w *Worker) register(ctx context.Context, notices <-chan Notice) (*Notice, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan Notice, 1)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case n := <-notices:
			got <- n
			cancel()
		case <-stop:
		}
	}()
	err := w.registerOnce(rctx)
	close(stop)
	<-done
	select {
	case n := <-got:
		return &n, nil
	default:
		return nil, err
	}
}

// normalize fills in a notice's defaults as of now: Received, a Deadline of
// Received+DrainTimeout, and a deadline of now when forced.
func (w *Worker) normalize(n Notice, now time.Time) Notice {
	if n.Received.IsZero() {
		n.Received = now
	}
	if n.Deadline.IsZero() {
		n.Deadline = n.Received.Add(w.cfg.DrainTimeout)
	}
	if n.Force && n.Deadline.After(now) {
		n.Deadline = now
	}
	return n
}

// stepBound is how long a step after the in-flight phase may take: the time
// left to deadline, at least forceGrace, at most ShutdownTimeout.
func (w *Worker) stepBound(deadline time.Time) time.Duration {
	return min(w.cfg.ShutdownTimeout, max(time.Until(deadline), forceGrace))
}

// cutoffFor is the time by which in-flight items must have finished for a
// drain started at start to end by deadline: a quarter of the budget (at
// most maxDrainReserve) is kept for reporting and deregistering.
func cutoffFor(start, deadline time.Time) time.Time {
	reserve := min(max(deadline.Sub(start)/4, 0), maxDrainReserve)
	return deadline.Add(-reserve)
}

// drain is the drain state machine, run once when Run's context ends or the
// first notice arrives:
//
//  1. stop pulling (no claim, steal or adoption starts again);
//  2. nack every item that has not started (Pending again, for others);
//  3. let each in-flight item run on only while its expected finish - its
//     start plus the measured mean execution time - falls before the
//     cut-off (the deadline less a reserve); cancel and nack it as soon as
//     it does not, and cancel everything at the cut-off;
//  4. flush the outcomes and deregister (which re-pends anything the
//     ledger still gives this worker), each step bounded by the deadline;
//  5. record a DrainReport.
//
// A later notice with an earlier deadline, a forcing notice (deadline now)
// or the end of ctx (deadline at most DrainTimeout away) shortens the drain
// while items are in flight.
func (w *Worker) drain(ctx context.Context, l *loops, n Notice, notices <-chan Notice) {
	start := time.Now()
	deadline := n.Deadline
	rep := DrainReport{Notice: n, Started: start, Forced: n.Force}
	if obs := w.cfg.Observer; obs != nil {
		obs.ObserveDrainStart(n)
	}
	w.log.Info("draining: stop pulling, nack unstarted items, finish in-flight items that fit the budget",
		"provider", n.Provider, "reason", n.Reason, "budget", deadline.Sub(start).Round(time.Millisecond))

	// 1. Stop pulling.
	l.stopPulling()
	l.claimWG.Wait()

	// 2. Nack what has not started.
	w.mu.Lock()
	w.stopping = true
	rep.Unstarted = w.queuedLocked()
	for _, e := range w.queue {
		if e.rng != nil {
			continue
		}
		e.state = finished
		w.pending = append(w.pending, &outcome{e: e, kind: rolloutv1.Outcome_OUTCOME_NACK})
	}
	w.queue = nil
	// Ranges start nothing more; their finished prefixes are reported
	// and their rests given back (nack_rest) at the final flush.
	for _, e := range w.held {
		if e.rng != nil {
			e.rng.nack = true
		}
	}
	rep.InFlight = w.executing
	w.armReporterLocked()
	w.mu.Unlock()
	// Ranges give their unstarted indexes back now (release_from), not
	// after their started ones finish.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), w.stepBound(deadline))
	w.releaseUnstarted(rctx)
	rcancel()
	close(l.stop)
	notify(w.flush)

	// 3. In-flight items: finish those that fit.
	execDone := make(chan struct{})
	go func() {
		l.execWG.Wait()
		close(execDone)
	}()
	cutoff := cutoffFor(start, deadline)
	tick := time.NewTicker(max(min(maxDrainTick, deadline.Sub(start)/20), time.Millisecond))
	defer tick.Stop()
	ctxDone := ctx.Done()
	shorten := func(d time.Time) {
		if d.Before(deadline) {
			deadline = d
			cutoff = cutoffFor(start, deadline)
		}
	}
inFlight:
	for {
		now := time.Now()
		rep.Cancelled += w.cancelUnfitting(now, cutoff)
		if !now.Before(cutoff) {
			break
		}
		select {
		case <-execDone:
			break inFlight
		case <-tick.C:
		case m := <-notices:
			m = w.normalize(m, time.Now())
			rep.Forced = rep.Forced || m.Force
			w.log.Info("another notice while draining", "provider", m.Provider, "reason", m.Reason, "force", m.Force)
			shorten(m.Deadline)
		case <-ctxDone:
			ctxDone = nil
			shorten(time.Now().Add(w.cfg.DrainTimeout))
		}
	}
	l.cancelExec()
	select {
	case <-execDone:
	case <-time.After(w.stepBound(deadline)):
		w.log.Error("backend did not return after cancellation; leaving its items to the coordinator")
	}

	// 4. Report and deregister.
	close(l.repStop)
	if !waitFor(&l.repWG, w.stepBound(deadline)) {
		// A Report call blocked on an unreachable coordinator.
		l.cancelRep()
		l.repWG.Wait()
	}
	l.cancelHB()
	l.hbWG.Wait()
	w.mu.Lock()
	counts := &drainCounts{finished: rep.InFlight - rep.Cancelled, nacked: len(w.nacked), cancelled: rep.Cancelled}
	w.mu.Unlock()
	rep.Deregistered = w.deregister(context.WithoutCancel(ctx), w.stepBound(deadline), leaveReason(n, counts))

	w.mu.Lock()
	rep.Unreported = len(w.held)
	rep.Nacked = w.nacked
	w.nacked = nil
	clear(w.held)
	w.pending = nil
	w.mu.Unlock()
	rep.Deadline = deadline
	rep.Ended = time.Now()
	w.setDrained(rep)
	logf := w.log.Info
	if !rep.WithinDeadline() {
		logf = w.log.Warn
	}
	logf("drain finished", "provider", n.Provider, "took", rep.Ended.Sub(start).Round(time.Millisecond),
		"within_deadline", rep.WithinDeadline(), "unstarted", rep.Unstarted, "in_flight", rep.InFlight,
		"cancelled", rep.Cancelled, "nacked", len(rep.Nacked), "unreported", rep.Unreported,
		"deregistered", rep.Deregistered, "nacked_items", FormatItemRefs(rep.Nacked, 64))
}

// cancelUnfitting cancels the executing items that cannot finish by cutoff:
// all of them once now has reached cutoff, otherwise those whose start plus
// the measured mean execution time is after cutoff. Items are never
// cancelled on a guess: with nothing measured they run until the cut-off.
// It returns how many it cancelled; their outcome will be a nack.
func (w *Worker) cancelUnfitting(now, cutoff time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.executing == 0 {
		return 0
	}
	mean, known := w.rate.meanTook(now)
	n := 0
	for _, e := range w.held {
		if e.rng != nil && !e.lost {
			for idx, s := range e.rng.running {
				if s.drained {
					continue
				}
				cut := !now.Before(cutoff)
				if !cut && known {
					cut = s.started.Add(mean).After(cutoff)
				}
				if cut {
					s.drained = true
					s.cancel()
					n++
					w.log.Debug("cancelling in-flight index that does not fit the drain budget", "run", e.item.Run, "index", idx,
						"running_for", now.Sub(s.started).Round(time.Millisecond), "mean", mean.Round(time.Millisecond), "known", known)
				}
			}
			continue
		}
		if e.state != executing || e.lost || e.drained || e.cancel == nil {
			continue
		}
		cut := !now.Before(cutoff)
		if !cut && known {
			cut = e.started.Add(mean).After(cutoff)
		}
		if cut {
			e.drained = true
			e.cancel()
			n++
			w.log.Debug("cancelling in-flight item that does not fit the drain budget", "run", e.item.Run, "index", e.item.Index,
				"running_for", now.Sub(e.started).Round(time.Millisecond), "mean", mean.Round(time.Millisecond), "known", known)
		}
	}
	return n
}

// deregister tells the coordinator this worker is leaving (it re-pends the
// worker's items), waiting at most d. It reports whether the coordinator
// confirmed.
func (w *Worker) deregister(ctx context.Context, d time.Duration, reason string) bool {
	dctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	resp, err := record(dctx, w, "Deregister", w.client.Deregister, &rolloutv1.DeregisterRequest{WorkerId: w.cfg.ID, Reason: reason})
	if err != nil {
		w.log.Warn("deregister failed; the coordinator's failure scan will re-pend remaining items", "error", err)
		return false
	}
	w.log.Info("deregistered", "repended", resp.GetRepended())
	return true
}

// drainCounts is what a drain did with the items it held, for leaveReason:
// in-flight items that ran to their end, nacks the ledger applied, in-flight
// items cancelled.
type drainCounts struct{ finished, nacked, cancelled int }

// leaveReason is the reason a worker gives when it deregisters (recorded in
// the coordinator's event history): a drain names its notice and what it did
// with the items it held, e.g. `drain: aws: EC2 spot instance-action
// "terminate" at ...; finished 3, nacked 2`; the end of Run's context is a
// plain shutdown. c is nil when the notice came before any work.
func leaveReason(n Notice, c *drainCounts) string {
	done := "before any work"
	if c != nil {
		done = fmt.Sprintf("finished %d, nacked %d", c.finished, c.nacked)
		if c.cancelled > 0 {
			done += fmt.Sprintf(" (%d cancelled in flight)", c.cancelled)
		}
	}
	if n.Provider == ProviderShutdown {
		return limits.CleanReason("shutdown; " + done)
	}
	notice := n.Provider
	if n.Reason != "" {
		notice += ": " + n.Reason
	}
	if n.Force {
		notice += " (forced)"
	}
	return limits.CleanReason(fmt.Sprintf("drain: %s; %s", notice, done))
}

func (w *Worker) setDrained(rep DrainReport) {
	w.mu.Lock()
	w.drained = &rep
	w.mu.Unlock()
	if obs := w.cfg.Observer; obs != nil {
		obs.ObserveDrain(rep)
	}
}

// Drained returns the report of the drain that ended Run, and false while
// Run has not drained (it is running, or it returned without registering).
func (w *Worker) Drained() (DrainReport, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.drained == nil {
		return DrainReport{}, false
	}
	return *w.drained, true
}

// holdTargetLocked is how many items the worker aims to hold (queued and
// executing): before anything completed, Backlog; after, enough for
// ClaimHorizon at the measured items/s, at least Concurrency and at most
// Backlog.
func (w *Worker) holdTargetLocked(now time.Time) int {
	if !w.rate.measured() {
		return w.cfg.Backlog
	}
	want := math.Ceil(w.rate.rate(now) * w.cfg.ClaimHorizon.Seconds())
	if want >= float64(w.cfg.Backlog) {
		return w.cfg.Backlog
	}
	return max(int(want), w.cfg.Concurrency)
}

// FormatItemRefs renders refs compactly as run#index, at most limit of
// them (then "+N more").
func FormatItemRefs(refs []ItemRef, limit int) string {
	var b strings.Builder
	for i, r := range refs {
		if i == limit {
			fmt.Fprintf(&b, " +%d more", len(refs)-limit)
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s#%d", r.Run, r.Index)
		if r.Count > 0 {
			fmt.Fprintf(&b, "+%d", r.Count)
		}
	}
	return b.String()
}
