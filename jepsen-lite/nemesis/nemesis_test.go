package nemesis_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/nemesis"
	"github.com/rollout/rollout/jepsen-lite/network"
)

func TestParseKinds(t *testing.T) {
	tests := []struct {
		in      string
		want    []nemesis.Kind
		wantErr string
	}{
		{"all", nemesis.AllKinds(), ""},
		{"all,hostile", append(nemesis.AllKinds(), nemesis.Hostile), ""},
		{"hostile,kill", []nemesis.Kind{nemesis.Kill, nemesis.Hostile}, ""},
		{"partition,kill,pause,worker-kill", []nemesis.Kind{nemesis.PartitionHalves, nemesis.PartitionLeader, nemesis.PartitionBridge,
			nemesis.PartitionRing, nemesis.Kill, nemesis.Pause, nemesis.WorkerKill}, ""},
		{"kill, isolate ,kill", []nemesis.Kind{nemesis.PartitionLeader, nemesis.Kill}, ""},
		{"none", nil, ""},
		{"", nil, "empty list"},
		{"kill,none", nil, "cannot be combined"},
		{"kill,explode", nil, `"explode"`},
		{"flood", []nemesis.Kind{nemesis.Flood}, ""},
		{"flood,kill,hostile", []nemesis.Kind{nemesis.Kill, nemesis.Flood, nemesis.Hostile}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := nemesis.ParseKinds(tt.in)
			if tt.wantErr != "" {
				require.ErrorIs(t, err, nemesis.ErrUnknownKind)
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func planConfig(seed int64, d time.Duration) nemesis.PlanConfig {
	cfg := nemesis.DefaultPlanConfig()
	cfg.Seed, cfg.Duration = seed, d
	cfg.Replicas = []string{"c1", "c2", "c3"}
	cfg.Workers = []string{"w1", "w2", "w3"}
	return cfg
}

func TestPlanDeterministicAndCovering(t *testing.T) {
	for _, d := range []time.Duration{30 * time.Second, 3 * time.Minute} {
		a, err := nemesis.Plan(planConfig(7, d))
		require.NoError(t, err)
		b, err := nemesis.Plan(planConfig(7, d))
		require.NoError(t, err)
		require.Equal(t, a, b, "one seed, one schedule")
		c, err := nemesis.Plan(planConfig(8, d))
		require.NoError(t, err)
		require.NotEqual(t, a, c, "another seed, another schedule")

		seen := map[nemesis.Kind]bool{}
		faults := map[nemesis.StoreFault]bool{}
		certs := map[nemesis.CertFault]bool{}
		var last [5]time.Duration // end of the previous step per track
		for i, s := range a {
			seen[s.Kind] = true
			require.LessOrEqual(t, s.At+s.Hold, d, "step %d ends after the schedule", i)
			require.Positive(t, s.Hold)
			tr := 0
			switch {
			case s.Kind.IsWorker():
				tr = 1
			case s.Kind.IsStore():
				tr = 2
				require.NotEmpty(t, s.Fault, "a store step says what it does")
				faults[s.Fault] = true
			case s.Kind.IsFlood():
				tr = 3
				require.Equal(t, nemesis.Leader, s.Target, "a flood hits the leader")
				require.GreaterOrEqual(t, s.Hold, nemesis.FloodMinHold)
				require.LessOrEqual(t, s.Hold, nemesis.FloodMaxHold)
			case s.Kind.IsCerts():
				tr = 4
				require.NotEmpty(t, s.Cert, "a certs step says what it does")
				certs[s.Cert] = true
			default:
				require.Empty(t, s.Fault)
			}
			require.GreaterOrEqual(t, s.At, last[tr], "steps of one track overlap: %v", s)
			last[tr] = s.At + s.Hold
			if i > 0 {
				require.GreaterOrEqual(t, s.At, a[i-1].At, "sorted by At")
			}
			switch s.Kind {
			case nemesis.PartitionHalves:
				all := append(slices.Clone(s.Sides[0]), s.Sides[1]...)
				slices.Sort(all)
				require.Equal(t, []string{"c1", "c2", "c3", "w1", "w2", "w3"}, all)
			case nemesis.PartitionBridge, nemesis.PartitionRing:
				require.ElementsMatch(t, []string{"c1", "c2", "c3"}, s.Order)
			case nemesis.WorkerPause:
				require.Greater(t, s.Hold, 3*time.Second, "a worker pause outlasts the failure timeout")
			case nemesis.ExpiryKill:
				require.Greater(t, s.Hold, 3*time.Second, "a worker pause outlasts the failure timeout")
				require.Contains(t, []string{"w1", "w2", "w3"}, s.Target)
				require.InDelta(t, float64(3*time.Second), float64(s.Delay), float64(time.Second), "the leader dies about when the worker expires")
			case nemesis.Pause, nemesis.PartitionLeader:
				require.Equal(t, nemesis.Leader, s.Target)
			}
		}
		for _, k := range nemesis.AllKinds() {
			require.True(t, seen[k], "%v: %s never scheduled", d, k)
		}
		for _, f := range nemesis.StoreFaults() {
			require.True(t, faults[f], "%v: store fault %s never scheduled", d, f)
		}
		for _, f := range nemesis.CertFaults() {
			require.True(t, certs[f], "%v: certificate fault %s never scheduled", d, f)
		}
	}
}

// TestPlanCertsTrack: the certs track renews, rotates and revokes within
// 30 s; it revokes one worker once, never renews that worker, revokes
// nothing with a single worker, and adding it leaves the other tracks'
// schedule of a seed as it was.
func TestPlanCertsTrack(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		cfg := planConfig(seed, 30*time.Second)
		cfg.Kinds = []nemesis.Kind{nemesis.Certs}
		steps, err := nemesis.Plan(cfg)
		require.NoError(t, err)
		seen := map[nemesis.CertFault]int{}
		revoked := ""
		for _, s := range steps {
			require.Equal(t, nemesis.Certs, s.Kind)
			seen[s.Cert]++
			switch s.Cert {
			case nemesis.CertRevoke:
				require.Contains(t, cfg.Workers, s.Target)
				revoked = s.Target
			case nemesis.CertRenew:
				require.Contains(t, append(slices.Clone(cfg.Replicas), cfg.Workers...), s.Target)
			case nemesis.CertRotateCA:
				require.Empty(t, s.Target)
			}
		}
		for _, f := range nemesis.CertFaults() {
			require.Positive(t, seen[f], "seed %d: %s not scheduled in 30s: %v", seed, f, steps)
		}
		require.Equal(t, 1, seen[nemesis.CertRevoke], "one revocation a run")
		for _, s := range steps {
			if s.Cert == nemesis.CertRenew {
				require.NotEqual(t, revoked, s.Target, "the revoked worker is never renewed")
			}
		}
	}
	one := planConfig(3, time.Minute)
	one.Kinds, one.Workers = []nemesis.Kind{nemesis.Certs}, []string{"w1"}
	steps, err := nemesis.Plan(one)
	require.NoError(t, err)
	require.NotEmpty(t, steps)
	for _, s := range steps {
		require.NotEqual(t, nemesis.CertRevoke, s.Cert, "the only worker is never revoked")
	}

	without := planConfig(5, time.Minute)
	without.Kinds = slices.DeleteFunc(nemesis.AllKinds(), func(k nemesis.Kind) bool { return k == nemesis.Certs })
	a, err := nemesis.Plan(without)
	require.NoError(t, err)
	b, err := nemesis.Plan(planConfig(5, time.Minute))
	require.NoError(t, err)
	b = slices.DeleteFunc(b, func(s nemesis.Step) bool { return s.Kind == nemesis.Certs })
	require.Equal(t, a, b)
}

// TestPlanStoreTrack: the store track draws from the faults it is given,
// and adding it leaves the other tracks' schedule of a seed as it was.
func TestPlanStoreTrack(t *testing.T) {
	cfg := planConfig(5, time.Minute)
	cfg.Kinds = []nemesis.Kind{nemesis.Store}
	cfg.StoreFaults = nemesis.ObjectFaults()
	steps, err := nemesis.Plan(cfg)
	require.NoError(t, err)
	require.NotEmpty(t, steps)
	picks := map[uint64]bool{}
	for _, s := range steps {
		require.Equal(t, nemesis.Store, s.Kind)
		require.False(t, s.Fault.IsServer(), "without an S3 server only object faults: %v", s)
		picks[s.Pick] = true
	}
	require.Greater(t, len(picks), 1, "each step seeds its own choice of object")

	cfg.StoreFaults = []nemesis.StoreFault{"s3-explode"}
	_, err = nemesis.Plan(cfg)
	require.ErrorIs(t, err, nemesis.ErrInvalidConfig)
	require.ErrorContains(t, err, "s3-explode")

	without := planConfig(5, time.Minute)
	without.Kinds = slices.DeleteFunc(nemesis.AllKinds(), func(k nemesis.Kind) bool { return k == nemesis.Store })
	a, err := nemesis.Plan(without)
	require.NoError(t, err)
	b, err := nemesis.Plan(planConfig(5, time.Minute))
	require.NoError(t, err)
	b = slices.DeleteFunc(b, func(s nemesis.Step) bool { return s.Kind == nemesis.Store })
	require.Equal(t, a, b)
}

func TestPlanValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*nemesis.PlanConfig)
		want   string
	}{
		{"duration", func(c *nemesis.PlanConfig) { c.Duration = 0 }, "Duration"},
		{"replicas", func(c *nemesis.PlanConfig) { c.Replicas = nil }, "Replicas"},
		{"failure timeout", func(c *nemesis.PlanConfig) { c.FailureTimeout = -1 }, "FailureTimeout"},
		{"bias", func(c *nemesis.PlanConfig) { c.LeaderBias = 2 }, "LeaderBias"},
		{"unknown kind", func(c *nemesis.PlanConfig) { c.Kinds = []nemesis.Kind{"boom"} }, "boom"},
		{"worker kinds need workers", func(c *nemesis.PlanConfig) { c.Workers = nil }, "needs workers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := planConfig(1, time.Minute)
			tt.mutate(&cfg)
			_, err := nemesis.Plan(cfg)
			require.ErrorIs(t, err, nemesis.ErrInvalidConfig)
			require.ErrorContains(t, err, tt.want)
		})
	}
	cfg := planConfig(1, time.Minute)
	cfg.Kinds = nil
	steps, err := nemesis.Plan(cfg)
	require.NoError(t, err)
	require.Empty(t, steps)
	cfg.Kinds = []nemesis.Kind{nemesis.Hostile}
	steps, err = nemesis.Plan(cfg)
	require.NoError(t, err)
	require.Empty(t, steps, "the hostile nemesis plans its own schedule")
	require.NotContains(t, nemesis.AllKinds(), nemesis.Hostile, `"all" keeps its meaning`)
	require.Contains(t, nemesis.AllKinds(), nemesis.Store, `"all" has the store nemesis`)
}

