package checker_test

import (
	"encoding/hex"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/hostile"
)

// attack appends one hostile operation's event.
func (b *builder) attack(a hostile.Attack, got, changed string, items ...history.Item) {
	b.evs = append(b.evs, history.Event{Time: b.t, Process: "hostile", Type: history.TypeHostile, Op: string(a),
		Expect: hostile.Expect(a), Got: got, Changed: changed, Worker: "w2", Detail: "as w1", Items: items})
	b.t += 10
}

func TestHostileRefused(t *testing.T) {
	forged := []history.Item{{Run: run, ID: "aa", Attempt: 1, Outcome: "DONE", Owner: "w1", Result: "forged"}}
	hostileItem := hex.EncodeToString([]byte("HOSTILE!")) + "00ff"
	tests := []struct {
		name    string
		ran     bool
		mutate  func(b *builder, in *checker.Input)
		fail    []string
		example string
	}{
		{"not selected", false, func(*builder, *checker.Input) {}, nil, ""},
		{"selected but no attack", true, func(*builder, *checker.Input) {}, []string{checker.HostileRefused}, "made no attack"},
		{"every attack refused", true, func(b *builder, _ *checker.Input) {
			b.attack(hostile.ForgeReportOwner, "PermissionDenied", "", forged...)
			b.attack(hostile.ForgeReportCAS, "CAS_MISS", "", forged...)
			b.attack(hostile.JoinWorker, "PermissionDenied", "")
			b.attack(hostile.PlaintextRaft, hostile.Refused, "")
			b.attack(hostile.OversizeMessage, "ResourceExhausted", "")
			b.attack(hostile.ShortID, hostile.Inconclusive, "")
		}, nil, ""},
		{"forged report accepted", true, func(b *builder, _ *checker.Input) {
			b.attack(hostile.ForgeReportOwner, "APPLIED", "the forged Done was applied", forged...)
		}, []string{checker.HostileRefused}, "expected PermissionDenied, got APPLIED"},
		{"CAS miss expected, applied", true, func(b *builder, _ *checker.Input) {
			b.attack(hostile.ForgeReportCAS, "APPLIED", "", forged...)
		}, []string{checker.HostileRefused}, "got APPLIED"},
		{"oversized request refused as Unavailable", true, func(b *builder, _ *checker.Input) {
			b.attack(hostile.OversizeRequest, "Unavailable", "")
		}, []string{checker.HostileRefused}, "expected InvalidArgument, got Unavailable"},
		{"Raft port answered", true, func(b *builder, _ *checker.Input) {
			b.attack(hostile.WorkerRaft, hostile.Answered, "")
		}, []string{checker.HostileRefused}, "got answered"},
		{"refused but the configuration changed", true, func(b *builder, _ *checker.Input) {
			b.attack(hostile.JoinClient, "PermissionDenied", "added [hostile-1]")
		}, []string{checker.HostileRefused}, "changed: added [hostile-1]"},
		{"a refused forgery whose result is in the ledger", true, func(b *builder, in *checker.Input) {
			b.attack(hostile.ForgeReportClient, hostile.Inconclusive, "", forged...)
			in.Final = read("aa", "DONE", "w1", 1, "forged")
		}, []string{checker.HostileRefused, checker.Duplicates}, "forged by forge-report-client"},
		{"a hostile item in the ledger", true, func(b *builder, in *checker.Input) {
			b.attack(hostile.NonJSON, "InvalidArgument", "")
			in.Final = append(in.Final, read(hostileItem, "PENDING", "", 0, "")...)
		}, []string{checker.HostileRefused, checker.Unexpected, checker.Incomplete}, "hostile item"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, in := base()
			in.Hostile = tt.ran
			tt.mutate(b, &in)
			in.Events = history.Merge(b.evs)
			res := checker.Check(in)
			got := res.Failed()
			slices.Sort(got)
			want := slices.Clone(tt.fail)
			slices.Sort(want)
			require.Equal(t, want, got, "verdicts: %+v", res.Verdicts)
			v, ok := res.Verdict(checker.HostileRefused)
			require.True(t, ok)
			if tt.example != "" {
				require.False(t, v.OK)
				require.Contains(t, v.Examples[0], tt.example)
			}
			var sent int
			for _, c := range res.Hostile {
				sent += c.Sent
				require.Equal(t, c.Sent, c.Refused+c.Inconclusive+c.Accepted, "%+v", c)
			}
			require.Equal(t, countHostile(b.evs), sent)
			require.Equal(t, checker.OpCounts{Op: "Report", Invoked: 1, OK: 1}, reportCounts(res), "hostile operations are no workload operations")
		})
	}
}

func countHostile(evs []history.Event) int {
	n := 0
	for _, e := range evs {
		if e.Type == history.TypeHostile {
			n++
		}
	}
	return n
}

func reportCounts(res checker.Result) checker.OpCounts {
	for _, c := range res.Ops {
		if c.Op == "Report" {
			return c
		}
	}
	return checker.OpCounts{}
}

func TestHostileCounts(t *testing.T) {
	b, in := base()
	in.Hostile = true
	b.attack(hostile.ForgeReportOwner, "PermissionDenied", "")
	b.attack(hostile.ForgeReportOwner, hostile.Inconclusive, "")
	b.attack(hostile.ForgeReportOwner, "OK", "")
	b.attack(hostile.UnregisteredClaim, "FailedPrecondition", "")
	in.Events = history.Merge(b.evs)
	res := checker.Check(in)
	require.Equal(t, []checker.AttackCount{
		{Attack: string(hostile.ForgeReportOwner), Expect: "PermissionDenied", Sent: 3, Refused: 1, Inconclusive: 1, Accepted: 1},
		{Attack: string(hostile.UnregisteredClaim), Expect: "FailedPrecondition", Sent: 1, Refused: 1},
	}, res.Hostile)
	v, _ := res.Verdict(checker.HostileRefused)
	require.False(t, v.OK)
	require.Equal(t, 1, v.Count)
	require.Equal(t, "4 hostile operations (2 attacks): 2 refused, 1 inconclusive, 1 accepted", v.Detail)
}
