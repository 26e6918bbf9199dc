package fsm

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// tspec is the spec of a run of tenant at priority prio.
func tspec(tenant string, prio uint32) *fsmpb.RunSpec {
	return &fsmpb.RunSpec{Tenant: tenant, Priority: prio}
}

// items returns n items prefix0..prefix(n-1).
func items(prefix string, n int) []*fsmpb.NewItem {
	out := make([]*fsmpb.NewItem, n)
	for i := range out {
		out[i] = ni(fmt.Sprintf("%s%d", prefix, i), uint64(i), "p")
	}
	return out
}

// runsOf returns the runs of claimed items, in order.
func runsOf(its []Item) []string {
	out := make([]string, len(its))
	for i, it := range its {
		out[i] = it.Run
	}
	return out
}

func tenantOfLedger(t *testing.T, l *Ledger, name string) Tenant {
	t.Helper()
	for _, x := range l.Tenants() {
		if x.Name == name {
			return x
		}
	}
	t.Fatalf("no tenant %q", name)
	return Tenant{}
}

func TestDecayFactors(t *testing.T) {
	for r := range decayStepsPerHalfLife {
		want := math.Round(65536 * math.Exp2(-float64(r)/decayStepsPerHalfLife))
		require.Equal(t, uint64(want), decayFactor(r), "step %d", r)
	}
}

// TestClaimServesHigherPriorityFirst: whatever the submit order, claims
// take the highest priority's work first; running work stays where it is.
func TestClaimServesHigherPriorityFirst(t *testing.T) {
	h := newHarness(t)
	h.ok(cRegisterAll("w1", "w2", "w3")...)
	h.ok(cSubmit("low", tspec("a", 1), false, items("l", 3)...))
	h.ok(cSubmit("mid", tspec("b", 0), false, items("m", 3)...)) // 0 is 3
	require.Equal(t, []string{"mid", "mid"}, runsOf(h.ok(cClaim("w1", 2))[0].Items))
	h.ok(cSubmit("high", tspec("a", 5), false, items("h", 3)...))
	require.Equal(t, []string{"high", "high", "high", "mid"}, runsOf(h.ok(cClaim("w2", 4))[0].Items),
		"the priority-5 run submitted last is served first; then 3")
	require.Equal(t, []string{"low", "low", "low"}, runsOf(h.ok(cClaim("w3", 9))[0].Items))
	require.Equal(t, uint64(2), h.worker("w1").Running, "running work is never preempted")
	require.Equal(t, uint32(3), priorityOf(h.run("mid").Spec))
	checkInvariants(t, h.l)
}

// TestPriorityRunStartsWithinOneClaim: a priority-5 run submitted behind
// two priority-3 runs of other tenants gets the very next claim.
func TestPriorityRunStartsWithinOneClaim(t *testing.T) {
	h := newHarness(t)
	h.ok(cRegisterAll("w")...)
	h.ok(cSubmit("big1", tspec("a", 3), false, items("a", 50)...))
	h.ok(cSubmit("big2", tspec("b", 3), false, items("b", 50)...))
	for range 5 {
		h.ok(cClaim("w", 4))
	}
	h.ok(cSubmit("urgent", tspec("c", 5), false, items("u", 2)...))
	require.Equal(t, []string{"urgent", "urgent", "big1"}[:2], runsOf(h.ok(cClaim("w", 2))[0].Items))
}

// TestStealPrefersHigherPriority: an idle thief splits the peer holding
// higher-priority work, even when another holds more work.
func TestStealPrefersHigherPriority(t *testing.T) {
	h := newHarness(t)
	h.ok(cRegisterAll("busy", "urgent", "thief")...)
	h.ok(cSubmit("bulk", tspec("a", 2), false, items("b", 20)...))
	h.ok(cClaim("busy", 20))
	h.ok(cSubmit("hot", tspec("b", 4), false, items("h", 4)...))
	h.ok(cClaim("urgent", 4))
	r := h.ok(cSteal("thief", 0))[0]
	require.Equal(t, "urgent", r.Victim)
	require.Equal(t, []string{"hot", "hot"}, runsOf(r.Items))
	checkInvariants(t, h.l)
}