// fake is a nemesis.Cluster that records what it is asked to do.
type fake struct {
	mu       sync.Mutex
	leader   string
	term     uint64
	cut      []network.Link
	paused   map[string]bool
	killed   map[string]bool
	calls    []string
	failNext error
	// resumeDelay makes Resume slow (a heal that runs late).
	resumeDelay time.Duration
}

func newFake() *fake {
	return &fake{leader: "c1", term: 4, paused: map[string]bool{}, killed: map[string]bool{}}
}

func (f *fake) log(s string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
	err := f.failNext
	f.failNext = nil
	return err
}

func (f *fake) Leader(context.Context) (string, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leader == "" {
		return "", 0, errors.New("no leader")
	}
	return f.leader, f.term, nil
}

func (f *fake) WaitNewLeader(ctx context.Context, old string, term uint64) (string, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return "c2", term + 1, nil
}

func (f *fake) Drain(n string) error {
	f.mu.Lock()
	f.killed[n] = true
	f.mu.Unlock()
	return f.log("drain " + n)
}

func (f *fake) Kill(n string) error {
	f.mu.Lock()
	f.killed[n] = true
	f.mu.Unlock()
	return f.log("kill " + n)
}

func (f *fake) Restart(n string) error {
	f.mu.Lock()
	delete(f.killed, n)
	f.mu.Unlock()
	return f.log("restart " + n)
}

