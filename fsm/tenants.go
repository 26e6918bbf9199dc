package fsm

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/google/btree"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// Tenants, priorities and fair share (issue 30).
//
// Every run belongs to a tenant (RunSpec.tenant; "" is DefaultTenant) and
// has a priority (RunSpec.priority, 1 to 5; 0 is DefaultPriority), both
// fixed when the run is created. A claim chooses the record it takes in
// this order (queue.go, pick):
//
//  1. the highest priority that has claimable work the worker takes;
//  2. within it, the tenant with the least decayed usage per unit of weight
//     (usage × other weight compared exactly in 128 bits, then the name);
//  3. within that tenant, its run with the fewest items served (then the
//     oldest run);
//  4. within that run, its oldest queued record (FIFO).
//
// A tenant's usage is the items claims gave it (each record's width when
// claimed; a steal moves work already counted), in fixed point with
// usageShift fraction bits, and it decays: every decayStepsPerHalfLife-th
// of Config.UsageHalfLife of leader-stamped time every tenant's usage is
// multiplied by 2^(-1/decayStepsPerHalfLife) (integer arithmetic: apply
// reads no clock and does no floating point). A tenant that comes back
// after holding no queued work, or a new one, starts at the least usage
// per weight of the tenants with queued work (never lower than its own):
// an idle tenant is not punished for its past and a busy one is not
// starved by a newcomer's empty history (the "min vruntime" of a fair
// scheduler). A run that queues again starts level with its tenant's least
// served queued run of its priority and queue in the same way.
//
// Maximum priority: a tenant's max_priority (0: none), set like its
// weight, caps the priority of the runs it creates afterwards: a run
// created with a higher priority (the default 3 included) gets
// max_priority instead (clamped, not refused: a federation peer's runs
// land at the priority the callee's operator allows). A later submit to
// the run naming the priority it asked for, or the one it got, is
// accepted. Runs created before the cap keep theirs.
//
// Quotas: max_queued refuses a submit (ErrQuota, nothing changes) that
// would put the tenant's queued items past it (only new items count: a
// resume that re-pends a tenant's dead or silent work is never refused);
// max_running stops claims for the tenant at that many running items (a
// claim carves a range to the room left). Running work is never
// preempted.
//
// Every choice is a function of the ledger's state, which the snapshot
// holds whole (tenants, usage and its decay time, each run's served
// count, each run's queue order): a replica restored from a snapshot
// chooses exactly as one that applied the log.

// DefaultTenant owns a run whose spec names no tenant (runs of an insecure
// cluster, and runs created before tenants existed).
const DefaultTenant = "default"

// Priorities: a run's priority is MinPriority to MaxPriority; 0 in a spec
// means DefaultPriority.
const (
	MinPriority     = 1
	MaxPriority     = 5
	DefaultPriority = 3
)

// MaxTenantWeight bounds a tenant's weight (a weight is at least 1).
const MaxTenantWeight = 1000

const (
	// usageShift is the number of fraction bits of a tenant's usage.
	usageShift = 16
	// decayStepsPerHalfLife is how many decay steps make a half-life.
	decayStepsPerHalfLife = 16
)

// decayFactor returns 2^(-r/decayStepsPerHalfLife) in fixed point with
// usageShift fraction bits, for 0 <= r < decayStepsPerHalfLife (the values
// are round(65536 × 2^(-r/16)); TestDecayFactors checks them).
func decayFactor(r int) uint64 {
	return [decayStepsPerHalfLife]uint64{
		65536, 62757, 60097, 57549, 55109, 52773, 50535, 48393,
		46341, 44376, 42495, 40693, 38968, 37316, 35734, 34219,
	}[r]
}

// priorityOf returns a spec's priority, DefaultPriority for 0.
func priorityOf(s *fsmpb.RunSpec) uint32 {
	if p := s.GetPriority(); p != 0 {
		return p
	}
	return DefaultPriority
}

// tenantOf returns the tenant a spec names, DefaultTenant for "".
func tenantOf(s *fsmpb.RunSpec) string {
	if t := s.GetTenant(); t != "" {
		return t
	}
	return DefaultTenant
}