// claimLoop runs rounds of one claim of max per worker, completing every
// claimed item at once, and counts the items each run's tenant got.
func claimLoop(t *testing.T, h *harness, workers []string, max uint32, rounds int) map[string]int {
	t.Helper()
	got := map[string]int{}
	tenantOfRun := map[string]string{}
	for _, rs := range h.l.Runs() {
		tenantOfRun[rs.Name] = tenantOf(rs.Spec)
	}
	for range rounds {
		for _, w := range workers {
			its := h.ok(cClaim(w, max))[0].Items
			var done []*fsmpb.Command
			for _, it := range its {
				got[tenantOfRun[it.Run]] += int(it.Count + 1 - min(it.Count, 1))
				done = append(done, cComplete(it.Run, string(it.ID), w, it.Attempt, "r"))
			}
			if len(done) > 0 {
				h.ok(done...)
			}
		}
	}
	return got
}

// TestFairShareWeights: two tenants of weights 1 and 3, each with more work
// than the rounds claim, get their items in the ratio 1:3 (within 10%);
// each tenant's two runs take turns.
func TestFairShareWeights(t *testing.T) {
	for _, max := range []uint32{1, 3, 8} {
		t.Run(fmt.Sprintf("claims of %d", max), func(t *testing.T) {
			h := newHarness(t)
			workers := []string{"w1", "w2", "w3", "w4"}
			h.ok(cRegisterAll(workers...)...)
			h.ok(cSetTenant("heavy", 3, -1, -1))
			h.ok(cSubmit("a1", tspec("light", 0), false, items("x", 2000)...))
			h.ok(cSubmit("a2", tspec("light", 0), false, items("y", 2000)...))
			h.ok(cSubmit("b1", tspec("heavy", 0), false, items("z", 4000)...))
			h.ok(cSubmit("b2", tspec("heavy", 0), false, items("v", 4000)...))
			got := claimLoop(t, h, workers, max, 250)
			ratio := float64(got["heavy"]) / float64(got["light"])
			require.InDelta(t, 3.0, ratio, 0.3, "items heavy %d, light %d", got["heavy"], got["light"])
			// Turns between one tenant's runs: their served counts stay
			// within one claim of each other.
			served := map[string]uint64{}
			h.l.mu.RLock()
			for _, r := range h.l.st.runOrder {
				served[r.name] = r.served
			}
			h.l.mu.RUnlock()
			require.InDelta(t, float64(served["a1"]), float64(served["a2"]), float64(max))
			require.InDelta(t, float64(served["b1"]), float64(served["b2"]), float64(max))
			checkInvariants(t, h.l)
		})
	}
}

// TestRoundRobinWithinTenant: one tenant's runs take turns claim by claim,
// the one served least first.
func TestRoundRobinWithinTenant(t *testing.T) {
	h := newHarness(t)
	h.ok(cRegisterAll("w")...)
	h.ok(cSubmit("r1", tspec("a", 0), false, items("x", 10)...))
	h.ok(cSubmit("r2", tspec("a", 0), false, items("y", 10)...))
	var order []string
	for range 6 {
		order = append(order, runsOf(h.ok(cClaim("w", 2))[0].Items)...)
	}
	require.Equal(t, []string{"r1", "r1", "r2", "r2", "r1", "r1", "r2", "r2", "r1", "r1", "r2", "r2"}, order)
	// A third run joins level with the least served (not at 0, which
	// would give it every claim until it caught up).
	h.ok(cSubmit("r3", tspec("a", 0), false, items("z", 10)...))
	h.l.mu.RLock()
	require.Equal(t, uint64(6), h.l.st.runs["r3"].served)
	h.l.mu.RUnlock()
}

// TestUsageDecays: usage halves every half-life of stamped time, in
// integer steps, for every tenant alike.
func TestUsageDecays(t *testing.T) {
	cfg := DefaultConfig()
	cfg.UsageHalfLife = time.Minute
	h := newHarnessConfig(t, cfg)
	h.ok(cRegisterAll("w")...)
	h.ok(cSubmit("r", tspec("a", 0), false, items("x", 200)...))
	h.ok(cSubmit("s", tspec("b", 0), false, items("y", 200)...))
	h.ok(cClaim("w", 100)) // a's turn (a tie at 0; "a" < "b")
	h.ok(cClaim("w", 40))  // b's
	require.Equal(t, 100.0, tenantOfLedger(t, h.l, "a").Usage)
	require.Equal(t, 40.0, tenantOfLedger(t, h.l, "b").Usage)
	h.now = h.now.Add(time.Minute)
	h.ok(cRegister("w")) // any entry brings the usage to its time
	require.InDelta(t, 50.0, tenantOfLedger(t, h.l, "a").Usage, 2.0)
	require.InDelta(t, 20.0, tenantOfLedger(t, h.l, "b").Usage, 1.0)
	h.now = h.now.Add(9 * time.Minute)
	h.ok(cRegister("w"))
	require.InDelta(t, 100.0/1024, tenantOfLedger(t, h.l, "a").Usage, 0.01)
	h.now = h.now.Add(70 * time.Minute)
	h.ok(cRegister("w"))
	require.Zero(t, tenantOfLedger(t, h.l, "a").Usage)
	checkInvariants(t, h.l)
}