func (f *fake) Pause(n string) error {
	f.mu.Lock()
	f.paused[n] = true
	f.mu.Unlock()
	return f.log("pause " + n)
}

func (f *fake) Resume(n string) error {
	time.Sleep(f.resumeDelay)
	f.mu.Lock()
	delete(f.paused, n)
	f.mu.Unlock()
	return f.log("resume " + n)
}

func (f *fake) Cut(_ context.Context, links []network.Link) error {
	f.mu.Lock()
	f.cut = links
	f.mu.Unlock()
	return f.log("cut")
}

func (f *fake) Heal(context.Context) error {
	f.mu.Lock()
	f.cut = nil
	f.mu.Unlock()
	return f.log("heal")
}

func (f *fake) cutSet() map[network.Link]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[network.Link]bool{}
	for _, l := range f.cut {
		out[l] = true
	}
	return out
}

func newInjector(t *testing.T, f *fake) (*nemesis.Injector, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "n.jsonl")
	h, err := history.Create(path, "nemesis")
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	in, err := nemesis.NewInjector(nemesis.InjectorConfig{Replicas: []string{"c1", "c2", "c3"}, Workers: []string{"w1", "w2"}, History: h}, f)
	require.NoError(t, err)
	return in, path
}

func TestInjectorPartitions(t *testing.T) {
	l := func(a, b string) network.Link { return network.Link{From: a, To: b} }
	tests := []struct {
		step nemesis.Step
		want []network.Link
	}{
		{nemesis.Step{Kind: nemesis.PartitionHalves, Sides: [2][]string{{"c1", "w1"}, {"c2", "c3", "w2"}}},
			[]network.Link{l("c1", "c2"), l("c2", "c1"), l("c1", "c3"), l("c3", "c1"), l("c1", "w2"), l("w2", "c1"),
				l("w1", "c2"), l("c2", "w1"), l("w1", "c3"), l("c3", "w1"), l("w1", "w2"), l("w2", "w1")}},
		{nemesis.Step{Kind: nemesis.PartitionLeader, Target: nemesis.Leader},
			[]network.Link{l("c1", "c2"), l("c2", "c1"), l("c1", "c3"), l("c3", "c1"), l("c1", "w1"), l("w1", "c1"), l("c1", "w2"), l("w2", "c1")}},
		{nemesis.Step{Kind: nemesis.PartitionBridge, Order: []string{"c2", "c1", "c3"}},
			[]network.Link{l("c2", "c3"), l("c3", "c2")}},
		{nemesis.Step{Kind: nemesis.PartitionRing, Order: []string{"c2", "c1", "c3"}},
			[]network.Link{l("c3", "c2"), l("c2", "c1"), l("c1", "c3")}},
	}
	for _, tt := range tests {
		t.Run(string(tt.step.Kind), func(t *testing.T) {
			f := newFake()
			in, _ := newInjector(t, f)
			heal, err := in.Apply(context.Background(), tt.step)
			require.NoError(t, err)
			want := map[network.Link]bool{}
			for _, l := range tt.want {
				want[l] = true
			}
			require.Equal(t, want, f.cutSet())
			require.NoError(t, heal(context.Background()))
			require.Empty(t, f.cutSet())
			if tt.step.Kind == nemesis.PartitionLeader {
				in.WaitMeasurements()
				fo := in.Failovers()
				require.Len(t, fo, 1)
				require.Equal(t, nemesis.Failover{Kind: nemesis.PartitionLeader, OldLeader: "c1", OldTerm: 4, NewLeader: "c2", NewTerm: 5,
					At: fo[0].At, Took: fo[0].Took}, fo[0])
			}
		})
	}
}

