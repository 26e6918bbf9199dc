package checker

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/rollout/rollout/jepsen-lite/history"
)

// The checkers of the federation scenario (Input.Federation): a parent
// cluster hands whole runs to a peer cluster; what each side lists at the
// end is compared. The items of the handed-off runs are checked by the
// ordinary checkers (lost, duplicate, linearizable, ...) on the peer's
// history, the parent's submits renamed to the remote runs (RenameRuns).
const (
	// FedHandles fails when a live handle on the parent has no remote run,
	// or more than one, on the peer (a remote run whose name is the run's
	// name and another suffix is a second copy), when a remote run under
	// the parent's prefix on the peer is no handle's (an orphan), or when a
	// refused handle's run exists on the peer after all.
	FedHandles = "fed-handles"
	// FedStatus fails when, at the end (after the last heal), a handle's
	// counters on the parent differ from its remote run's on the peer,
	// when the parent showed a handle finished while the peer's run is not,
	// or when a handle's status went backwards in the parent's answers.
	FedStatus = "fed-status"
	// FedCancel fails when a run whose CancelRun the parent acknowledged
	// did not end cancelled on the peer (a remote run that had already
	// finished every item before the cancel landed is counted apart).
	FedCancel = "fed-cancel"
	// FedRouting fails when a run did not end on the cluster its pin or its
	// model decided (local runs with no remote run; handed-off runs on the
	// peer), or when a run received from a peer was handed on (one hop).
	FedRouting = "fed-routing"
	// FedResults fails when a handed-off run's results read through the
	// parent (its Results forwarded to the peer) differ from the peer's
	// own, item by item, or could not be read.
	FedResults = "fed-results"
)

// FedRun is one run as a cluster's RunStatus listed it.
type FedRun struct {
	Name string
	// Cluster is where the run lives: "local" (or "") or a peer's name;
	// RemoteRun its run's name on that peer (handles only); State the
	// handle's state ("refused", "lost", ... ; "" when the cluster has no
	// word for it).
	Cluster, RemoteRun, State string
	// Origin is the cluster that handed the run here (RunSpec.origin, the
	// one-hop marker); Tenant the run's tenant.
	Origin, Tenant string
	// The run's counters.
	Total, Pending, Running, Done, Dead uint64
	Cancelled, Finished                 bool
}

// counters formats the run's counters for a violation.
func (r FedRun) counters() string {
	return fmt.Sprintf("total %d pending %d running %d done %d dead %d cancelled %v finished %v",
		r.Total, r.Pending, r.Running, r.Done, r.Dead, r.Cancelled, r.Finished)
}

// local reports whether the run lives on its own cluster.
func (r FedRun) local() bool { return r.Cluster == "" || r.Cluster == "local" }

// FedObservation is one RunStatus answer of the parent about a handle,
// read by the harness during the run (Time is history time).
type FedObservation struct {
	Time int64
	Run  FedRun
}

// FedInput is what the federation checkers look at.
type FedInput struct {
	// Parent and Peer are the two clusters' names; remote runs of the
	// parent's handles are named under Parent + "/" on the peer.
	Parent, Peer string
	// ParentRuns and PeerRuns are every run each cluster listed at the
	// end, after the statuses converged or the bound ran out; Err says why
	// they could not be read.
	ParentRuns, PeerRuns []FedRun
	Err                  string
	// Expect is, for each run the workload created on the parent, the
	// cluster it must end on ("local" or the peer's name): its pin, or the
	// cluster that serves its model.
	Expect map[string]string
	// Cancels are the runs whose CancelRun on the parent answered OK.
	Cancels []string
	// Observations are the parent's answers about handles during the run,
	// in time order.
	Observations []FedObservation
	// PeerSeen are the runs under Parent + "/" the peer listed at any
	// time during the run (polled), whether or not they are still there
	// at the end (a parent may reap an orphan it made).
	PeerSeen []string
	// Results are, for each handed-off run read at the end, "" when its
	// items read through the parent equal the peer's, else the first
	// difference or why it could not be read.
	Results map[string]string
}

