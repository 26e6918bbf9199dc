package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// startTime is the stamped time a harness starts at.
func startTime() time.Time { return time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC) }

// harness applies entries to one ledger as Raft would, with a stamped clock
// the test controls.
type harness struct {
	t     testing.TB
	l     *Ledger
	term  uint64
	now   time.Time
	index uint64
}

func newHarness(t testing.TB) *harness {
	return newHarnessConfig(t, DefaultConfig())
}

func newHarnessConfig(t testing.TB, cfg Config) *harness {
	t.Helper()
	l, err := New(cfg)
	require.NoError(t, err)
	return &harness{t: t, l: l, term: 1, now: startTime()}
}

// entry encodes cmds as one entry stamped with h.now and h.term.
func (h *harness) entry(epoch uint64, cmds ...*fsmpb.Command) []byte {
	h.t.Helper()
	raw := make([][]byte, len(cmds))
	for i, c := range cmds {
		b, err := EncodeCommand(c)
		require.NoError(h.t, err)
		raw[i] = b
	}
	data, err := EncodeEntry(h.now, epoch, raw)
	require.NoError(h.t, err)
	return data
}

// applyData applies raw entry data at term.
func (h *harness) applyData(term uint64, data []byte) interface{} {
	h.index++
	return h.l.Apply(&raft.Log{Index: h.index, Term: term, Type: raft.LogCommand, Data: data})
}

// applyAt applies cmds in one entry without advancing the clock.
func (h *harness) applyAt(cmds ...*fsmpb.Command) []Result {
	h.t.Helper()
	_, _, seq := h.l.Events(0, 1, "")
	out := h.applyData(h.term, h.entry(h.term, cmds...))
	res, ok := out.(Results)
	require.True(h.t, ok, "apply returned %T: %v", out, out)
	require.Len(h.t, res, len(cmds))
	requireDeclaredKinds(h.t, h.l, seq, cmds) // registry_test.go
	return res
}

// apply advances the clock by a millisecond and applies cmds in one entry.
func (h *harness) apply(cmds ...*fsmpb.Command) []Result {
	h.t.Helper()
	h.now = h.now.Add(time.Millisecond)
	return h.applyAt(cmds...)
}

// ok applies cmds and requires each to succeed.
func (h *harness) ok(cmds ...*fsmpb.Command) []Result {
	h.t.Helper()
	res := h.apply(cmds...)
	for i, r := range res {
		require.NoError(h.t, r.Err, "command %d", i)
	}
	return res
}

// one applies a single command in its own entry.
func (h *harness) one(c *fsmpb.Command) Result {
	h.t.Helper()
	return h.apply(c)[0]
}

func (h *harness) item(run, id string) Item {
	h.t.Helper()
	items, _, _, err := h.l.Results(run, 0, 1<<30)
	require.NoError(h.t, err)
	for _, it := range items {
		if string(it.ID) == id {
			return it
		}
	}
	h.t.Fatalf("no item %s/%s", run, id)
	return Item{}
}

func (h *harness) run(name string) RunStatus {
	h.t.Helper()
	rs, err := h.l.Run(name)
	require.NoError(h.t, err)
	return rs
}

func (h *harness) worker(id string) WorkerStatus {
	h.t.Helper()
	for _, w := range h.l.Workers() {
		if w.ID == id {
			return w
		}
	}
	h.t.Fatalf("no worker %s", id)
	return WorkerStatus{}
}

// persist returns the ledger's snapshot stream.
func persist(t testing.TB, l *Ledger) []byte {
	t.Helper()
	s, err := l.Snapshot()
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, s.(*snapshot).writeTo(&buf))
	s.Release()
	return buf.Bytes()
}

func restore(l *Ledger, b []byte) error {
	return l.Restore(io.NopCloser(bytes.NewReader(b)))
}

// ---- command constructors ----

func ni(id string, index uint64, payload string) *fsmpb.NewItem {
	return &fsmpb.NewItem{Id: []byte(id), Index: index, Payload: []byte(payload)}
}

func cSubmit(run string, spec *fsmpb.RunSpec, retryDead bool, items ...*fsmpb.NewItem) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Submit{Submit: &fsmpb.SubmitItemsCmd{Run: run, Spec: spec, Items: items, RetryDead: retryDead}}}
}

func cClaim(worker string, max uint32) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Claim{Claim: &fsmpb.ClaimCmd{Worker: worker, Max: max}}}
}