func TestInjectorProcessesAndHealAll(t *testing.T) {
	f := newFake()
	in, path := newInjector(t, f)
	ctx := context.Background()
	_, err := in.Apply(ctx, nemesis.Step{Kind: nemesis.Kill, Target: nemesis.Leader})
	require.NoError(t, err)
	_, err = in.Apply(ctx, nemesis.Step{Kind: nemesis.WorkerPause, Target: "w2"})
	require.NoError(t, err)
	_, err = in.Apply(ctx, nemesis.Step{Kind: nemesis.PartitionRing, Order: []string{"c1", "c2", "c3"}})
	require.NoError(t, err)
	require.True(t, f.killed["c1"])
	require.True(t, f.paused["w2"])
	require.NotEmpty(t, f.cutSet())

	require.NoError(t, in.HealAll(ctx))
	require.Empty(t, f.killed)
	require.Empty(t, f.paused)
	require.Empty(t, f.cutSet())
	require.NotZero(t, in.LastHeal())
	in.WaitMeasurements()
	require.Len(t, in.Failovers(), 1, "only the leader kill is a failover")
	require.Len(t, in.Applied(), 3)

	// A fault that cannot be applied is reported and leaves nothing to heal.
	f.failNext = errors.New("no such process")
	_, err = in.Apply(ctx, nemesis.Step{Kind: nemesis.WorkerKill, Target: "w1"})
	require.Error(t, err)
	f.mu.Lock()
	f.leader = ""
	f.mu.Unlock()
	_, err = in.Apply(ctx, nemesis.Step{Kind: nemesis.Pause, Target: nemesis.Leader})
	require.ErrorIs(t, err, nemesis.ErrNoLeader)
	require.Len(t, in.Applied(), 5)

	evs, err := history.ReadFile(path)
	require.NoError(t, err)
	var ops []string
	for _, e := range evs {
		if e.Type == history.TypeNemesis {
			ops = append(ops, e.Op+":"+e.Detail[:4])
		}
	}
	require.Equal(t, []string{"kill:star", "worker-pause:star", "partition-ring:star", "heal-all:heal"}, ops)
}

func TestInjectorRunsPlan(t *testing.T) {
	f := newFake()
	in, _ := newInjector(t, f)
	steps := []nemesis.Step{
		{Kind: nemesis.Pause, At: 0, Hold: 20 * time.Millisecond, Target: nemesis.Leader},
		{Kind: nemesis.WorkerKill, At: 10 * time.Millisecond, Hold: 20 * time.Millisecond, Target: "w1"},
		{Kind: nemesis.PartitionHalves, At: 40 * time.Millisecond, Hold: 20 * time.Millisecond, Sides: [2][]string{{"c1"}, {"c2", "c3"}}},
	}
	require.NoError(t, in.Run(context.Background(), steps))
	f.mu.Lock()
	calls := slices.Clone(f.calls)
	f.mu.Unlock()
	for _, want := range []string{"pause c1", "resume c1", "kill w1", "restart w1", "cut", "heal"} {
		require.Contains(t, calls, want)
	}
	require.Less(t, slices.Index(calls, "pause c1"), slices.Index(calls, "resume c1"))
	require.Less(t, slices.Index(calls, "resume c1"), slices.Index(calls, "cut"), "one track runs its steps in order")
	require.Empty(t, f.paused)
	require.Empty(t, f.killed)
}

