package runs

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store"
)

// SweepConfig configures Sweep.
type SweepConfig struct {
	// Grace is how old an object must be before it may be removed: a
	// submit uploads its chunks before the run exists, and a worker writes
	// its result object before it reports it, so a young unreferenced
	// object may be about to be referenced. Must be positive.
	Grace time.Duration
	// DryRun counts what would be removed and removes nothing.
	DryRun bool
	// Timeout bounds each call to the cluster (0: DefaultTimeout).
	Timeout time.Duration
	// Now is the time objects' ages are measured from (zero: time.Now()).
	Now time.Time
}

// SweepResult counts what Sweep found and removed.
type SweepResult struct {
	// Runs is how many of the store's runs the ledger holds; Orphans how
	// many run prefixes it does not (deleted runs, e.g. by retention, or
	// submits that never created their run).
	Runs, Orphans int
	// Garbage counts result objects no item of a live run references (a
	// stale owner's, a stolen item's); Removed counts the objects removed
	// (orphans' included); Young counts objects left because they are
	// younger than Grace.
	Garbage, Removed, Young int
}

func (r SweepResult) String() string {
	return fmt.Sprintf("%d run(s) in the ledger, %d orphaned run prefix(es); %d unreferenced result object(s); %d object(s) removed, %d left as younger than the grace period",
		r.Runs, r.Orphans, r.Garbage, r.Removed, r.Young)
}

// Sweep removes from st what no run of the ledger needs: for each run the
// ledger holds whose store is st, the result objects none of its items
// references (garbage of stale owners and stolen items: the ledger recorded
// another object for them); and every run prefix (runs/NAME/) of a run the
// ledger does not hold. Only objects older than cfg.Grace are removed.
// Inputs of live runs are kept (a resubmit reuses them). The coordinator
// is only read; the store is the caller's.
func Sweep(ctx context.Context, c Coordinator, st *store.Store, cfg SweepConfig) (SweepResult, error) {
	var res SweepResult
	if cfg.Grace <= 0 {
		return res, fmt.Errorf("%w: Grace must be positive, got %v", ErrInvalidConfig, cfg.Grace)
	}
	now := cfg.Now
	if now.IsZero() {
		now = time.Now()
	}
	timeout := orDefault(cfg.Timeout, DefaultTimeout)
	sctx, cancel := context.WithTimeout(ctx, timeout)
	resp, err := c.RunStatus(sctx, &rolloutv1.RunStatusRequest{})
	cancel()
	if err != nil {
		return res, callError("reading the runs", timeout, err)
	}
	live := map[string]bool{}
	for _, rc := range resp.GetRuns() {
		if rc.GetStore() == st.URL() {
			live[rc.GetName()] = true
		}
	}
	// The store's run prefixes, by escaped name.
	prefixes := map[string][]store.Object{}
	if err := st.List(ctx, "runs/", func(o store.Object) error {
		rest := strings.TrimPrefix(o.Key, "runs/")
		if i := strings.IndexByte(rest, '/'); i > 0 {
			prefixes[rest[:i]] = append(prefixes[rest[:i]], o)
		}
		return nil
	}); err != nil {
		return res, err
	}
	remove := func(o store.Object) error {
		if now.Sub(o.ModTime) < cfg.Grace {
			res.Young++
			return nil
		}
		res.Removed++
		if cfg.DryRun {
			return nil
		}
		return st.Delete(ctx, o.Key)
	}
	for esc, objs := range prefixes {
		name, err := url.PathUnescape(esc)
		if err != nil || store.RunPrefix(name) != "runs/"+esc+"/" {
			continue // not a prefix this package wrote
		}
		if !live[name] {
			res.Orphans++
			for _, o := range objs {
				if err := remove(o); err != nil {
					return res, err
				}
			}
			continue
		}
		res.Runs++
		referenced := map[string]bool{}
		err = Results(ctx, c, name, ResultsConfig{Timeout: timeout}, func(it *rolloutv1.ResultItem) error {
			if r := it.GetResultRef(); r != nil {
				referenced[r.GetObject()] = true
			}
			return nil
		})
		if err != nil {
			return res, err
		}
		for _, o := range objs {
			if !strings.HasPrefix(o.Key, store.ResultPrefix(name)) || referenced[o.Key] {
				continue
			}
			res.Garbage++
			if err := remove(o); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}
