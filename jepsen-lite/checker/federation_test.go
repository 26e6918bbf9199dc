package checker_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/history"
)

// fedInput is a federation that ended well: fed-1 (auto, handed to b) and
// fed-2 (pinned to b, cancelled) live on b, loc-1 (pinned local) on a.
func fedInput() checker.FedInput {
	done := checker.FedRun{Total: 4, Done: 4, Finished: true}
	h1 := done
	h1.Name, h1.Cluster, h1.RemoteRun = "fed-1", "b", "a/fed-1.0123abcd"
	h2 := checker.FedRun{Name: "fed-2", Cluster: "b", RemoteRun: "a/fed-2.89abcdef", Total: 4, Done: 1, Cancelled: true, Finished: true}
	loc := checker.FedRun{Name: "loc-1", Cluster: "local", Total: 2, Pending: 2}
	r1, r2 := h1, h2
	r1.Name, r1.Cluster, r1.RemoteRun, r1.Origin, r1.Tenant = h1.RemoteRun, "local", "", "a", "a"
	r2.Name, r2.Cluster, r2.RemoteRun, r2.Origin, r2.Tenant = h2.RemoteRun, "", "", "a", "a"
	other := checker.FedRun{Name: "own-run", Cluster: "local", Total: 1, Done: 1, Finished: true}
	return checker.FedInput{
		Parent: "a", Peer: "b",
		ParentRuns: []checker.FedRun{h1, h2, loc},
		PeerRuns:   []checker.FedRun{r1, r2, other},
		Expect:     map[string]string{"fed-1": "b", "fed-2": "b", "loc-1": "local"},
		Cancels:    []string{"fed-2", "fed-2"},
		Results:    map[string]string{"fed-1": ""},
		Observations: []checker.FedObservation{
			{Time: 1, Run: checker.FedRun{Name: "fed-1", Total: 4, Done: 1}},
			{Time: 2, Run: checker.FedRun{Name: "fed-1", Total: 4, Done: 3}},
			{Time: 3, Run: h1},
		},
		PeerSeen: []string{"a/fed-1.0123abcd", "a/fed-2.89abcdef", "own-run"},
	}
}

func fedVerdicts(t *testing.T, in checker.FedInput) map[string]checker.Verdict {
	t.Helper()
	res := checker.Check(checker.Input{Federation: in, Final: []history.Item{}, Totals: map[string]uint64{}})
	out := map[string]checker.Verdict{}
	for _, n := range []string{checker.FedHandles, checker.FedStatus, checker.FedCancel, checker.FedRouting, checker.FedResults} {
		v, ok := res.Verdict(n)
		require.True(t, ok, "no %s verdict", n)
		out[n] = v
	}
	return out
}

// requireOnly asserts that exactly the named federation checkers failed,
// each with an example containing want.
func requireOnly(t *testing.T, vs map[string]checker.Verdict, want string, failed ...string) {
	t.Helper()
	for name, v := range vs {
		if slices.Contains(failed, name) {
			require.False(t, v.OK, "%s should fail: %s", name, v.Detail)
			require.True(t, strings.Contains(strings.Join(v.Examples, "\n"), want), "%s: %v lacks %q", name, v.Examples, want)
		} else {
			require.True(t, v.OK, "%s should pass: %v", name, v.Examples)
		}
	}
}

func TestFederationPasses(t *testing.T) {
	vs := fedVerdicts(t, fedInput())
	requireOnly(t, vs, "")
	require.Contains(t, vs[checker.FedHandles].Detail, "2 handles on a, 2 runs under a/ on b")
	require.Contains(t, vs[checker.FedCancel].Detail, "2 acknowledged cancels")
}

func TestFederationNotRunWithoutParent(t *testing.T) {
	res := checker.Check(checker.Input{Final: []history.Item{}, Totals: map[string]uint64{}})
	_, ok := res.Verdict(checker.FedHandles)
	require.False(t, ok)
}