// fakeStores is a nemesis.Stores that records its faults and heals.
type fakeStores struct {
	mu     sync.Mutex
	faults []nemesis.StoreFault
	healed int
}

func (f *fakeStores) Fault(_ context.Context, s nemesis.Step) (nemesis.StoreDamage, func(context.Context) error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.Fault == "fail" {
		return nemesis.StoreDamage{}, nil, errors.New("no object yet")
	}
	f.faults = append(f.faults, s.Fault)
	d := nemesis.StoreDamage{Nodes: []string{"s3"}, Detail: "did " + string(s.Fault)}
	if s.Fault == nemesis.DeleteResult {
		d.Nodes, d.Object = []string{"r"}, "runs/r/results/abc"
		d.Items = []history.Item{{Run: "r", ID: "01", Index: 1}}
	}
	return d, func(context.Context) error {
		f.mu.Lock()
		f.healed++
		f.mu.Unlock()
		return nil
	}, nil
}

func TestInjectorStores(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.jsonl")
	h, err := history.Create(path, "nemesis")
	require.NoError(t, err)
	st := &fakeStores{}
	in, err := nemesis.NewInjector(nemesis.InjectorConfig{Replicas: []string{"c1"}, History: h, Stores: st}, newFake())
	require.NoError(t, err)
	ctx := context.Background()
	heal, err := in.Apply(ctx, nemesis.Step{Kind: nemesis.Store, Fault: nemesis.DeleteResult})
	require.NoError(t, err)
	require.NoError(t, heal(ctx))
	_, err = in.Apply(ctx, nemesis.Step{Kind: nemesis.Store, Fault: nemesis.StorePause})
	require.NoError(t, err)
	_, err = in.Apply(ctx, nemesis.Step{Kind: nemesis.Store, Fault: "fail"})
	require.ErrorContains(t, err, "no object yet")
	require.NoError(t, in.HealAll(ctx), "HealAll heals the store fault still in place")
	require.NoError(t, in.HealAll(ctx))
	require.Equal(t, 2, st.healed, "each store fault healed once")
	applied := in.Applied()
	require.Len(t, applied, 3)
	require.Equal(t, "runs/r/results/abc", applied[0].Object)
	require.Equal(t, "did s3-pause", applied[1].Detail)
	require.Contains(t, applied[2].Err, "no object yet")
	require.NoError(t, h.Close())

	evs, err := history.ReadFile(path)
	require.NoError(t, err)
	var damaged []history.Event
	for _, e := range evs {
		if e.Object != "" {
			damaged = append(damaged, e)
		}
	}
	require.Len(t, damaged, 1, "the damaged object is in the history")
	require.Equal(t, []history.Item{{Run: "r", ID: "01", Index: 1}}, damaged[0].Items)
	require.Contains(t, damaged[0].Detail, "start: store")

	// Without stores a store step is refused.
	h2, err := history.Create(filepath.Join(t.TempDir(), "n2.jsonl"), "nemesis")
	require.NoError(t, err)
	t.Cleanup(func() { _ = h2.Close() })
	in2, err := nemesis.NewInjector(nemesis.InjectorConfig{Replicas: []string{"c1"}, History: h2}, newFake())
	require.NoError(t, err)
	_, err = in2.Apply(ctx, nemesis.Step{Kind: nemesis.Store, Fault: nemesis.StoreKill})
	require.ErrorIs(t, err, nemesis.ErrInvalidConfig)
}

// fakeCerts is a nemesis.Certifier that records its steps and heals.
type fakeCerts struct {
	mu     sync.Mutex
	did    []nemesis.CertFault
	healed int
}

func (f *fakeCerts) Cert(_ context.Context, s nemesis.Step) (string, func(context.Context) error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.Target == "refused" {
		return "", nil, errors.New("revocation refused")
	}
	f.did = append(f.did, s.Cert)
	if s.Cert != nemesis.CertRotateCA {
		return "did " + string(s.Cert), nil, nil
	}
	return "new CA", func(context.Context) error {
		f.mu.Lock()
		f.healed++
		f.mu.Unlock()
		return nil
	}, nil
}

