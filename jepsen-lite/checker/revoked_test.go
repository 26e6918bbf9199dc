package checker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/history"
)

// revokedHistory is two items: w1 claims aa and reports it done, w1's
// certificate is revoked, then w2 claims bb and reports it done; extra
// adds w1's operations after the revocation.
func revokedHistory(extra func(b *builder)) checker.Input {
	b := newBuilder()
	b.op("submit", "SubmitItems", "", []history.Item{item("aa", 0), item("bb", 1)}, history.TypeOK, 2, nil)
	b.op("w1/1", "Claim", "w1", nil, history.TypeOK, 2, claimed("aa", 1))
	b.op("w1/1", "Report", "w1", report("aa", 1, "DONE", "h1"), history.TypeOK, 2, status("aa", "APPLIED"))
	b.evs = append(b.evs, history.Event{Time: b.t, Process: "nemesis", Type: history.TypeNemesis, Op: checker.RevokeOp, Nodes: []string{"w1"}})
	b.t += 10
	if extra != nil {
		extra(b)
	}
	b.op("w2/1", "Claim", "w2", nil, history.TypeOK, 2, claimed("bb", 1))
	b.op("w2/1", "Report", "w2", report("bb", 1, "DONE", "h2"), history.TypeOK, 2, status("bb", "APPLIED"))
	in := checker.Input{Final: append(read("aa", "DONE", "w1", 1, "h1"), read("bb", "DONE", "w2", 1, "h2")...),
		Totals: map[string]uint64{run: 2}, LastHeal: 50, Completed: 200}
	in.Events = history.Merge(b.evs)
	return in
}

// TestRevokedRefused: the verdict runs only when the history records a
// revocation; it passes when the revoked worker's later writes were
// refused (or their outcome is unknown, or they changed nothing), and
// fails for a Register, a Claim that handed out an item or a Report
// applied after the revocation committed.
func TestRevokedRefused(t *testing.T) {
	_, in := base()
	_, ok := checker.Check(in).Verdict(checker.RevokedRefused)
	require.False(t, ok, "no revocation: no verdict")

	v, ok := checker.Check(revokedHistory(nil)).Verdict(checker.RevokedRefused)
	require.True(t, ok)
	require.True(t, v.OK, "%+v", v)

	refused := revokedHistory(func(b *builder) {
		b.op("w1/1", "Claim", "w1", nil, history.TypeFail, 0, nil)
		b.op("w1/1", "Register", "w1", nil, history.TypeFail, 0, nil)
		b.op("w1/1", "Claim", "w1", nil, history.TypeOK, 3, nil) // nothing handed out
		b.op("w1/1", "Report", "w1", report("aa", 1, "DONE", "h1"), history.TypeOK, 3, status("aa", "CONFLICT"))
		b.open("w1/1", "Report", "w1", report("aa", 1, "DONE", "h1"))
		b.op("w1/1", "Heartbeat", "w1", nil, history.TypeOK, 3, nil) // a read: left out
	})
	v, _ = checker.Check(refused).Verdict(checker.RevokedRefused)
	require.True(t, v.OK, "%+v", v)
	require.Contains(t, v.Detail, "5 of their ledger writes")

	for name, bad := range map[string]func(b *builder){
		"register": func(b *builder) { b.op("w1/2", "Register", "w1", nil, history.TypeOK, 3, nil) },
		"claim":    func(b *builder) { b.op("w1/1", "Claim", "w1", nil, history.TypeOK, 3, claimed("bb", 1)) },
		"report": func(b *builder) {
			b.op("w1/1", "Report", "w1", report("aa", 1, "DONE", "h1"), history.TypeOK, 3, status("aa", "APPLIED"))
		},
	} {
		v, _ := checker.Check(revokedHistory(bad)).Verdict(checker.RevokedRefused)
		require.False(t, v.OK, name)
		require.Equal(t, 1, v.Count, name)
		require.Contains(t, v.Examples[0], "revoked worker w1", name)
	}
}