// TestComebackIsNotStarvedNorStarving: a tenant that arrives while another
// has used the fleet alone for long starts level with it (its least usage
// per weight), so the two share from the first claim; neither takes every
// claim to catch up.
func TestComebackIsNotStarvedNorStarving(t *testing.T) {
	h := newHarness(t)
	h.ok(cRegisterAll("w")...)
	h.ok(cSubmit("old", tspec("busy", 0), false, items("x", 3000)...))
	claimLoop(t, h, []string{"w"}, 10, 100) // 1000 items, alone
	h.ok(cSubmit("new", tspec("late", 0), false, items("y", 3000)...))
	got := claimLoop(t, h, []string{"w"}, 10, 20)
	require.Equal(t, 100, got["late"])
	require.Equal(t, 100, got["busy"])
	late := tenantOfLedger(t, h.l, "late").Usage
	require.Equal(t, 1100.0, late, "started at busy's 1000, then its 100")
	require.Equal(t, 1100.0, tenantOfLedger(t, h.l, "busy").Usage)
}

// TestIdleCapacityIsNotHeldBack: one tenant alone gets every claim,
// whatever its weight.
func TestIdleCapacityIsNotHeldBack(t *testing.T) {
	h := newHarness(t)
	h.ok(cRegisterAll("w1", "w2")...)
	h.ok(cSetTenant("big", 1000, -1, -1), cSetTenant("small", 1, -1, -1))
	h.ok(cSubmit("r", tspec("small", 1), false, items("x", 30)...))
	require.Len(t, h.ok(cClaim("w1", 20))[0].Items, 20)
	require.Len(t, h.ok(cClaim("w2", 20))[0].Items, 10)
}

// TestMaxQueuedRefusesWholeSubmit: a submit past max_queued is refused with
// ErrQuota naming the tenant, the limit and what is in use, and changes
// nothing; resubmitting what is held is not new work.
func TestMaxQueuedRefusesWholeSubmit(t *testing.T) {
	h := newHarness(t)
	h.ok(cSetTenant("a", -1, 5, -1))
	h.ok(cSubmit("r", tspec("a", 0), false, items("x", 3)...))
	before := persist(t, h.l)
	res := h.applyAt(cSubmit("r", nil, false, items("x", 6)...))[0] // x0..x2 held, 3 new
	require.ErrorIs(t, res.Err, ErrQuota)
	require.ErrorContains(t, res.Err, `tenant "a" may queue at most 5 items (max_queued); 3 are queued and submit of run "r" adds 3`)
	require.Equal(t, before, persist(t, h.l), "a refused submit changed the ledger")
	res = h.applyAt(cSubmit("other", tspec("a", 0), false, items("y", 3)...))[0]
	require.ErrorIs(t, res.Err, ErrQuota)
	require.Equal(t, before, persist(t, h.l))
	// Ranges count their indexes.
	res = h.applyAt(cSubmitRanges("rr", &fsmpb.RunSpec{Tenant: "a", Store: "file:///d"}, chunk(0, 3, "c0")))[0]
	require.ErrorIs(t, res.Err, ErrQuota)
	require.Equal(t, before, persist(t, h.l))
	// What fits is taken; a resubmit of held items adds nothing.
	h.ok(cSubmit("r", nil, false, items("x", 5)...))
	h.ok(cSubmit("r", nil, false, items("x", 5)...))
	// Another tenant is not limited by a's quota.
	h.ok(cSubmit("b", tspec("b", 0), false, items("z", 50)...))
	// Claiming frees queue room.
	h.ok(cRegisterAll("w")...)
	h.ok(cClaim("w", 60))
	h.ok(cSubmit("r", nil, false, items("x", 10)...))
	require.Equal(t, uint64(5), tenantOfLedger(t, h.l, "a").Queued)
	checkInvariants(t, h.l)
}