// TestInjectorCerts: a revocation that answered OK is recorded as a revoke
// event naming the worker, one that failed is not; a rotation's heal runs
// once (HealAll heals one still under way); without a Certifier a certs
// step is refused.
func TestInjectorCerts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.jsonl")
	h, err := history.Create(path, "nemesis")
	require.NoError(t, err)
	fc := &fakeCerts{}
	in, err := nemesis.NewInjector(nemesis.InjectorConfig{Replicas: []string{"c1"}, Workers: []string{"w1", "w2"}, History: h, Certs: fc}, newFake())
	require.NoError(t, err)
	ctx := context.Background()
	heal, err := in.Apply(ctx, nemesis.Step{Kind: nemesis.Certs, Cert: nemesis.CertRenew, Target: "c1"})
	require.NoError(t, err)
	require.NoError(t, heal(ctx))
	heal, err = in.Apply(ctx, nemesis.Step{Kind: nemesis.Certs, Cert: nemesis.CertRevoke, Target: "w2"})
	require.NoError(t, err)
	require.NoError(t, heal(ctx))
	_, err = in.Apply(ctx, nemesis.Step{Kind: nemesis.Certs, Cert: nemesis.CertRevoke, Target: "refused"})
	require.ErrorContains(t, err, "revocation refused")
	_, err = in.Apply(ctx, nemesis.Step{Kind: nemesis.Certs, Cert: nemesis.CertRotateCA})
	require.NoError(t, err)
	require.NoError(t, in.HealAll(ctx), "HealAll finishes the rotation under way")
	require.NoError(t, in.HealAll(ctx))
	require.Equal(t, 1, fc.healed)
	applied := in.Applied()
	require.Len(t, applied, 4)
	require.Equal(t, []string{"c1", "w1", "w2"}, applied[3].Nodes, "a rotation acts on every process")
	require.Equal(t, "new CA", applied[3].Detail)
	require.NoError(t, h.Close())

	evs, err := history.ReadFile(path)
	require.NoError(t, err)
	var revokes []history.Event
	for _, e := range evs {
		if e.Type == history.TypeNemesis && e.Op == nemesis.RevokeOp {
			revokes = append(revokes, e)
		}
	}
	require.Len(t, revokes, 1, "only the revocation that answered OK is recorded")
	require.Equal(t, []string{"w2"}, revokes[0].Nodes)
	require.Equal(t, checker.RevokeOp, nemesis.RevokeOp, "the checker reads the event the injector writes")

	h2, err := history.Create(filepath.Join(t.TempDir(), "n2.jsonl"), "nemesis")
	require.NoError(t, err)
	t.Cleanup(func() { _ = h2.Close() })
	in2, err := nemesis.NewInjector(nemesis.InjectorConfig{Replicas: []string{"c1"}, History: h2}, newFake())
	require.NoError(t, err)
	_, err = in2.Apply(ctx, nemesis.Step{Kind: nemesis.Certs, Cert: nemesis.CertRenew, Target: "c1"})
	require.ErrorIs(t, err, nemesis.ErrInvalidConfig)
}

func TestNewInjectorValidates(t *testing.T) {
	h, err := history.Create(filepath.Join(t.TempDir(), "n.jsonl"), "nemesis")
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	cfg := nemesis.DefaultInjectorConfig()
	cfg.Replicas, cfg.History = []string{"c1"}, h
	require.NoError(t, cfg.Validate())
	_, err = nemesis.NewInjector(cfg, nil)
	require.ErrorIs(t, err, nemesis.ErrInvalidConfig)
	for name, mutate := range map[string]func(*nemesis.InjectorConfig){
		"history":  func(c *nemesis.InjectorConfig) { c.History = nil },
		"replicas": func(c *nemesis.InjectorConfig) { c.Replicas = nil },
		"timeout":  func(c *nemesis.InjectorConfig) { c.FailoverTimeout = -time.Second },
	} {
		t.Run(name, func(t *testing.T) {
			c := cfg
			mutate(&c)
			_, err := nemesis.NewInjector(c, newFake())
			require.ErrorIs(t, err, nemesis.ErrInvalidConfig)
		})
	}
}