// federation runs the federation checkers.
func federation(in FedInput) []Verdict {
	if in.Err != "" {
		msg := "the clusters' runs could not be read at the end: " + in.Err
		var out []Verdict
		for _, n := range []string{FedHandles, FedStatus, FedCancel, FedRouting, FedResults} {
			out = append(out, Verdict{Name: n, Count: 1, Detail: msg, Examples: []string{msg}})
		}
		return out
	}
	peer := map[string]FedRun{}
	for _, r := range in.PeerRuns {
		peer[r.Name] = r
	}
	return []Verdict{fedHandles(in, peer), fedStatus(in, peer), fedCancel(in, peer), fedRouting(in, peer), fedResults(in)}
}

func fedResults(in FedInput) Verdict {
	var bad []string
	for _, run := range slices.Sorted(maps.Keys(in.Results)) {
		if d := in.Results[run]; d != "" {
			bad = append(bad, run+": "+d)
		}
	}
	return verdict(FedResults, fmt.Sprintf("%d handed-off runs' results read through %s and on %s", len(in.Results), in.Parent, in.Peer), bad)
}

// handles returns the parent's runs that live on the peer, by name.
func (in FedInput) handles() map[string]FedRun {
	out := map[string]FedRun{}
	for _, r := range in.ParentRuns {
		if r.Cluster == in.Peer {
			out[r.Name] = r
		}
	}
	return out
}

// refused reports whether a handle's state says the peer refused it.
func refused(r FedRun) bool { return strings.EqualFold(r.State, "refused") }

// remoteOf returns the parent run a remote run's name belongs to: the name
// under Parent + "/", less its last "." suffix ("a/run.0123abcd" -> "run").
func (in FedInput) remoteOf(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, in.Parent+"/")
	if !ok {
		return "", false
	}
	if i := strings.LastIndexByte(rest, '.'); i > 0 {
		return rest[:i], true
	}
	return rest, true
}