// TestMaxRunningStopsClaims: claims for a tenant at max_running take
// nothing of it (others' work goes on); a range is carved to the room
// left; a finished item makes room again.
func TestMaxRunningStopsClaims(t *testing.T) {
	h := newHarness(t)
	h.ok(cRegisterAll("w1", "w2")...)
	h.ok(cSetTenant("a", -1, -1, 2))
	h.ok(cSubmit("ra", tspec("a", 5), false, items("x", 10)...))
	h.ok(cSubmit("rb", tspec("b", 1), false, items("y", 10)...))
	require.Equal(t, []string{"ra", "ra", "rb", "rb", "rb"}, runsOf(h.ok(cClaim("w1", 5))[0].Items))
	require.Equal(t, 7, h.l.Claimable("w2", h.now), "b's rest; a is at its quota")
	its := h.l.Owned("w1")
	h.ok(cComplete("ra", string(its[0].ID), "w1", its[0].Attempt, "r"))
	require.Equal(t, []string{"ra", "rb", "rb", "rb", "rb"}, runsOf(h.ok(cClaim("w2", 5))[0].Items), "room for one of a's")
	require.Equal(t, uint64(2), tenantOfLedger(t, h.l, "a").Running)
	// Lifting the quota makes the rest claimable at once.
	h.ok(cSetTenant("a", -1, -1, 0))
	require.Equal(t, 7+3, h.l.Claimable("w2", h.now))
	checkInvariants(t, h.l)

	// A range run: the claim is carved to the room.
	h2 := newHarness(t)
	h2.ok(cRegisterAll("w")...)
	h2.ok(cSetTenant("a", -1, -1, 30))
	h2.ok(cSubmitRanges("r", &fsmpb.RunSpec{Tenant: "a", Store: "file:///d"}, chunk(0, 100, "c0")))
	got := h2.ok(cClaimIdx("w", 4, 50))[0].Items
	require.Len(t, got, 1)
	require.Equal(t, uint64(30), got[0].Count)
	require.Zero(t, h2.l.Claimable("w", h2.now))
	checkInvariants(t, h2.l)
}

// TestSetTenantAndSubmitRefused: bad tenants, weights and priorities, and a
// submit naming another tenant or priority for an existing run, are
// refused naming what is wrong, and change nothing.
func TestSetTenantAndSubmitRefused(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmit("r", tspec("a", 4), false, items("x", 2)...))
	before := persist(t, h.l)
	for _, tc := range []struct {
		c      *fsmpb.Command
		is     error
		detail string
	}{
		{cSetTenant("a", 0, -1, -1), ErrInvalidCommand, "set_tenant weight is 0, must be 1 to 1000"},
		{cSetTenant("a", 1001, -1, -1), ErrInvalidCommand, "set_tenant weight is 1001"},
		{cSetTenant("", 2, -1, -1), ErrInvalidCommand, "set_tenant name"},
		{cSubmit("r", tspec("b", 0), false, items("x", 3)...), ErrNotOwner, `submit names tenant "b" for run "r", which belongs to tenant "a"`},
		{cSubmit("r", tspec("", 2), false, items("x", 3)...), ErrInvalidCommand, `submit gives run "r" priority 2; it has priority 4`},
		{cSubmit("s", tspec("a", 6), false, items("x", 3)...), ErrInvalidCommand, "spec priority is 6, must be 1 to 5"},
		{cSubmit("s", tspec("bad\x00name", 0), false, items("x", 3)...), ErrInvalidCommand, "spec tenant"},
	} {
		res := h.applyAt(tc.c)[0]
		require.True(t, errors.Is(res.Err, tc.is), "%v", res.Err)
		require.ErrorContains(t, res.Err, tc.detail)
		require.Equal(t, before, persist(t, h.l))
	}
	// The owner's own tenant, or none, is accepted.
	h.ok(cSubmit("r", tspec("a", 0), false, items("x", 3)...))
	h.ok(cSubmit("r", nil, false, items("x", 4)...))
}