func TestPlanFloodTrack(t *testing.T) {
	tests := []struct {
		d        time.Duration
		min, max int // flood steps
	}{
		{10 * time.Second, 0, 0}, // too short for the first flood
		{30 * time.Second, 1, 1},
		{3 * time.Minute, 5, 7},
	}
	for _, tt := range tests {
		cfg := planConfig(3, tt.d)
		cfg.Kinds = []nemesis.Kind{nemesis.Kill, nemesis.Flood}
		steps, err := nemesis.Plan(cfg)
		require.NoError(t, err)
		var floods []nemesis.Step
		for _, s := range steps {
			if s.Kind == nemesis.Flood {
				floods = append(floods, s)
			}
		}
		require.GreaterOrEqual(t, len(floods), tt.min, "%v", tt.d)
		require.LessOrEqual(t, len(floods), tt.max, "%v", tt.d)
		var flooded time.Duration
		for i, s := range floods {
			require.Equal(t, nemesis.Leader, s.Target)
			require.LessOrEqual(t, s.At+s.Hold, tt.d)
			if i > 0 {
				require.GreaterOrEqual(t, s.At-floods[i-1].At-floods[i-1].Hold, nemesis.FloodPeriod/2, "floods are apart")
			}
			flooded += s.Hold
		}
		require.Less(t, flooded, tt.d/3, "most of the run is unflooded")
		// No other fault comes near a flood: its quiet window is free.
		var kills []nemesis.Step
		for _, s := range steps {
			if s.Kind != nemesis.Kill {
				continue
			}
			kills = append(kills, s)
			for _, f := range floods {
				from, to := f.At-nemesis.FloodQuietBefore, f.At+f.Hold+nemesis.FloodQuietAfter
				require.True(t, s.At+s.Hold <= from || s.At >= to, "%v in the quiet window of %v", s, f)
			}
		}
		require.NotEmpty(t, kills, "%v", tt.d)
	}
	// In a mixed 3-minute run the floods' quiet windows are kept, and
	// every kind and store fault still comes up.
	for seed := int64(1); seed <= 20; seed++ {
		steps, err := nemesis.Plan(planConfig(seed, 3*time.Minute))
		require.NoError(t, err)
		seen := map[string]bool{}
		var floods []nemesis.Step
		for _, s := range steps {
			seen[string(s.Kind)+"/"+string(s.Fault)] = true
			if s.Kind == nemesis.Flood {
				floods = append(floods, s)
			}
		}
		require.Len(t, seen, len(nemesis.AllKinds())-1+len(nemesis.StoreFaults()), "seed %d", seed)
		require.GreaterOrEqual(t, len(floods), 5)
		for _, s := range steps {
			for _, f := range floods {
				if s.Kind != nemesis.Flood {
					require.True(t, s.At+s.Hold <= f.At-nemesis.FloodQuietBefore || s.At >= f.At+f.Hold+nemesis.FloodQuietAfter,
						"seed %d: %v in the quiet window of %v", seed, s, f)
				}
			}
		}
	}
}

// TestInjectorRunKeepsFloodsApart: where the steps keep a flood's quiet
// window, Run holds the flood back until a fault that heals late has
// healed and settled, and holds the next fault back while it floods.
func TestInjectorRunKeepsFloodsApart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.jsonl")
	h, err := history.Create(path, "nemesis")
	require.NoError(t, err)
	fl := &fakeFlooder{}
	f := newFake()
	f.resumeDelay = nemesis.FloodQuietBefore + 500*time.Millisecond // the pause heals after the flood's At
	in, err := nemesis.NewInjector(nemesis.InjectorConfig{Replicas: []string{"c1", "c2", "c3"}, Workers: []string{"w1"}, History: h, Flooder: fl}, f)
	require.NoError(t, err)
	floodAt, floodHold := nemesis.FloodQuietBefore+100*time.Millisecond, 300*time.Millisecond
	steps := []nemesis.Step{
		{Kind: nemesis.Pause, At: 0, Hold: 100 * time.Millisecond, Target: nemesis.Leader},
		{Kind: nemesis.Flood, At: floodAt, Hold: floodHold, Target: nemesis.Leader},
		{Kind: nemesis.WorkerKill, At: floodAt + floodHold + nemesis.FloodQuietAfter, Hold: 100 * time.Millisecond, Target: "w1"},
	}
	require.NoError(t, in.Run(context.Background(), steps))
	require.NoError(t, h.Close())
	evs, err := history.ReadFile(path)
	require.NoError(t, err)
	var order []string
	at := map[string]int64{}
	for _, e := range evs {
		if e.Type == history.TypeNemesis {
			d := "start"
			if !strings.HasPrefix(e.Detail, "start") {
				d = e.Detail
			}
			order = append(order, e.Op+" "+d)
			at[e.Op+" "+d] = e.Time
		}
	}
	require.Equal(t, []string{"pause start", "pause heal", "flood start", "flood heal", "worker-kill start", "worker-kill heal", "heal-all heal"}, order)
	require.GreaterOrEqual(t, time.Duration(at["flood start"]-at["pause heal"]), nemesis.FloodSettle, "the flood waits for the pause to settle")
	require.Equal(t, []string{"c1 300ms"}, fl.flooded)

	// Steps that overlap a flood's quiet window (a short run's plan) run
	// as planned, side by side.
	path2 := filepath.Join(t.TempDir(), "n2.jsonl")
	h2, err := history.Create(path2, "nemesis")
	require.NoError(t, err)
	in2, err := nemesis.NewInjector(nemesis.InjectorConfig{Replicas: []string{"c1", "c2", "c3"}, Workers: []string{"w1"}, History: h2, Flooder: &fakeFlooder{}}, newFake())
	require.NoError(t, err)
	require.NoError(t, in2.Run(context.Background(), []nemesis.Step{
		{Kind: nemesis.Pause, At: 0, Hold: 300 * time.Millisecond, Target: nemesis.Leader},
		{Kind: nemesis.Flood, At: 100 * time.Millisecond, Hold: 300 * time.Millisecond, Target: nemesis.Leader},
	}))
	require.NoError(t, h2.Close())
	evs, err = history.ReadFile(path2)
	require.NoError(t, err)
	order = nil
	for _, e := range evs {
		if e.Type == history.TypeNemesis && e.Op != "heal-all" {
			order = append(order, e.Op+" "+strings.Fields(e.Detail)[0])
		}
	}
	require.Equal(t, []string{"pause start:", "flood start:", "pause heal", "flood heal"}, order)
}