func cComplete(run, id, worker string, attempt uint64, result string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Complete{Complete: &fsmpb.CompleteCmd{Run: run, Id: []byte(id), Worker: worker, Attempt: attempt, Result: []byte(result)}}}
}

func cFail(run, id, worker string, attempt uint64, reason string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Fail{Fail: &fsmpb.FailCmd{Run: run, Id: []byte(id), Worker: worker, Attempt: attempt, Reason: reason}}}
}

func cNack(run, id, worker string, attempt uint64) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Nack{Nack: &fsmpb.NackCmd{Run: run, Id: []byte(id), Worker: worker, Attempt: attempt}}}
}

func key(run, id string, attempt uint64) *fsmpb.ItemKey {
	return &fsmpb.ItemKey{Run: run, Id: []byte(id), Attempt: attempt}
}

func cHeartbeat(worker string, backlog uint32, rate float64, executing, held []*fsmpb.ItemKey) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Heartbeat{Heartbeat: &fsmpb.HeartbeatCmd{
		Worker: worker, Backlog: backlog, ItemsPerSec: rate, Executing: executing, Held: held}}}
}

func cRegister(worker string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Register{Register: &fsmpb.RegisterWorkerCmd{Worker: worker}}}
}

// cRegisterAll registers each worker, one command each.
func cRegisterAll(workers ...string) []*fsmpb.Command {
	out := make([]*fsmpb.Command, len(workers))
	for i, w := range workers {
		out[i] = cRegister(w)
	}
	return out
}

func cEvict(worker string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Deregister{Deregister: &fsmpb.DeregisterCmd{Worker: worker, Evicted: true}}}
}

func cDeregister(worker string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Deregister{Deregister: &fsmpb.DeregisterCmd{Worker: worker}}}
}

func cSteal(thief string, backlog uint32) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Steal{Steal: &fsmpb.StealCmd{Thief: thief, ThiefBacklog: backlog}}}
}

func cExpire(timeout time.Duration) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Expire{Expire: &fsmpb.ExpireWorkersCmd{TimeoutNano: int64(timeout)}}}
}

func cEpoch(leader, addr string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Epoch{Epoch: &fsmpb.EpochCmd{LeaderId: leader, LeaderGrpcAddr: addr}}}
}

func cRevoke(serial, name, holder, role, byName, bySerial string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Revoke{Revoke: &fsmpb.RevokeCmd{
		Serial: serial, Name: name, Holder: holder, Role: role, ByName: byName, BySerial: bySerial}}}
}

// cSetTenant sets a tenant; a negative value leaves its field unset.
func cSetTenant(name string, weight int, maxQueued, maxRunning int64) *fsmpb.Command {
	c := &fsmpb.SetTenantCmd{Name: name}
	if weight >= 0 {
		w := uint32(weight)
		c.Weight = &w
	}
	if maxQueued >= 0 {
		q := uint64(maxQueued)
		c.MaxQueued = &q
	}
	if maxRunning >= 0 {
		r := uint64(maxRunning)
		c.MaxRunning = &r
	}
	return &fsmpb.Command{Cmd: &fsmpb.Command_SetTenant{SetTenant: c}}
}

// cSetMaxPriority sets tenant name's max_priority (0 removes it).
func cSetMaxPriority(name string, p uint32) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_SetTenant{SetTenant: &fsmpb.SetTenantCmd{Name: name, MaxPriority: &p}}}
}

func cSetMember(id, raftAddr, grpcAddr string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_SetMember{SetMember: &fsmpb.SetMemberCmd{Id: id, RaftAddr: raftAddr, GrpcAddr: grpcAddr}}}
}

func cRemoveMember(id string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_RemoveMember{RemoveMember: &fsmpb.RemoveMemberCmd{Id: id}}}
}

// sentinels returns the errors a command result may wrap.
func sentinels() []error {
	return []error{ErrCASMiss, ErrConflict, ErrRunNotFound, ErrItemNotFound, ErrInvalidCommand, ErrStaleEpoch, ErrNotIdle, ErrWorkerNotRegistered, ErrQuota, ErrNotOwner, ErrHandled, ErrRouteConflict, ErrRunActive}
}

// errKind returns the sentinel err wraps, nil for nil; it fails the test for
// an error wrapping none of them.
func errKind(t testing.TB, err error) error {
	t.Helper()
	if err == nil {
		return nil
	}
	for _, s := range sentinels() {
		if errors.Is(err, s) {
			return s
		}
	}
	t.Fatalf("error wraps no sentinel: %v", err)
	return nil
}

