package runs

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/storeurl"
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
	// Distinct are store URLs the operator knows to be other stores than
	// the one swept, though they look related to it (storeurl.Related: a
	// directory inside it, the same bucket with other parameters): runs
	// on them do not make Sweep refuse. Each must pass storeurl.Check.
	Distinct []string
	// Timeout bounds each call to the cluster (0: DefaultTimeout).
	Timeout time.Duration
	// Now is the time objects' ages are measured from (zero: time.Now()).
	Now time.Time
	// Removing, when set, is called with each object Sweep removes (or,
	// with DryRun, would remove) and why, before it is removed.
	Removing func(o store.Object, why string)
	// Foreign, when set, is called with each foreign run prefix (not this
	// cluster's: ForeignCluster, ForeignLegacy, ForeignOtherRun), why, and
	// its objects' count and bytes, in key order.
	Foreign func(prefix, why string, objects int, bytes int64)
	// RemoveForeign names foreign run prefixes to remove all the same
	// (each a whole run prefix: runs/NAME/ or
	// clusters/ID/runs/NAME/INCARNATION/; a live run's own is refused).
	// Grace, DryRun and the references of live runs still apply. The
	// caller decides who may ask for it (the CLI: an admin certificate).
	RemoveForeign []string
}

// Why Sweep removes an object (SweepConfig.Removing).
const (
	// WhyOrphan: the object is under the prefix of a run of this cluster
	// (clusters/OWN-ID/runs/NAME/INCARNATION/) that the ledger does not
	// hold, and no live run references it.
	WhyOrphan = "its run is not in the ledger"
	// WhyUnreferenced: a result object of a live run that none of the
	// ledger's items references.
	WhyUnreferenced = "no item references it"
	// WhyForeignRemoved: the object is under a foreign run prefix that
	// SweepConfig.RemoveForeign names.
	WhyForeignRemoved = "a foreign prefix named by --remove-foreign"
)

// Why a run prefix is foreign (SweepConfig.Foreign).
const (
	// ForeignCluster: under clusters/ID/ of another cluster.
	ForeignCluster = "written by another cluster"
	// ForeignLegacy: a runs/NAME/ prefix (the layout before cluster
	// identities) of a run this cluster's ledger does not hold: it cannot
	// be told whose it is.
	ForeignLegacy = "written before cluster identities by a run this ledger does not hold (unattributable)"
	// ForeignOtherRun: a runs/NAME/ prefix of a run this ledger holds under
	// the attributable layout: an older run of that name, or another
	// cluster's before identities.
	ForeignOtherRun = "a runs/NAME/ prefix, but this ledger's run of that name keeps its objects elsewhere"
)

// SweepResult counts what Sweep found and removed.
type SweepResult struct {
	// Cluster is the swept cluster's identity.
	Cluster string
	// Runs is how many of the store's run prefixes belong to runs the
	// ledger holds; Orphans how many of this cluster's run prefixes belong
	// to runs it does not (deleted runs, e.g. by retention, or submits that
	// never created their run).
	Runs, Orphans int
	// Foreign counts the run prefixes that are not this cluster's (another
	// cluster's, or an unattributable runs/NAME/): listed, left alone
	// unless RemoveForeign names them; ForeignObjects their objects.
	Foreign, ForeignObjects int
	// Garbage counts result objects no item of a live run references (a
	// stale owner's, a stolen item's); Removed counts the objects removed
	// (orphans' and named foreign prefixes' included); Young counts objects
	// left because they are younger than Grace; Referenced counts objects
	// left, though under an orphaned or named foreign prefix or
	// unreferenced by their own run, because an item of a live run
	// references them.
	Garbage, Removed, Young, Referenced int
	// DryRun: Removed counts what would have been removed.
	DryRun bool
}