// fakeFlooder records floods.
type fakeFlooder struct {
	mu      sync.Mutex
	flooded []string
	stopped int
}

func (f *fakeFlooder) Flood(_ context.Context, replica string, hold time.Duration) (func(context.Context) (string, error), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flooded = append(f.flooded, fmt.Sprintf("%s %v", replica, hold))
	return func(context.Context) (string, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.stopped++
		return "hold: 4000 attempted", nil
	}, nil
}

func TestInjectorFlood(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.jsonl")
	h, err := history.Create(path, "nemesis")
	require.NoError(t, err)
	fl := &fakeFlooder{}
	in, err := nemesis.NewInjector(nemesis.InjectorConfig{Replicas: []string{"c1", "c2", "c3"}, History: h, Flooder: fl}, newFake())
	require.NoError(t, err)
	ctx := context.Background()
	heal, err := in.Apply(ctx, nemesis.Step{Kind: nemesis.Flood, Target: nemesis.Leader, Hold: 5 * time.Second})
	require.NoError(t, err)
	require.NoError(t, heal(ctx))
	_, err = in.Apply(ctx, nemesis.Step{Kind: nemesis.Flood, Target: nemesis.Leader, Hold: 6 * time.Second})
	require.NoError(t, err)
	require.NoError(t, in.HealAll(ctx), "HealAll stops the flood still under way")
	require.NoError(t, in.HealAll(ctx))
	require.Equal(t, []string{"c1 5s", "c1 6s"}, fl.flooded, "the leader is flooded")
	require.Equal(t, 2, fl.stopped, "each flood stopped once")
	applied := in.Applied()
	require.Len(t, applied, 2)
	for _, a := range applied {
		require.Equal(t, []string{"c1"}, a.Nodes)
		require.Equal(t, "hold: 4000 attempted", a.Detail, "the figures are in the report")
	}
	require.NoError(t, h.Close())
	evs, err := history.ReadFile(path)
	require.NoError(t, err)
	var starts, heals, figures int
	for _, e := range evs {
		switch {
		case e.Type == history.TypeNemesis && e.Op == "flood" && strings.HasPrefix(e.Detail, "start"):
			starts++
		case e.Type == history.TypeNemesis && e.Op == "flood" && e.Detail == "heal":
			heals++
		case e.Type == history.TypeInfo && e.Op == "flood":
			figures++
		}
	}
	require.Equal(t, 2, starts)
	require.Equal(t, 1, heals, "HealAll records one heal-all event, not one per flood")
	require.Equal(t, 2, figures)

	// Without a flooder a flood step is refused.
	h2, err := history.Create(filepath.Join(t.TempDir(), "n2.jsonl"), "nemesis")
	require.NoError(t, err)
	t.Cleanup(func() { _ = h2.Close() })
	in2, err := nemesis.NewInjector(nemesis.InjectorConfig{Replicas: []string{"c1"}, History: h2}, newFake())
	require.NoError(t, err)
	_, err = in2.Apply(ctx, nemesis.Step{Kind: nemesis.Flood, Target: nemesis.Leader})
	require.ErrorIs(t, err, nemesis.ErrInvalidConfig)
}

// TestInjectorWorkerKillDrainsEveryOther checks that every second
// worker-kill step drains the worker (SIGTERM) instead of killing it, says
// so in the history, and is healed by a restart as a kill is.
func TestInjectorWorkerKillDrainsEveryOther(t *testing.T) {
	f := newFake()
	in, path := newInjector(t, f)
	ctx := context.Background()
	for range 3 {
		heal, err := in.Apply(ctx, nemesis.Step{Kind: nemesis.WorkerKill, Target: "w1"})
		require.NoError(t, err)
		require.True(t, f.killed["w1"])
		require.NoError(t, heal(ctx))
	}
	f.mu.Lock()
	calls := slices.Clone(f.calls)
	f.mu.Unlock()
	require.Equal(t, []string{"kill w1", "restart w1", "drain w1", "restart w1", "kill w1", "restart w1"}, calls)
	evs, err := history.ReadFile(path)
	require.NoError(t, err)
	drained := 0
	for _, e := range evs {
		if e.Type == history.TypeNemesis && strings.Contains(e.Detail, "drained (SIGTERM") {
			drained++
		}
	}
	require.Equal(t, 1, drained)
}