// tenant is a tenant's record: its settings, its decayed usage, the
// counters of its runs and its places in the claim queue.
type tenant struct {
	name                  string
	weight                uint32
	maxQueued, maxRunning uint64
	// maxPriority caps the priority of the runs it creates (0: none).
	maxPriority uint32
	// usage is the decayed usage, items with usageShift fraction bits.
	usage uint64
	// set is true once SetTenantCmd named it: the record stays without
	// runs.
	set bool
	// runs counts the runs the ledger holds of it; queued, running and
	// done count their indexes in those states.
	runs                  int
	queued, running, done uint64
	// lanes are its queues of runs with queued work, one per (claim queue,
	// priority); active is set while it has any (it is then in the active
	// tree); throttled while it is at max_running (its lanes are then out of
	// their levels, so claims skip it).
	lanes     []*lane
	active    bool
	throttled bool
}

// cmpScore orders tenants by usage per weight (exactly: a.usage × b.weight
// against b.usage × a.weight in 128 bits), then by name.
func cmpScore(a, b *tenant) int {
	ah, al := bits.Mul64(a.usage, uint64(b.weight))
	bh, bl := bits.Mul64(b.usage, uint64(a.weight))
	if c := cmp.Compare(ah, bh); c != 0 {
		return c
	}
	if c := cmp.Compare(al, bl); c != 0 {
		return c
	}
	return cmpString(a.name, b.name)
}

// clampPriority returns priority p (0: DefaultPriority) capped at t's
// max_priority.
func (t *tenant) clampPriority(p uint32) uint32 {
	if p == 0 {
		p = DefaultPriority
	}
	if t.maxPriority != 0 && p > t.maxPriority {
		return t.maxPriority
	}
	return p
}

// saturated reports whether t is at its max_running quota.
func (t *tenant) saturated() bool { return t.maxRunning > 0 && t.running >= t.maxRunning }

// room returns how many more indexes t may run (max when no quota).
func (t *tenant) room() uint64 {
	if t.maxRunning == 0 {
		return ^uint64(0)
	}
	if t.running >= t.maxRunning {
		return 0
	}
	return t.maxRunning - t.running
}

// add adds d indexes to t's counter of state s.
func (t *tenant) add(s State, d int64) {
	switch s {
	case StatePending:
		t.queued = uint64(int64(t.queued) + d)
	case StateRunning:
		t.running = uint64(int64(t.running) + d)
	case StateDone:
		t.done = uint64(int64(t.done) + d)
	}
}

// tenant returns the record of name, creating it (weight 1, no quotas).
func (st *state) tenant(name string) *tenant {
	t := st.tenants[name]
	if t == nil {
		t = &tenant{name: name, weight: 1}
		st.tenants[name] = t
	}
	return t
}

// dropTenant forgets t when nothing keeps it: no run, never set.
func (st *state) dropTenant(t *tenant) {
	if t.runs == 0 && !t.set && !t.active {
		delete(st.tenants, t.name)
	}
}

// updateThrottle takes t's lanes out of the claim queue's levels when it
// reaches max_running, and puts them back when it has room again.
func (t *tenant) updateThrottle() {
	want := t.saturated()
	if want == t.throttled {
		return
	}
	if want {
		for _, ln := range t.lanes {
			ln.detach()
		}
		t.throttled = true
		return
	}
	t.throttled = false
	for _, ln := range t.lanes {
		ln.attach()
		ln.q.all.woke = true // its queued work is claimable again
	}
}

// rekey runs fn, which changes what t's places in the ordered indexes are
// keyed by (its usage or weight), with t out of them.
func (st *state) rekey(t *tenant, fn func()) {
	if t.active {
		st.pending.active.Delete(t)
	}
	if !t.throttled {
		for _, ln := range t.lanes {
			ln.detach()
		}
	}
	fn()
	if !t.throttled {
		for _, ln := range t.lanes {
			ln.attach()
		}
	}
	if t.active {
		st.pending.active.ReplaceOrInsert(t)
	}
}

// charge counts n claimed indexes of run r: its tenant's usage and its
// served count.
func (st *state) charge(r *run, n uint64) {
	t := r.ten
	st.rekey(t, func() {
		add := uint64(1<<63 - 1)
		if n < 1<<(63-usageShift) {
			add = n << usageShift
		}
		if t.usage > ^uint64(0)-add {
			t.usage = ^uint64(0)
		} else {
			t.usage += add
		}
	})
	if ln := r.lane; ln != nil {
		ln.runs.Delete(r)
		r.served += n
		ln.runs.ReplaceOrInsert(r)
	} else {
		r.served += n
	}
}

