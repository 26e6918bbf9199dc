package runs

import (
	"context"
	"errors"
	"fmt"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// DefaultInterval is how often Wait polls when WaitConfig.Interval is zero.
const DefaultInterval = time.Second

// Target is the number of items a run is expected to hold: its total, or
// the total its spec announced when more. It is rc.Target.
func Target(rc *rolloutv1.RunCounters) uint64 { return rc.Target() }

// Finished reports whether every expected item of the run is Done or Dead,
// or the run was cancelled and nothing of it is Pending or Running. It is
// rc.Finished.
func Finished(rc *rolloutv1.RunCounters) bool { return rc.Finished() }

// ErrStuck: the run cannot finish as it stands. Every Pending item waits on
// a dependency that is not Done and nothing is Running, so nothing can
// complete and unblock them: a dependency is Dead (resubmit it with retry
// dead to go on) or was created Dead.
var ErrStuck = errors.New("run is stuck: every pending item waits on a dependency that is not done, and nothing is running")

// Stuck reports whether the run's counters say it cannot finish (see
// ErrStuck). It is rc.Stuck.
func Stuck(rc *rolloutv1.RunCounters) bool { return rc.Stuck() }

// findRun picks the counters of run from a RunStatus reply.
func findRun(resp *rolloutv1.RunStatusResponse, run string) *rolloutv1.RunCounters {
	for _, rc := range resp.GetRuns() {
		if rc.GetName() == run {
			return rc
		}
	}
	return nil
}

// Status reads the status of one run: the whole reply (header, workers)
// and the run's counters. An unknown run is an error matching
// ErrRunNotFound; a failed call is a *CallError. timeout bounds the call
// (0: DefaultTimeout).
func Status(ctx context.Context, c Coordinator, run string, timeout time.Duration) (*rolloutv1.RunStatusResponse, *rolloutv1.RunCounters, error) {
	timeout = orDefault(timeout, DefaultTimeout)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.RunStatus(cctx, &rolloutv1.RunStatusRequest{Run: run})
	if isNotFound(err) {
		return nil, nil, newNotFound(run, err)
	}
	if err != nil {
		return nil, nil, callError("reading run status", timeout, err)
	}
	rc := findRun(resp, run)
	if rc == nil {
		return nil, nil, newNotFound(run, nil)
	}
	return resp, rc, nil
}

// WaitConfig configures Wait.
type WaitConfig struct {
	// Interval is the time between two status reads (0: DefaultInterval).
	Interval time.Duration
	// Timeout bounds each status read, with the client's retries (0:
	// DefaultTimeout).
	Timeout time.Duration
	// Progress, when set, is called with every status read, the last
	// (finished) one included. An error it returns ends Wait with that
	// error.
	Progress func(resp *rolloutv1.RunStatusResponse, rc *rolloutv1.RunCounters) error
}

// Wait reads the run's status every cfg.Interval until it is Finished and
// returns its last counters. It returns early with ctx's error when ctx
// ends, with Status's error when a read fails (the cluster silent for
// cfg.Timeout, or the run unknown), with the error cfg.Progress returns, or,
// with the last counters, with an error matching ErrStuck when the run
// cannot finish (Stuck: its pending items all wait on dependencies that
// will not complete).
func Wait(ctx context.Context, c Coordinator, run string, cfg WaitConfig) (*rolloutv1.RunCounters, error) {
	if cfg.Interval < 0 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: Interval and Timeout must not be negative, got %v and %v", ErrInvalidConfig, cfg.Interval, cfg.Timeout)
	}
	t := time.NewTicker(orDefault(cfg.Interval, DefaultInterval))
	defer t.Stop()
	for {
		resp, rc, err := Status(ctx, c, run, cfg.Timeout)
		if err != nil {
			return nil, err
		}
		if cfg.Progress != nil {
			if err := cfg.Progress(resp, rc); err != nil {
				return nil, err
			}
		}
		if rc.Finished() {
			return rc, nil
		}
		if rc.Stuck() {
			return rc, fmt.Errorf("%w: %d pending, all blocked; %d dead", ErrStuck, rc.GetPending(), rc.GetDead())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