func (r SweepResult) String() string {
	removed := "removed"
	if r.DryRun {
		removed = "to remove (dry run)"
	}
	s := fmt.Sprintf("%d run(s) in the ledger, %d orphaned run prefix(es); %d unreferenced result object(s); %d object(s) %s, %d left as younger than the grace period",
		r.Runs, r.Orphans, r.Garbage, r.Removed, removed, r.Young)
	if r.Referenced > 0 {
		s += fmt.Sprintf(", %d left as referenced by another live run", r.Referenced)
	}
	if r.Foreign > 0 {
		s += fmt.Sprintf("; %d foreign run prefix(es) (%d object(s)) left alone", r.Foreign, r.ForeignObjects)
	}
	return s
}

// RunPrefixOf returns the whole run prefix key is under:
// "clusters/ID/runs/NAME/INCARNATION/" or "runs/NAME/", else "" (a key no
// run wrote: outside runs/ and clusters/, or not of that shape).
func RunPrefixOf(key string) string {
	parts := strings.SplitN(key, "/", 6)
	switch {
	case len(parts) >= 3 && parts[0] == "runs" && parts[1] != "":
		return "runs/" + parts[1] + "/"
	case len(parts) == 6 && parts[0] == "clusters" && parts[2] == "runs":
		p := strings.Join(parts[:5], "/") + "/"
		if _, _, _, err := storeurl.ParseDataPrefix(p); err == nil {
			return p
		}
	}
	return ""
}

// checkWholeRunPrefix reports why p is not a whole run prefix
// ("runs/NAME/" or "clusters/ID/runs/NAME/INCARNATION/").
func checkWholeRunPrefix(p string) error {
	if RunPrefixOf(p+"x") != p {
		return fmt.Errorf("%w: RemoveForeign %q is not a whole run prefix (runs/NAME/ or clusters/ID/runs/NAME/INCARNATION/, with the trailing slash)", ErrInvalidConfig, p)
	}
	return nil
}

// relatedRun is a run of the ledger whose store may share st's bytes.
type relatedRun struct{ name, store, why string }

// maxNamed bounds how many related runs an ErrAmbiguousStore names.
const maxNamed = 10