func fedHandles(in FedInput, peer map[string]FedRun) Verdict {
	handles := in.handles()
	copies := map[string][]string{} // parent run -> remote runs on the peer under its name
	var orphans []string
	claimed := map[string]string{} // remote run -> the handle naming it
	for _, h := range handles {
		if h.RemoteRun != "" {
			if prev, ok := claimed[h.RemoteRun]; ok {
				orphans = append(orphans, fmt.Sprintf("%s: named by two handles, %s and %s", h.RemoteRun, prev, h.Name))
			}
			claimed[h.RemoteRun] = h.Name
		}
	}
	var underPrefix int
	for _, r := range in.PeerRuns {
		parent, ok := in.remoteOf(r.Name)
		if !ok {
			continue
		}
		underPrefix++
		copies[parent] = append(copies[parent], r.Name)
		if _, ok := claimed[r.Name]; !ok {
			orphans = append(orphans, fmt.Sprintf("%s: a run on %s under %s/ that no handle on %s names (%s)", r.Name, in.Peer, in.Parent, in.Parent, r.counters()))
		}
	}
	var bad []string
	for _, name := range sortedNames(handles) {
		h := handles[name]
		mine := copies[name]
		sort.Strings(mine)
		switch {
		case refused(h):
			if _, ok := peer[h.RemoteRun]; ok && h.RemoteRun != "" {
				bad = append(bad, fmt.Sprintf("%s: refused by %s, yet its remote run %s exists there", name, in.Peer, h.RemoteRun))
			}
		case h.RemoteRun == "":
			bad = append(bad, fmt.Sprintf("%s: a handle to %s with no remote run name (state %q)", name, in.Peer, h.State))
		case len(mine) > 1:
			bad = append(bad, fmt.Sprintf("%s: %d remote runs on %s (%s), the handle names %s", name, len(mine), in.Peer, strings.Join(mine, ", "), h.RemoteRun))
		default:
			if _, ok := peer[h.RemoteRun]; !ok {
				bad = append(bad, fmt.Sprintf("%s: its remote run %s is not on %s (state %q)", name, h.RemoteRun, in.Peer, h.State))
			}
		}
	}
	sort.Strings(orphans)
	bad = append(bad, orphans...)
	// Over the whole run: one remote name per run, in the parent's answers
	// and on the peer.
	named := map[string][]string{} // parent run -> remote names a gave, in order
	for _, o := range in.Observations {
		if r := o.Run.RemoteRun; r != "" && !slices.Contains(named[o.Run.Name], r) {
			named[o.Run.Name] = append(named[o.Run.Name], r)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(named)) {
		if ns := named[name]; len(ns) > 1 {
			bad = append(bad, fmt.Sprintf("%s: its remote run changed in %s's answers: %s", name, in.Parent, strings.Join(ns, " -> ")))
		}
	}
	seen := map[string][]string{} // parent run -> remote runs the peer listed at some time
	for _, r := range slices.Compact(slices.Sorted(slices.Values(in.PeerSeen))) {
		if parent, ok := in.remoteOf(r); ok {
			seen[parent] = append(seen[parent], r)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(seen)) {
		if rs := seen[name]; len(rs) > 1 {
			bad = append(bad, fmt.Sprintf("%s: %d remote runs on %s during the run: %s", name, len(rs), in.Peer, strings.Join(rs, ", ")))
		}
	}
	return verdict(FedHandles, fmt.Sprintf("%d handles on %s, %d runs under %s/ on %s", len(handles), in.Parent, underPrefix, in.Parent, in.Peer), bad)
}

func fedStatus(in FedInput, peer map[string]FedRun) Verdict {
	handles := in.handles()
	var bad []string
	compared := 0
	for _, name := range sortedNames(handles) {
		h := handles[name]
		if refused(h) || h.RemoteRun == "" {
			continue
		}
		r, ok := peer[h.RemoteRun]
		if !ok {
			continue // fed-handles
		}
		compared++
		if h.Total != r.Total || h.Done != r.Done || h.Dead != r.Dead || h.Pending != r.Pending || h.Running != r.Running ||
			h.Cancelled != r.Cancelled || h.Finished != r.Finished {
			bad = append(bad, fmt.Sprintf("%s: on %s %s; its remote run %s on %s %s", name, in.Parent, h.counters(), h.RemoteRun, in.Peer, r.counters()))
		}
		if h.Finished && !r.Finished {
			bad = append(bad, fmt.Sprintf("%s: finished on %s while %s on %s is not", name, in.Parent, h.RemoteRun, in.Peer))
		}
	}
	// Never backwards: per handle, the finished counts and the finished
	// and cancelled flags only grow in the parent's answers.
	last := map[string]FedObservation{}
	backwards := 0
	for _, o := range in.Observations {
		prev, ok := last[o.Run.Name]
		if ok {
			p, c := prev.Run, o.Run
			var what []string
			if c.Done < p.Done {
				what = append(what, fmt.Sprintf("done %d -> %d", p.Done, c.Done))
			}
			if c.Dead < p.Dead {
				what = append(what, fmt.Sprintf("dead %d -> %d", p.Dead, c.Dead))
			}
			if p.Finished && !c.Finished {
				what = append(what, "finished -> not finished")
			}
			if p.Cancelled && !c.Cancelled {
				what = append(what, "cancelled -> not cancelled")
			}
			if len(what) > 0 {
				backwards++
				bad = append(bad, fmt.Sprintf("%s: went backwards on %s between t=%d and t=%d: %s", o.Run.Name, in.Parent, prev.Time, o.Time, strings.Join(what, ", ")))
			}
		}
		last[o.Run.Name] = o
	}
	return verdict(FedStatus, fmt.Sprintf("%d handles compared with their remote runs at the end; %d answers of %s checked for going backwards",
		compared, len(in.Observations), in.Parent), bad)
}

func fedCancel(in FedInput, peer map[string]FedRun) Verdict {
	handles := in.handles()
	var bad []string
	finishedFirst := 0
	for _, name := range slices.Compact(slices.Sorted(slices.Values(in.Cancels))) {
		h, ok := handles[name]
		if !ok {
			continue // a local run: the ordinary checkers see it
		}
		if refused(h) {
			continue
		}
		r, ok := peer[h.RemoteRun]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s: cancel acknowledged by %s; its remote run %q is not on %s", name, in.Parent, h.RemoteRun, in.Peer))
		case r.Cancelled:
		case r.Finished && r.Pending == 0 && r.Running == 0:
			finishedFirst++
		default:
			bad = append(bad, fmt.Sprintf("%s: cancel acknowledged by %s; its remote run %s on %s is not cancelled (%s)", name, in.Parent, h.RemoteRun, in.Peer, r.counters()))
		}
	}
	return verdict(FedCancel, fmt.Sprintf("%d acknowledged cancels; %d remote runs had finished every item before the cancel landed",
		len(in.Cancels), finishedFirst), bad)
}

func fedRouting(in FedInput, peer map[string]FedRun) Verdict {
	parent := map[string]FedRun{}
	for _, r := range in.ParentRuns {
		parent[r.Name] = r
	}
	var bad []string
	for _, name := range slices.Sorted(maps.Keys(in.Expect)) {
		want := in.Expect[name]
		r, ok := parent[name]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: not listed by %s (expected on %s)", name, in.Parent, want))
			continue
		}
		got := r.Cluster
		if r.local() {
			got = "local"
		}
		if got != want {
			bad = append(bad, fmt.Sprintf("%s: on %q, expected on %q", name, got, want))
		}
		if want == "local" {
			for _, p := range in.PeerRuns {
				if n, ok := in.remoteOf(p.Name); ok && n == name {
					bad = append(bad, fmt.Sprintf("%s: local on %s, yet %s holds %s", name, in.Parent, in.Peer, p.Name))
				}
			}
		}
	}
	for _, p := range in.PeerRuns {
		if !p.local() {
			bad = append(bad, fmt.Sprintf("%s: a run on %s handed on to %q (one hop)", p.Name, in.Peer, p.Cluster))
		}
		if _, ok := in.remoteOf(p.Name); ok && (p.Origin != in.Parent || p.Tenant != in.Parent) {
			bad = append(bad, fmt.Sprintf("%s: on %s with origin %q and tenant %q, want both %q (a run %s handed over)", p.Name, in.Peer, p.Origin, p.Tenant, in.Parent, in.Parent))
		}
	}
	return verdict(FedRouting, fmt.Sprintf("%d runs' clusters checked on %s; %d runs on %s checked for a second hop", len(in.Expect), in.Parent, len(peer), in.Peer), bad)
}