// decayUsage brings every tenant's usage to the ledger's stamped time:
// one decay step per elapsed step of the half-life since the last one,
// on a grid of steps from Unix time 0. O(tenants) once a step.
func (l *Ledger) decayUsage() {
	st := l.st
	step := l.cfg.halfLife() / decayStepsPerHalfLife
	if st.now < st.usageAt+step {
		return
	}
	k := (st.now - st.usageAt) / step
	st.usageAt += k * step
	if len(st.tenants) == 0 {
		return
	}
	shift := k / decayStepsPerHalfLife
	f := decayFactor(int(k % decayStepsPerHalfLife))
	// Every tenant's key changes (equally, but for rounding): rebuild the
	// ordered indexes.
	ts := make([]*tenant, 0, len(st.tenants))
	for _, t := range st.tenants {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b *tenant) int { return cmpString(a.name, b.name) })
	for _, t := range ts {
		if t.active {
			st.pending.active.Delete(t)
		}
		if !t.throttled {
			for _, ln := range t.lanes {
				ln.detach()
			}
		}
	}
	for _, t := range ts {
		u := t.usage
		if shift >= 64 {
			u = 0
		} else {
			u >>= shift
		}
		hi, lo := bits.Mul64(u, f)
		t.usage = hi<<(64-usageShift) | lo>>usageShift
	}
	for _, t := range ts {
		if !t.throttled {
			for _, ln := range t.lanes {
				ln.attach()
			}
		}
		if t.active {
			st.pending.active.ReplaceOrInsert(t)
		}
	}
}

// checkTenantName validates a tenant name: the rules of a run name.
func checkTenantName(what, name string) error {
	return checkName(what, name, limits.MaxRunNameBytes)
}

// checkSpecTenant validates a spec's tenant and priority.
func checkSpecTenant(s *fsmpb.RunSpec) error {
	if t := s.GetTenant(); t != "" {
		if err := checkTenantName("spec tenant", t); err != nil {
			return err
		}
	}
	if p := s.GetPriority(); p > MaxPriority {
		return invalidErr("spec priority is %d, must be %d to %d (0: %d)", p, MinPriority, MaxPriority, DefaultPriority)
	}
	return nil
}

// submitTenant returns the tenant a submit acts as and checks it against
// run r (nil: the submit creates it) and the tenants' quotas: as names the
// submitter's tenant (the command's tenant field; "" when it names none),
// spec the request's spec. An existing run must be as's and the spec's
// tenant when they are named (ErrNotOwner), and keeps its priority; a new
// run is as's, else the spec's tenant's. The tenant's max_queued quota must
// hold with fresh more queued indexes (ErrQuota). It returns the tenant a
// new run gets.
func (l *Ledger) submitTenant(op, name string, r *run, spec *fsmpb.RunSpec, as string, fresh uint64) (string, error) {
	if as != "" {
		if err := checkTenantName(op+" tenant", as); err != nil {
			return "", err
		}
		if t := spec.GetTenant(); t != "" && t != as {
			return "", fmt.Errorf("%w: %s of run %q as tenant %q names tenant %q in its spec", ErrNotOwner, op, name, as, t)
		}
	}
	ten := as
	if ten == "" {
		ten = tenantOf(spec)
	}
	if r != nil {
		ten = r.ten.name
		for _, t := range []string{as, spec.GetTenant()} {
			if t != "" && t != ten {
				return "", fmt.Errorf("%w: %s names tenant %q for run %q, which belongs to tenant %q", ErrNotOwner, op, t, name, ten)
			}
		}
		if p := spec.GetPriority(); p != 0 && p != priorityOf(r.spec) && r.ten.clampPriority(p) != priorityOf(r.spec) {
			return "", invalidErr("%s gives run %q priority %d; it has priority %d (fixed when the run was created)", op, name, p, priorityOf(r.spec))
		}
	}
	t := l.st.tenants[ten]
	if t == nil || t.maxQueued == 0 || fresh == 0 {
		return ten, nil
	}
	if t.queued+fresh > t.maxQueued {
		return "", &QuotaError{Tenant: ten, Run: name, Op: op, Limit: t.maxQueued, Queued: t.queued, Adds: fresh}
	}
	return ten, nil
}