// TestTenantRecordsComeAndGo: a tenant's record lives while it owns a run
// or was set; deleting its last run forgets an unset tenant.
func TestTenantRecordsComeAndGo(t *testing.T) {
	h := newHarness(t)
	h.ok(cRegisterAll("w")...)
	h.ok(cSubmit("r", tspec("a", 0), false, items("x", 1)...))
	its := h.ok(cClaim("w", 1))[0].Items
	h.ok(cComplete("r", string(its[0].ID), "w", its[0].Attempt, "r"))
	require.Equal(t, Tenant{Name: "a", Weight: 1, Usage: 1, Done: 1, Runs: 1}, tenantOfLedger(t, h.l, "a"))
	h.ok(&fsmpb.Command{Cmd: &fsmpb.Command_DeleteRun{DeleteRun: &fsmpb.DeleteRunCmd{Run: "r", By: "x"}}})
	require.Empty(t, h.l.Tenants())
	h.ok(cSetTenant("b", 2, -1, -1))
	require.Equal(t, []Tenant{{Name: "b", Weight: 2, Set: true}}, h.l.Tenants())
	checkInvariants(t, h.l)
}

// TestTenantsSnapshotEquivalence: a replica restored from a snapshot taken
// at any point of a random log of several tenants, priorities, weights,
// quotas and times chooses every later claim exactly as the replica that
// applied the whole log, and both write the same snapshot.
func TestTenantsSnapshotEquivalence(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 30))
			cfg := DefaultConfig()
			cfg.UsageHalfLife = 10 * time.Second
			h := newHarnessConfig(t, cfg)
			workers := []string{"w1", "w2", "w3"}
			h.ok(cRegisterAll(workers...)...)
			tenants := []string{"t1", "t2", "t3", "t4"}
			var other *harness
			runs := 0
			for step := range 400 {
				if step == 150+int(seed)*30 {
					other = &harness{t: t, l: mustNew(t, cfg), term: h.term, now: h.now, index: h.index}
					require.NoError(t, restore(other.l, persist(t, h.l)))
				}
				h.now = h.now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
				var c *fsmpb.Command
				switch p := rng.IntN(100); {
				case p < 15:
					runs++
					name := fmt.Sprintf("r%d", runs)
					spec := tspec(tenants[rng.IntN(len(tenants))], uint32(rng.IntN(6)))
					if rng.IntN(2) == 0 {
						spec.Store = "file:///d"
						c = cSubmitRanges(name, spec, chunk(0, uint64(1+rng.IntN(40)), name))
					} else {
						c = cSubmit(name, spec, false, items(name+"-", 1+rng.IntN(20))...)
					}
				case p < 18:
					c = cSetTenant(tenants[rng.IntN(len(tenants))], 1+rng.IntN(5), int64(rng.IntN(3)*20), int64(rng.IntN(3)*5))
				case p < 20:
					c = cSetMaxPriority(tenants[rng.IntN(len(tenants))], uint32(rng.IntN(MaxPriority+1)))
				case p < 70:
					c = cClaimIdx(workers[rng.IntN(len(workers))], uint32(1+rng.IntN(4)), uint64(1+rng.IntN(10)))
				default:
					// Complete or nack something a worker owns.
					w := workers[rng.IntN(len(workers))]
					own := h.l.Owned(w)
					if len(own) == 0 {
						continue
					}
					it := own[rng.IntN(len(own))]
					switch {
					case it.Count > 0 && rng.IntN(2) == 0:
						c = cReport(it.Run, it.ID, w, it.Attempt, it.Index, it.Index+it.Count, 'a')
					case it.Count > 0:
						rc := &fsmpb.ReportRangeCmd{Run: it.Run, Id: it.ID, Worker: w, Attempt: it.Attempt, Lo: it.Index, DoneTo: it.Index, NackRest: true}
						c = &fsmpb.Command{Cmd: &fsmpb.Command_ReportRange{ReportRange: rc}}
					case rng.IntN(2) == 0:
						c = cComplete(it.Run, string(it.ID), w, it.Attempt, "r")
					default:
						c = cNack(it.Run, string(it.ID), w, it.Attempt)
					}
				}
				if other != nil {
					other.now = h.now
				}
				a := h.apply(c)
				if other != nil {
					b := other.apply(c)
					require.Equal(t, summarize(t, a[0]), summarize(t, b[0]), "step %d", step)
				}
			}
			checkInvariants(t, h.l)
			checkInvariants(t, other.l)
			require.Equal(t, persist(t, h.l), persist(t, other.l))
			require.Equal(t, dumpTenants(h.l), dumpTenants(other.l))
		})
	}
}

func mustNew(t *testing.T, cfg Config) *Ledger {
	l, err := New(cfg)
	require.NoError(t, err)
	return l
}