// checkInvariants recounts the ledger's state from scratch and compares it
// with every counter and index the ledger keeps.
func checkInvariants(t testing.TB, l *Ledger) {
	t.Helper()
	require.NoError(t, invariantsErr(l))
}

// invariantsErr returns the first broken invariant. Plain comparisons keep
// it cheap enough to run after every entry of the property test.
func invariantsErr(l *Ledger) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	st := l.st
	var total uint64
	running := map[*item]bool{}
	for i, r := range st.runOrder {
		switch {
		case r.seq == 0 || r.seq > st.runSeq || (i > 0 && r.seq <= st.runOrder[i-1].seq):
			return fmt.Errorf("run %s seq %d at position %d (last handed out %d)", r.name, r.seq, i, st.runSeq)
		case st.runs[r.name] != r:
			return fmt.Errorf("run %s not in the run map", r.name)
		case len(r.items) != r.byIndex.len():
			return fmt.Errorf("run %s: %d items, %d indexed", r.name, len(r.items), r.byIndex.len())
		}
		var n [6]uint64
		var width uint64
		recs := r.byIndex.all()
		for j, it := range recs {
			switch {
			case it.run != r || r.items[it.id] != it:
				return fmt.Errorf("run %s: item %x is indexed inconsistently", r.name, it.id)
			case j > 0 && recs[j-1].end() > it.index:
				return fmt.Errorf("run %s: byIndex out of order or overlapping at %d", r.name, j)
			case it.isRange() != r.ranged:
				return fmt.Errorf("run %s (ranged %v) holds record %x of count %d", r.name, r.ranged, it.id, it.n)
			case it.isRange() && it.started > it.end():
				return fmt.Errorf("range %x started %d past its end %d", it.id, it.started, it.end())
			case !it.state.valid():
				return fmt.Errorf("item %x has state %d", it.id, it.state)
			case (it.state == StateDone || it.state == StateDead || it.state == StateCancelled) && (it.prev != nil || it.next != nil):
				return fmt.Errorf("terminal item %x is still linked", it.id)
			case it.state == StateRunning && it.attempt == 0:
				return fmt.Errorf("running item %x has attempt 0", it.id)
			}
			n[it.state] += it.width()
			width += it.width()
			if it.state == StateRunning {
				running[it] = false
			}
		}
		if err := depsInvariants(r); err != nil {
			return err
		}
		if got := [5]uint64{r.pending, r.running, r.done, r.dead, r.cancelledN}; got != [5]uint64{n[1], n[2], n[3], n[4], n[5]} {
			return fmt.Errorf("run %s counters %v, recount %v", r.name, got, n[1:])
		}
		if width != r.total {
			return fmt.Errorf("run %s: total %d, records cover %d", r.name, r.total, width)
		}
		fin := r.pending+r.running == 0 && (r.cancelled || r.total > 0 && r.total >= r.spec.Total)
		if fin != (r.finished != 0) {
			return fmt.Errorf("run %s: finished %v but finished time %d", r.name, fin, r.finished)
		}
		total += uint64(r.byIndex.len())
	}
	if len(st.runOrder) != len(st.runs) || total != st.items {
		return fmt.Errorf("%d runs in order, %d in map; %d items, counter %d", len(st.runOrder), len(st.runs), total, st.items)
	}

	pending, records := 0, 0
	if len(st.pending.keys) != len(st.pending.byKey) ||
		!slices.IsSortedFunc(st.pending.keys, func(a, b queueKey) int { return cmpKey(a, b) }) {
		return fmt.Errorf("pending queue keys %v are not the %d queues, sorted", st.pending.keys, len(st.pending.byKey))
	}
	if err := queueInvariants(st, &pending, &records); err != nil {
		return err
	}
	var sumPending uint64
	var stalled []*run
	for _, r := range st.runOrder {
		sumPending += r.pending - r.blocked
		// A stalled run's unblocked Pending items are parked, never queued.
		parked, parkedRecords := 0, 0
		if r.parked.root.next != nil {
			for it := r.parked.front(); it != nil; it = r.parked.after(it) {
				if it.run != r || !it.isParked() || it.owner != "" {
					return fmt.Errorf("run %s parks %x (state %s, pseq %d)", r.name, it.id, it.state, it.pseq)
				}
				parked += int(it.width())
				parkedRecords++
			}
			if parkedRecords != r.parked.len {
				return fmt.Errorf("run %s parked list holds %d, length %d", r.name, parked, r.parked.len)
			}
		}
		if r.stall == nil && parked != 0 || r.stall != nil && r.cancelled {
			return fmt.Errorf("run %s parks %d items, stalled %v, cancelled %v", r.name, parked, r.stall != nil, r.cancelled)
		}
		if r.stall != nil {
			stalled = append(stalled, r)
		}
		if len(r.storeSuspects) > 0 && (r.stall != nil || r.cancelled || len(r.storeSuspects) >= StoreIsolationWorkers ||
			!slices.IsSorted(r.storeSuspects)) {
			return fmt.Errorf("run %s has store suspects %q, stalled %v, cancelled %v", r.name, r.storeSuspects, r.stall != nil, r.cancelled)
		}
		sumPending -= uint64(parked)
	}
	if !slices.Equal(stalled, st.stalled) {
		return fmt.Errorf("%d stalled runs, %d listed", len(stalled), len(st.stalled))
	}
	if records != st.pending.len || uint64(pending) != sumPending {
		return fmt.Errorf("pending queue holds %d, length %d, runs count %d", pending, st.pending.len, sumPending)
	}

	for id, w := range st.workers {
		if w.id != id {
			return fmt.Errorf("worker %q filed under %q", w.id, id)
		}
		if w.lost && w.owned.len != 0 {
			return fmt.Errorf("lost worker %s owns %d items", id, w.owned.len)
		}
		n := 0
		var lastSeq uint64
		for it := w.owned.front(); it != nil; it = w.owned.after(it) {
			seen, ok := running[it]
			switch {
			case it.state != StateRunning || it.owner != id:
				return fmt.Errorf("worker %s lists %x (state %s, owner %q)", id, it.id, it.state, it.owner)
			case it.seq <= lastSeq:
				return fmt.Errorf("worker %s claim order broken at %x", id, it.id)
			case !ok:
				return fmt.Errorf("worker %s lists %x, not a running item of its run", id, it.id)
			case seen:
				return fmt.Errorf("item %x is in two owner lists", it.id)
			}
			lastSeq = it.seq
			running[it] = true
			n++
		}
		if n != w.owned.len {
			return fmt.Errorf("worker %s list holds %d, length %d", id, n, w.owned.len)
		}
	}
	for it, seen := range running {
		if !seen {
			return fmt.Errorf("running item %s/%x is in no owner list", it.run.name, it.id)
		}
	}
	return nil
}