// QuotaError is a submit refused by its tenant's max_queued quota: the
// tenant, the run and operation, the limit, what is queued and what the
// submit adds. It wraps ErrQuota (match it with errors.Is; errors.As gives
// the fields).
type QuotaError struct {
	Tenant, Run, Op     string
	Limit, Queued, Adds uint64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("%v: tenant %q may queue at most %d items (max_queued); %d are queued and %s of run %q adds %d",
		ErrQuota, e.Tenant, e.Limit, e.Queued, e.Op, e.Run, e.Adds)
}

// Unwrap returns ErrQuota.
func (e *QuotaError) Unwrap() error { return ErrQuota }

// setTenantCommand: SetTenantCmd sets a tenant's weight and quotas.
func setTenantCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_SetTenant)(nil), label: "set_tenant",
		apply:    func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applySetTenant(c.GetSetTenant()) },
		snapshot: partTenants,
	}
}

// applySetTenant sets a tenant's weight and quotas, creating its record.
func (l *Ledger) applySetTenant(c *fsmpb.SetTenantCmd) Result {
	if err := checkTenantName("set_tenant name", c.GetName()); err != nil {
		return fail(err)
	}
	if c.Weight != nil && (c.GetWeight() < 1 || c.GetWeight() > MaxTenantWeight) {
		return invalid("set_tenant weight is %d, must be 1 to %d", c.GetWeight(), MaxTenantWeight)
	}
	if c.GetMaxPriority() > MaxPriority {
		return invalid("set_tenant max_priority is %d, must be %d to %d (0: none)", c.GetMaxPriority(), MinPriority, MaxPriority)
	}
	st := l.st
	t := st.tenant(c.GetName())
	t.set = true
	if c.Weight != nil && c.GetWeight() != t.weight {
		st.rekey(t, func() { t.weight = c.GetWeight() })
	}
	if c.MaxQueued != nil {
		t.maxQueued = c.GetMaxQueued()
	}
	if c.MaxRunning != nil {
		t.maxRunning = c.GetMaxRunning()
		t.updateThrottle() // lanes that come back wake the long-polls
	}
	if c.MaxPriority != nil {
		t.maxPriority = c.GetMaxPriority()
	}
	return Result{}
}

// Tenant is a copy of a tenant's record and counters.
type Tenant struct {
	Name       string
	Weight     uint32
	MaxQueued  uint64 // 0: no quota
	MaxRunning uint64 // 0: no quota
	// MaxPriority caps the priority of the runs it creates (0: none).
	MaxPriority uint32
	// Usage is the decayed usage in items as of the ledger's last decay
	// step.
	Usage float64
	// Queued, Running and Done count the indexes of its runs in those
	// states; Runs its runs, Active those not finished.
	Queued, Running, Done uint64
	Runs, Active          int
	// Set is true when SetTenantCmd named it.
	Set bool
}

// Tenants returns every tenant the ledger knows, sorted by name:
// O(tenants + runs).
func (l *Ledger) Tenants() []Tenant {
	l.mu.RLock()
	defer l.mu.RUnlock()
	st := l.st
	active := make(map[string]int, len(st.tenants))
	for _, r := range st.runOrder {
		if r.finished == 0 {
			active[r.ten.name]++
		}
	}
	out := make([]Tenant, 0, len(st.tenants))
	for _, t := range st.tenants {
		out = append(out, Tenant{Name: t.name, Weight: t.weight, MaxQueued: t.maxQueued, MaxRunning: t.maxRunning, MaxPriority: t.maxPriority,
			Usage: float64(t.usage) / (1 << usageShift), Queued: t.queued, Running: t.running, Done: t.done,
			Runs: t.runs, Active: active[t.name], Set: t.set})
	}
	slices.SortFunc(out, func(a, b Tenant) int { return cmpString(a.Name, b.Name) })
	return out
}

// UsageAt returns the stamped time the tenants' usage was last decayed to.
func (l *Ledger) UsageAt() time.Time {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return unixTime(l.st.usageAt)
}

// newActiveTree returns the ordered index of active tenants.
func newActiveTree() *btree.BTreeG[*tenant] {
	return btree.NewG[*tenant](8, func(a, b *tenant) bool { return cmpScore(a, b) < 0 })
}