// A remote name that is not deterministic: a new leader re-drives the
// handle under another name, and the peer holds two copies of the run.
func TestFederationCatchesSecondCopy(t *testing.T) {
	in := fedInput()
	in.PeerRuns = append(in.PeerRuns, checker.FedRun{Name: "a/fed-1.feedface", Cluster: "local", Total: 4, Origin: "a", Tenant: "a"})
	vs := fedVerdicts(t, in)
	requireOnly(t, vs, "a/fed-1.feedface", checker.FedHandles)
	require.Contains(t, strings.Join(vs[checker.FedHandles].Examples, "\n"), "fed-1: 2 remote runs on b")
	require.Contains(t, strings.Join(vs[checker.FedHandles].Examples, "\n"), "no handle on a names")
}

// The second copy reaped before the end: the runs the peer listed during
// the run, and the remote names in the parent's answers, still show it.
func TestFederationCatchesReapedCopy(t *testing.T) {
	in := fedInput()
	in.PeerSeen = []string{"a/fed-1.0123abcd", "a/fed-1.feedface", "a/fed-1.0123abcd", "a/fed-2.89abcdef"}
	vs := fedVerdicts(t, in)
	requireOnly(t, vs, "fed-1: 2 remote runs on b during the run: a/fed-1.0123abcd, a/fed-1.feedface", checker.FedHandles)

	in = fedInput()
	in.Observations = append([]checker.FedObservation{{Time: 0, Run: checker.FedRun{Name: "fed-1", RemoteRun: "a/fed-1.feedface"}}}, in.Observations...)
	in.Observations[1].Run.RemoteRun = "a/fed-1.0123abcd"
	vs = fedVerdicts(t, in)
	requireOnly(t, vs, "fed-1: its remote run changed in a's answers: a/fed-1.feedface -> a/fed-1.0123abcd", checker.FedHandles)
}

func TestFederationCatchesMissingAndOrphans(t *testing.T) {
	in := fedInput()
	in.ParentRuns[0].RemoteRun = "a/fed-1.00000000" // the handle names a run b does not hold
	vs := fedVerdicts(t, in)
	requireOnly(t, vs, "a/fed-1.0123abcd", checker.FedHandles)
	require.Contains(t, strings.Join(vs[checker.FedHandles].Examples, "\n"), "its remote run a/fed-1.00000000 is not on b")

	in = fedInput()
	in.ParentRuns[1].State, in.ParentRuns[1].Cancelled = "refused", false
	vs = fedVerdicts(t, in)
	require.False(t, vs[checker.FedHandles].OK)
	require.Contains(t, strings.Join(vs[checker.FedHandles].Examples, "\n"), "fed-2: refused by b, yet its remote run a/fed-2.89abcdef exists there")
}

func TestFederationCatchesStatus(t *testing.T) {
	in := fedInput()
	in.ParentRuns[0].Done, in.ParentRuns[0].Pending = 3, 1 // never converged
	vs := fedVerdicts(t, in)
	requireOnly(t, vs, "fed-1: on a total 4 pending 1", checker.FedStatus)

	in = fedInput()
	in.PeerRuns[0].Finished, in.PeerRuns[0].Done, in.PeerRuns[0].Running = false, 3, 1 // a finished before b
	vs = fedVerdicts(t, in)
	requireOnly(t, vs, "fed-1: finished on a while a/fed-1.0123abcd on b is not", checker.FedStatus)

	in = fedInput()
	in.Observations = append(in.Observations, checker.FedObservation{Time: 4, Run: checker.FedRun{Name: "fed-1", Total: 4, Done: 2}})
	vs = fedVerdicts(t, in)
	requireOnly(t, vs, "fed-1: went backwards on a between t=3 and t=4: done 4 -> 2, finished -> not finished", checker.FedStatus)
}