// BenchmarkClaimManyTenants shows that a claim costs about the same with
// 10,000 runs of 100 tenants (of five priorities and several weights)
// queued as with one run: it claims 32 indexes of a range run on each
// ledger in turn (each claim carves one range, and in the many-tenant
// ledger each claim is another tenant's turn), and reports the cost per
// claim of each and the ratio (x: many over one; about 1 means the cost
// does not grow with runs and tenants). BenchmarkClaimFlat shows the same
// for items.
func BenchmarkClaimManyTenants(b *testing.B) {
	spec := func(tenant string, prio uint32) *fsmpb.RunSpec {
		return &fsmpb.RunSpec{Tenant: tenant, Priority: prio, Store: "file:///d"}
	}
	one := newHarness(b)
	one.ok(cRegisterAll("w")...)
	one.ok(cSubmitRanges("r", spec("t0", 0), chunk(0, 1<<28, "c")))
	many := newHarness(b)
	many.ok(cRegisterAll("w")...)
	for i := range 100 {
		many.ok(cSetTenant(fmt.Sprintf("t%02d", i), 1+i%7, -1, -1))
	}
	for r := range 10_000 {
		name := fmt.Sprintf("r%05d", r)
		// Every tenant has runs at every priority: a claim's choice is
		// among all of them.
		many.ok(cSubmitRanges(name, spec(fmt.Sprintf("t%02d", r%100), uint32(1+(r/100)%5)), chunk(0, 1<<28, name)))
	}
	checkInvariants(b, many.l)
	b.ResetTimer()
	var cost [2]time.Duration
	for i := 0; i < b.N; i++ {
		for k, h := range []*harness{one, many} {
			h.now = h.now.Add(time.Millisecond)
			claim := h.entry(1, cClaimIdx("w", 4, 32))
			start := time.Now()
			h.index++
			res := mustResults(b, h.l.Apply(&raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: claim}))
			cost[k] += time.Since(start)
			if len(res[0].Items) != 1 || res[0].Items[0].Count != 32 {
				b.Fatalf("claimed %v", res[0].Items)
			}
		}
	}
	b.ReportMetric(float64(cost[0].Nanoseconds())/float64(b.N), "ns/claim-1run")
	b.ReportMetric(float64(cost[1].Nanoseconds())/float64(b.N), "ns/claim-10k-runs-100-tenants")
	b.ReportMetric(cost[1].Seconds()/cost[0].Seconds(), "x")
}

// TestSubmitAsTenant: a submit command's tenant (the submitter's, set by
// the server) creates the run as its and must own an existing run; a
// command without one (an admin's) may add to any run.
func TestSubmitAsTenant(t *testing.T) {
	h := newHarness(t)
	as := func(c *fsmpb.Command, tenant string) *fsmpb.Command {
		c.GetSubmit().Tenant = tenant
		return c
	}
	h.ok(as(cSubmit("r", &fsmpb.RunSpec{Total: 3}, false, items("x", 1)...), "cli"))
	require.Equal(t, "cli", h.run("r").Spec.GetTenant(), "the spec records the tenant")
	before := persist(t, h.l)
	res := h.applyAt(as(cSubmit("r", nil, false, items("x", 2)...), "other"))[0]
	require.ErrorIs(t, res.Err, ErrNotOwner)
	require.ErrorContains(t, res.Err, `submit names tenant "other" for run "r", which belongs to tenant "cli"`)
	res = h.applyAt(as(cSubmit("s", tspec("x", 0), false, items("y", 1)...), "cli"))[0]
	require.ErrorIs(t, res.Err, ErrNotOwner)
	require.ErrorContains(t, res.Err, `as tenant "cli" names tenant "x" in its spec`)
	require.Equal(t, before, persist(t, h.l))
	h.ok(as(cSubmit("r", nil, false, items("x", 2)...), "cli"))
	h.ok(cSubmit("r", nil, false, items("x", 3)...)) // no tenant: an admin's
	require.Equal(t, uint64(3), tenantOfLedger(t, h.l, "cli").Queued)
	checkInvariants(t, h.l)
}