// depsInvariants checks run r's dependency records: each item's unmet count
// is the number of its dependencies not Done; only Pending and Dead items
// wait; a waiting Pending item is in no list and counted in r.blocked; the
// reverse index lists exactly the dependents.
func depsInvariants(r *run) error {
	var blocked uint64
	back := map[[2]*item]int{}
	for _, it := range r.byIndex.all() {
		unmet := 0
		for _, d := range it.dependsOn() {
			if d.run != r || d == it {
				return fmt.Errorf("item %x of run %s depends on %x of run %s", it.id, r.name, d.id, d.run.name)
			}
			if d.state != StateDone {
				unmet++
			}
			back[[2]*item{d, it}]++
		}
		got := 0
		if it.deps != nil {
			got = it.deps.unmet
		}
		switch {
		case got != unmet:
			return fmt.Errorf("item %x of run %s: unmet %d, recount %d", it.id, r.name, got, unmet)
		case unmet > 0 && (it.state == StateRunning || it.state == StateDone):
			return fmt.Errorf("%s item %x of run %s waits on %d dependencies", it.state, it.id, r.name, unmet)
		case unmet > 0 && it.state == StatePending && (it.prev != nil || it.next != nil):
			return fmt.Errorf("blocked item %x of run %s is linked", it.id, r.name)
		case unmet == 0 && it.state == StatePending && it.prev == nil:
			return fmt.Errorf("claimable item %x of run %s is not in the pending queue", it.id, r.name)
		}
		if unmet > 0 && it.state == StatePending {
			blocked++
		}
	}
	for _, it := range r.byIndex.all() {
		if it.deps == nil {
			continue
		}
		for _, d := range it.deps.dependents {
			back[[2]*item{it, d}]--
		}
	}
	for k, n := range back {
		if n != 0 {
			return fmt.Errorf("run %s: reverse index of %x lists dependent %x %d times too few", r.name, k[0].id, k[1].id, n)
		}
	}
	if blocked != r.blocked {
		return fmt.Errorf("run %s: blocked %d, recount %d", r.name, r.blocked, blocked)
	}
	return nil
}