func TestFederationCatchesLostCancel(t *testing.T) {
	in := fedInput()
	in.PeerRuns[1].Cancelled, in.PeerRuns[1].Finished, in.PeerRuns[1].Pending = false, false, 3
	in.ParentRuns[1] = in.PeerRuns[1]
	in.ParentRuns[1].Name, in.ParentRuns[1].Cluster, in.ParentRuns[1].RemoteRun = "fed-2", "b", "a/fed-2.89abcdef"
	vs := fedVerdicts(t, in)
	requireOnly(t, vs, "fed-2: cancel acknowledged by a; its remote run a/fed-2.89abcdef on b is not cancelled", checker.FedCancel)

	// A run that finished every item before the cancel landed is counted
	// apart, not failed.
	in = fedInput()
	in.PeerRuns[1].Cancelled, in.PeerRuns[1].Done = false, 4
	in.ParentRuns[1].Cancelled, in.ParentRuns[1].Done = false, 4
	vs = fedVerdicts(t, in)
	requireOnly(t, vs, "")
	require.Contains(t, vs[checker.FedCancel].Detail, "1 remote runs had finished every item")
}

func TestFederationCatchesRouting(t *testing.T) {
	in := fedInput()
	in.PeerRuns = append(in.PeerRuns, checker.FedRun{Name: "a/loc-1.deadbeef", Cluster: "local", Origin: "a", Tenant: "a"})
	vs := fedVerdicts(t, in)
	require.False(t, vs[checker.FedRouting].OK)
	require.Contains(t, strings.Join(vs[checker.FedRouting].Examples, "\n"), "loc-1: local on a, yet b holds a/loc-1.deadbeef")

	in = fedInput()
	in.Expect["loc-1"] = "b" // the pin was not kept
	vs = fedVerdicts(t, in)
	requireOnly(t, vs, `loc-1: on "local", expected on "b"`, checker.FedRouting)

	in = fedInput()
	in.PeerRuns[0].Cluster = "c" // b handed a received run on
	vs = fedVerdicts(t, in)
	require.False(t, vs[checker.FedRouting].OK)
	require.Contains(t, strings.Join(vs[checker.FedRouting].Examples, "\n"), `a/fed-1.0123abcd: a run on b handed on to "c" (one hop)`)

	in = fedInput()
	in.PeerRuns[1].Origin = "" // the one-hop marker missing
	vs = fedVerdicts(t, in)
	requireOnly(t, vs, `a/fed-2.89abcdef: on b with origin "" and tenant "a", want both "a"`, checker.FedRouting)
}

func TestFederationCatchesResults(t *testing.T) {
	in := fedInput()
	in.Results["fed-1"] = "index 3: through a DONE h1, on b DONE h2"
	vs := fedVerdicts(t, in)
	requireOnly(t, vs, "fed-1: index 3: through a DONE h1, on b DONE h2", checker.FedResults)
	require.Contains(t, vs[checker.FedResults].Detail, "1 handed-off runs' results")
}

func TestFederationReadError(t *testing.T) {
	in := fedInput()
	in.Err = "b: unavailable"
	vs := fedVerdicts(t, in)
	for _, v := range vs {
		require.False(t, v.OK)
		require.Contains(t, v.Detail, "b: unavailable")
	}
}

func TestRenameRuns(t *testing.T) {
	evs := []history.Event{
		{Op: "SubmitItems", Items: []history.Item{{Run: "fed-1", ID: "01"}, {Run: "loc-1", ID: "02"}}},
		{Op: "Claim"},
	}
	out := checker.RenameRuns(evs, map[string]string{"fed-1": "a/fed-1.0123abcd"})
	require.Equal(t, "a/fed-1.0123abcd", out[0].Items[0].Run)
	require.Equal(t, "loc-1", out[0].Items[1].Run)
	require.Equal(t, "fed-1", evs[0].Items[0].Run, "the input is not changed")
	require.Equal(t, evs[1], out[1])
}

func TestOmitRuns(t *testing.T) {
	evs := []history.Event{
		{Type: history.TypeInvoke, Op: "SubmitItems", Call: 1, Items: []history.Item{{Run: "c", ID: "01"}}},
		{Type: history.TypeOK, Op: "Claim", Call: 2, Items: []history.Item{{Run: "c", ID: "01"}, {Run: "k", ID: "02"}}},
	}
	out := checker.OmitRuns(evs, []string{"c"})
	require.Len(t, out, 2)
	require.Empty(t, out[0].Items)
	require.Equal(t, []history.Item{{Run: "k", ID: "02"}}, out[1].Items)
	require.Len(t, evs[1].Items, 2, "the input is not changed")
}