// Sweep removes from st what no run of this cluster needs, and lists, but
// leaves alone, what it cannot attribute to this cluster.
//
// Which runs are st's: those whose recorded store has st's identity
// (storeurl.Identity of both sides: a trailing slash, "//", "/./", ".."
// or a parameter that does not change where the bytes live makes no
// other store, and runs recorded with any spelling count). If the ledger
// holds a run whose store has another identity but may share st's bytes
// (storeurl.Related: a directory inside st's or around it, the same bucket
// through another endpoint, region, prefix or unknown parameter), or
// whose store URL cannot be read, Sweep cannot tell whether that run's
// objects are in st: it removes nothing and returns ErrAmbiguousStore
// naming those runs, unless cfg.Distinct names their stores.
//
// Whose objects are whose: a run keeps its objects under its data prefix
// (RunCounters.data_prefix): clusters/ID/runs/NAME/INCARNATION/, ID this
// cluster's identity, or runs/NAME/ for a run recorded before cluster
// identities. What goes: for each of st's runs, the result objects under
// its result prefix none of its items references (garbage of stale owners
// and stolen items); and every object under clusters/OWN-ID/runs/NAME/INC/
// of a run the ledger does not hold. Foreign, listed through cfg.Foreign
// and left alone: every other cluster's prefix, and every runs/NAME/ that
// is not a live run's own (written before cluster identities by a run
// this ledger does not hold: another cluster's, or a deleted one's);
// cfg.RemoveForeign names foreign prefixes to remove all the same.
// Never removed: an object any item of st's runs references (payload or
// result, wherever it is), the inputs of st's runs (a resubmit reuses
// them), anything outside runs/ and clusters/, and anything younger than
// cfg.Grace. The coordinator is only read; the store is the caller's.
func Sweep(ctx context.Context, c Coordinator, st *store.Store, cfg SweepConfig) (SweepResult, error) {
	res := SweepResult{DryRun: cfg.DryRun}
	if cfg.Grace <= 0 {
		return res, fmt.Errorf("%w: Grace must be positive, got %v", ErrInvalidConfig, cfg.Grace)
	}
	named := map[string]bool{}
	for _, p := range cfg.RemoveForeign {
		if err := checkWholeRunPrefix(p); err != nil {
			return res, err
		}
		named[p] = true
	}
	self, err := storeurl.Identity(st.URL())
	if err != nil {
		return res, fmt.Errorf("%w: the swept store: %w", ErrInvalidConfig, err)
	}
	distinct := map[string]bool{}
	for _, d := range cfg.Distinct {
		id, err := storeurl.Identity(d)
		if err != nil {
			return res, fmt.Errorf("%w: Distinct: %w", ErrInvalidConfig, err)
		}
		if id == self {
			return res, fmt.Errorf("%w: Distinct names %s, which is the swept store itself", ErrInvalidConfig, storeurl.Redact(d))
		}
		distinct[id] = true
	}
	now := cfg.Now
	if now.IsZero() {
		now = time.Now()
	}
	timeout := orDefault(cfg.Timeout, DefaultTimeout)
	cluster, err := ClusterID(ctx, c, timeout)
	if err != nil {
		return res, err
	}
	res.Cluster = cluster
	own := storeurl.ClusterPrefix(cluster)
	sctx, cancel := context.WithTimeout(ctx, timeout)
	resp, err := c.RunStatus(sctx, &rolloutv1.RunStatusRequest{})
	cancel()
	if err != nil {
		return res, callError("reading the runs", timeout, err)
	}
	live := map[string]string{} // run name -> its data prefix
	held := map[string]bool{}   // the data prefixes of every run of the ledger, on any store
	var related []relatedRun
	for _, rc := range resp.GetRuns() {
		u := rc.GetStore()
		if u == "" {
			continue // inline data: no store
		}
		if p := rc.GetDataPrefix(); strings.HasPrefix(p, storeurl.ClustersDir) {
			held[p] = true
		}
		id, err := storeurl.Identity(u)
		switch {
		case err != nil:
			related = append(related, relatedRun{rc.GetName(), storeurl.Redact(u), fmt.Sprintf("its store URL cannot be read: %v", err)})
		case id == self:
			live[rc.GetName()] = store.RunData(rc.GetName(), rc.GetDataPrefix())
		case distinct[id]:
		case storeurl.Related(u, st.URL()):
			related = append(related, relatedRun{rc.GetName(), storeurl.Redact(u), relation(u, st.URL())})
		}
	}
	if len(related) > 0 {
		return res, ambiguous(st.URL(), related)
	}
	// Every object an item of st's runs references, payload or result: it
	// stays wherever it is.
	referenced := map[string]bool{}
	liveNames := make([]string, 0, len(live))
	for name := range live {
		liveNames = append(liveNames, name)
	}
	slices.Sort(liveNames)
	for _, name := range liveNames {
		err := Results(ctx, c, name, ResultsConfig{Timeout: timeout}, func(it *rolloutv1.ResultItem) error {
			for _, r := range []*rolloutv1.DataRef{it.GetPayloadRef(), it.GetResultRef()} {
				if k := r.GetObject(); k != "" {
					referenced[k] = true
				}
			}
			return nil
		})
		if errors.Is(err, ErrRunNotFound) {
			// Deleted since the runs were read: its prefix is an orphan's.
			delete(held, live[name])
			delete(live, name)
			continue
		}
		if err != nil {
			return res, err
		}
	}
	livePrefix := make(map[string]string, len(live)) // data prefix -> run name
	for name, p := range live {
		livePrefix[p] = name
	}
	for p := range named {
		if name, ok := livePrefix[p]; ok {
			return res, fmt.Errorf("%w: RemoveForeign %q is run %q's own prefix, not a foreign one; nothing was removed", ErrInvalidConfig, p, name)
		}
	}
	// The store's run prefixes, in both layouts.
	prefixes := map[string][]store.Object{}
	for _, top := range []string{"runs/", storeurl.ClustersDir} {
		if err := st.List(ctx, top, func(o store.Object) error {
			if p := RunPrefixOf(o.Key); p != "" {
				prefixes[p] = append(prefixes[p], o)
			}
			return nil
		}); err != nil {
			return res, err
		}
	}
	remove := func(o store.Object, why string) error {
		if referenced[o.Key] {
			res.Referenced++
			return nil
		}
		if now.Sub(o.ModTime) < cfg.Grace {
			res.Young++
			return nil
		}
		res.Removed++
		if cfg.Removing != nil {
			cfg.Removing(o, why)
		}
		if cfg.DryRun {
			return nil
		}
		return st.Delete(ctx, o.Key)
	}
	keys := make([]string, 0, len(prefixes))
	for p := range prefixes {
		keys = append(keys, p)
	}
	slices.Sort(keys)
	for _, p := range keys {
		objs := prefixes[p]
		if _, ok := livePrefix[p]; ok {
			res.Runs++
			for _, o := range objs {
				if !strings.HasPrefix(o.Key, p+"results/") || referenced[o.Key] {
					continue
				}
				res.Garbage++
				if err := remove(o, WhyUnreferenced); err != nil {
					return res, err
				}
			}
			continue
		}
		if held[p] {
			continue // a live run's on another store: a copy, not garbage
		}
		if strings.HasPrefix(p, own) {
			res.Orphans++
			for _, o := range objs {
				if err := remove(o, WhyOrphan); err != nil {
					return res, err
				}
			}
			continue
		}
		why := ForeignCluster
		if name, err := url.PathUnescape(strings.TrimSuffix(strings.TrimPrefix(p, "runs/"), "/")); err == nil && strings.HasPrefix(p, "runs/") {
			why = ForeignLegacy
			if _, ok := live[name]; ok {
				why = ForeignOtherRun
			}
		}
		res.Foreign++
		res.ForeignObjects += len(objs)
		if cfg.Foreign != nil {
			var size int64
			for _, o := range objs {
				size += o.Size
			}
			cfg.Foreign(p, why, len(objs), size)
		}
		if !named[p] {
			continue
		}
		for _, o := range objs {
			if err := remove(o, WhyForeignRemoved); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// relation says how the store u may share the bytes of the swept store.
func relation(u, swept string) string {
	a, _ := storeurl.Identity(u)
	b, _ := storeurl.Identity(swept)
	ua, _ := url.Parse(a)
	ub, _ := url.Parse(b)
	switch {
	case ua.Scheme == "file" && strings.HasPrefix(ua.Path, ub.Path+"/"):
		return "a directory inside the swept one"
	case ua.Scheme == "file":
		return "a directory that holds the swept one"
	case ua.Scheme != ub.Scheme:
		return "a bucket of the same name through another scheme"
	default:
		return "the same bucket with other parameters"
	}
}

// ambiguous is the ErrAmbiguousStore naming the related runs.
func ambiguous(swept string, related []relatedRun) error {
	slices.SortFunc(related, func(a, b relatedRun) int { return strings.Compare(a.name, b.name) })
	var b strings.Builder
	for i, r := range related {
		if i == maxNamed {
			fmt.Fprintf(&b, "; and %d more", len(related)-maxNamed)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "run %q on %s (%s)", r.name, r.store, r.why)
	}
	return fmt.Errorf("%w: %d run(s) of the ledger keep their data in a store that may share the bytes of %s, so what they need cannot be told from garbage; nothing was removed: %s",
		ErrAmbiguousStore, len(related), storeurl.Redact(swept), b.String())
}