// queueInvariants checks the claim queue's layers (queue.go) and the
// tenants' counters (tenants.go), counting the queued indexes and records.
func queueInvariants(st *state, pending, records *int) error {
	lanes := map[*lane]bool{}
	for _, k := range st.pending.keys {
		q := st.pending.byKey[k]
		if q == nil || q.len == 0 || q.key != k {
			return fmt.Errorf("pending queue %+v is missing or empty", k)
		}
		n, ready := 0, 0
		for p, lv := range q.levels {
			if lv == nil {
				continue
			}
			var bad error
			lv.Ascend(func(ln *lane) bool {
				if ln.q != q || int(ln.prio) != p || ln.t.throttled || !ln.t.active {
					bad = fmt.Errorf("lane of tenant %q in queue %+v level %d is out of place", ln.t.name, k, p)
					return false
				}
				ready += ln.n
				return true
			})
			if bad != nil {
				return bad
			}
		}
		for _, r := range st.runOrder {
			if r.lane == nil || r.lane.q != q {
				continue
			}
			ln := r.lane
			lanes[ln] = true
			if got, ok := ln.runs.Get(r); !ok || got != r || ln.t != r.ten || ln.prio != priorityOf(r.spec) {
				return fmt.Errorf("run %s is not in its lane", r.name)
			}
			prev := &r.queued.root
			var lastSeq uint64
			for it := r.queued.front(); it != nil; it = r.queued.after(it) {
				if it.prev != prev || it.state != StatePending || it.owner != "" || it.seq != 0 || it.run != r {
					return fmt.Errorf("pending queue entry %x is inconsistent (state %s, owner %q)", it.id, it.state, it.owner)
				}
				if it.pseq <= lastSeq || it.pseq > st.pending.seq {
					return fmt.Errorf("pending queue entry %x (pseq %d) is out of place after pseq %d", it.id, it.pseq, lastSeq)
				}
				lastSeq = it.pseq
				*pending += int(it.width())
				*records++
				n++
				prev = it
			}
			if r.queued.len == 0 {
				return fmt.Errorf("run %s has a lane and no queued record", r.name)
			}
		}
		if n != q.len || ready > n || q.ready != ready {
			return fmt.Errorf("queue %+v: %d records, len %d, ready %d of %d", k, n, q.len, q.ready, ready)
		}
	}
	counts := map[*tenant][4]uint64{}
	for _, r := range st.runOrder {
		if r.ten == nil || st.tenants[r.ten.name] != r.ten || r.ten.name != tenantOf(r.spec) {
			return fmt.Errorf("run %s has tenant %v, its spec names %q", r.name, r.ten, tenantOf(r.spec))
		}
		if r.lane == nil && r.queued.len > 0 {
			return fmt.Errorf("run %s queues %d records outside a lane", r.name, r.queued.len)
		}
		c := counts[r.ten]
		c[0], c[1], c[2], c[3] = c[0]+r.pending, c[1]+r.running, c[2]+r.done, c[3]+1
		counts[r.ten] = c
	}
	for name, t := range st.tenants {
		c := counts[t]
		if t.name != name || t.queued != c[0] || t.running != c[1] || t.done != c[2] || uint64(t.runs) != c[3] {
			return fmt.Errorf("tenant %q counts queued %d running %d done %d runs %d, recount %v", name, t.queued, t.running, t.done, t.runs, c)
		}
		if t.throttled != t.saturated() || t.active != (len(t.lanes) > 0) {
			return fmt.Errorf("tenant %q: throttled %v (saturated %v), active %v with %d lanes", name, t.throttled, t.saturated(), t.active, len(t.lanes))
		}
		if got, ok := st.pending.active.Get(t); t.active && (!ok || got != t) {
			return fmt.Errorf("active tenant %q is not in the active index", name)
		}
		for _, ln := range t.lanes {
			if !lanes[ln] {
				return fmt.Errorf("tenant %q lists a lane no run is in", name)
			}
		}
		if t.runs == 0 && !t.set && !t.active {
			return fmt.Errorf("tenant %q is kept with no run, never set", name)
		}
	}
	if st.pending.active.Len() != func() int {
		n := 0
		for _, t := range st.tenants {
			if t.active {
				n++
			}
		}
		return n
	}() {
		return fmt.Errorf("the active index holds %d tenants", st.pending.active.Len())
	}
	return nil
}