// TestRunCreatedEventNamesTenant: a run's creation event names its tenant
// and priority when they are not the defaults.
func TestRunCreatedEventNamesTenant(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmit("r", tspec("team-a", 5), false, items("x", 1)...))
	h.ok(cSubmit("s", nil, false, items("y", 1)...))
	evs, _, _ := h.l.Events(0, 0, "")
	require.Len(t, evs, 2)
	require.Equal(t, "tenant team-a, priority 5, max failures 3", evs[0].Detail)
	require.Equal(t, "max failures 3", evs[1].Detail)
}

// TestRoomWakesLongPolls: when a tenant at max_running gets room again (an
// item of it finished), the long-polls are woken as for new work.
func TestRoomWakesLongPolls(t *testing.T) {
	h := newHarness(t)
	h.ok(cRegisterAll("w")...)
	h.ok(cSetTenant("a", -1, -1, 1))
	h.ok(cSubmit("r", tspec("a", 0), false, items("x", 3)...))
	its := h.ok(cClaim("w", 3))[0].Items
	require.Len(t, its, 1)
	require.Zero(t, h.l.Claimable("w", h.now))
	ch := h.l.PendingSignal()
	h.ok(cHeartbeat("w", 0, 0, nil, nil))
	select {
	case <-ch:
		t.Fatal("woken with nothing claimable")
	default:
	}
	h.ok(cComplete("r", string(its[0].ID), "w", its[0].Attempt, "r"))
	select {
	case <-ch:
	default:
		t.Fatal("the tenant has room again, and no long-poll was woken")
	}
	require.Equal(t, 2, h.l.Claimable("w", h.now), "its queued records (a claim takes what the room allows)")
	require.Len(t, h.ok(cClaim("w", 3))[0].Items, 1)
}

// TestMaxPriorityClamps: a tenant's max_priority caps the priority of the
// runs it creates afterwards (the default 3 included), clamped rather than
// refused; a later submit naming the priority the run asked for is
// accepted, one the cap would not turn into the run's is refused; a run
// created before the cap keeps its priority; an out-of-range cap is
// refused and changes nothing; 0 removes the cap; the cap survives a
// snapshot.
func TestMaxPriorityClamps(t *testing.T) {
	h := newHarness(t)
	h.ok(cSubmit("before", tspec("a", 5), false, items("b", 1)...))
	h.ok(cSetMaxPriority("a", 2))
	require.Equal(t, uint32(2), tenantOfLedger(t, h.l, "a").MaxPriority)
	h.ok(cSubmit("high", tspec("a", 5), false, items("h", 1)...))
	h.ok(cSubmit("dflt", tspec("a", 0), false, items("d", 1)...))
	h.ok(cSubmit("low", tspec("a", 1), false, items("l", 1)...))
	h.ok(cSubmit("other", tspec("b", 5), false, items("o", 1)...))
	for run, want := range map[string]uint32{"before": 5, "high": 2, "dflt": 2, "low": 1, "other": 5} {
		require.Equal(t, want, priorityOf(h.run(run).Spec), run)
	}
	// The same spec again (a peer forwards every chunk with it).
	h.ok(cSubmit("high", tspec("a", 5), false, items("h", 2)...))
	h.ok(cSubmit("high", tspec("a", 2), false, items("h", 3)...))
	before := persist(t, h.l)
	res := h.applyAt(cSubmit("low", tspec("a", 3), false, items("l", 2)...))[0]
	require.ErrorIs(t, res.Err, ErrInvalidCommand)
	require.ErrorContains(t, res.Err, `submit gives run "low" priority 3; it has priority 1`)
	res = h.applyAt(cSetMaxPriority("a", 6))[0]
	require.ErrorIs(t, res.Err, ErrInvalidCommand)
	require.ErrorContains(t, res.Err, "set_tenant max_priority is 6, must be 1 to 5 (0: none)")
	require.Equal(t, before, persist(t, h.l))

	other := &harness{t: t, l: mustNew(t, DefaultConfig()), term: h.term, now: h.now, index: h.index}
	require.NoError(t, restore(other.l, persist(t, h.l)))
	require.Equal(t, uint32(2), tenantOfLedger(t, other.l, "a").MaxPriority)
	other.ok(cSubmit("after", tspec("a", 4), false, items("f", 1)...))
	require.Equal(t, uint32(2), priorityOf(other.run("after").Spec))

	h.ok(cSetMaxPriority("a", 0))
	h.ok(cSubmit("free", tspec("a", 5), false, items("f", 1)...))
	require.Equal(t, uint32(5), priorityOf(h.run("free").Spec))
	checkInvariants(t, h.l)
}