// RenameRuns returns events with every item of a run in names renamed to
// names[run]: the parent's submits of a handed-off run, renamed to its
// remote run, are the submits of the peer's history (whose workers claim
// and report under the remote name), so the ordinary checkers judge the
// items of handed-off runs on the peer.
func RenameRuns(events []history.Event, names map[string]string) []history.Event {
	out := make([]history.Event, len(events))
	for i, e := range events {
		if len(e.Items) > 0 && slices.ContainsFunc(e.Items, func(it history.Item) bool { _, ok := names[it.Run]; return ok }) {
			items := slices.Clone(e.Items)
			for j := range items {
				if to, ok := names[items[j].Run]; ok {
					items[j].Run = to
				}
			}
			e.Items = items
		}
		out[i] = e
	}
	return out
}

// OmitRuns returns events without the items of runs: an event that named
// only such items is left out, one that named others too keeps those. The
// federation scenario leaves out of the ordinary checkers the runs that
// must not finish: the one it cancels (fed-cancel judges it) and the one
// pinned to a parent with no worker (fed-routing judges it).
func OmitRuns(events []history.Event, runs []string) []history.Event {
	out := make([]history.Event, 0, len(events))
	for _, e := range events {
		if len(e.Items) > 0 && slices.ContainsFunc(e.Items, func(it history.Item) bool { return slices.Contains(runs, it.Run) }) {
			items := slices.DeleteFunc(slices.Clone(e.Items), func(it history.Item) bool { return slices.Contains(runs, it.Run) })
			if len(items) == 0 && e.Type == history.TypeInvoke {
				// Keep the invocation (its completion pairs with it), naming
				// nothing.
				e.Items = nil
				out = append(out, e)
				continue
			}
			e.Items = items
		}
		out = append(out, e)
	}
	return out
}
