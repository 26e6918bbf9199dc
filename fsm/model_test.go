package fsm

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// The reference model: the ledger's rules written as plainly as possible,
// with slices and linear scans, to check the indexed implementation against.

type mItem struct {
	run, id  string
	index    uint64
	state    State
	owner    string
	attempt  uint64
	failures uint32
	result   string
	reason   string
	deps     []string // depends_on
}

type mRun struct {
	model       string // RunSpec.model; "" is served by every worker
	maxFailures uint32
	total       uint64
	failures    uint64
	items       map[string]*mItem
	// prio, seq and served are the run's priority, creation order and
	// items served (the claim order of tenants.go, for one tenant).
	prio   uint32
	seq    int
	served uint64
}

type mWorker struct {
	last      int64
	lost      bool
	executing []execKey
	owned     []*mItem
	completed uint64
	models    []string // nil: every model
}

type model struct {
	// modelSkips counts claims that left pending items of models the
	// claiming worker does not serve (the generator must produce some).
	modelSkips int
	cfg        Config
	epoch      uint64
	now        int64
	runs       map[string]*mRun
	pending    []*mItem
	workers    map[string]*mWorker
	runSeq     int
}

// mResult is a comparable summary of a command's result.
type mResult struct {
	err       error
	items     []string
	victim    string
	submit    SubmitCounts
	lost      []string
	repended  int
	expired   []string
	removed   []string
	duplicate bool
}

func newModel(cfg Config) *model {
	return &model{cfg: cfg, runs: map[string]*mRun{}, workers: map[string]*mWorker{}}
}

func summarize(t testing.TB, r Result) mResult {
	s := mResult{err: errKind(t, r.Err), victim: r.Victim, submit: r.Submit, repended: r.Repended,
		expired: r.Expired, removed: r.Removed, duplicate: r.Duplicate}
	for _, it := range r.Items {
		s.items = append(s.items, fmt.Sprintf("%s/%s@%d:%s", it.Run, it.ID, it.Attempt, it.Owner))
	}
	for _, k := range r.Lost {
		s.lost = append(s.lost, fmt.Sprintf("%s/%s@%d", k.Run, k.ID, k.Attempt))
	}
	return s
}

func (m *model) apply(term, entryEpoch uint64, now int64, cmds []*fsmpb.Command) []mResult {
	out := make([]mResult, len(cmds))
	if term < m.epoch || (entryEpoch != 0 && entryEpoch < m.epoch) {
		for i := range out {
			out[i].err = ErrStaleEpoch
		}
		return out
	}
	m.now = max(m.now, now)
	for i, c := range cmds {
		out[i] = m.command(term, c)
	}
	return out
}

// register records an unknown worker; touch refreshes a registered one
// (nil when the worker is not registered).
func (m *model) register(id string, models []string) {
	if m.workers[id] == nil {
		m.workers[id] = &mWorker{}
	}
	w := m.touch(id)
	w.models = nil
	if len(models) > 0 {
		w.models = slices.Clone(models)
	}
}

// takes reports whether w takes items of it's run: the run names no
// model, w names none, or w names the run's.
func (m *model) takes(w *mWorker, it *mItem) bool {
	model := m.runs[it.run].model
	return model == "" || w.models == nil || slices.Contains(w.models, model)
}

func (m *model) touch(id string) *mWorker {
	w := m.workers[id]
	if w == nil {
		return nil
	}
	w.last = m.now
	w.lost = false
	return w
}

var notRegistered = mResult{err: ErrWorkerNotRegistered}

func (m *model) unown(it *mItem) {
	w := m.workers[it.owner]
	i := slices.Index(w.owned, it)
	w.owned = slices.Delete(w.owned, i, i+1)
}

// enqueue makes it Pending: in the queue, unless it waits on a dependency.
func (m *model) enqueue(it *mItem) {
	it.state = StatePending
	it.owner = ""
	if !m.blocked(it) {
		m.push(it)
	}
}

// push queues it; a run that had nothing queued starts level with the
// least served run of its priority and model that has (tenants.go).
func (m *model) push(it *mItem) {
	r := m.runs[it.run]
	if !slices.ContainsFunc(m.pending, func(x *mItem) bool { return x.run == it.run }) {
		var least *mRun
		for _, x := range m.pending {
			o := m.runs[x.run]
			if o.prio == r.prio && o.model == r.model && (least == nil || o.served < least.served) {
				least = o
			}
		}
		if least != nil && least.served > r.served {
			r.served = least.served
		}
	}
	m.pending = append(m.pending, it)
}

// next returns the index in m.pending of the item a claim by w takes: of
// the items it takes, the highest priority's, then the run served least
// (then the oldest run), then that run's oldest; -1 when none.
func (m *model) next(w *mWorker) int {
	best := -1
	for k, it := range m.pending {
		if !m.takes(w, it) {
			continue
		}
		if best < 0 {
			best = k
			continue
		}
		a, b := m.runs[it.run], m.runs[m.pending[best].run]
		if a.prio > b.prio || a.prio == b.prio && (a.served < b.served || a.served == b.served && a.seq < b.seq) {
			best = k
		}
	}
	return best
}

// blocked reports whether it depends on an item that is not Done.
func (m *model) blocked(it *mItem) bool {
	for _, d := range it.deps {
		if m.runs[it.run].items[d].state != StateDone {
			return true
		}
	}
	return false
}

// unblock queues, in index order, the Pending items of run that are out of
// the queue and no longer blocked (after an item of it became Done).
func (m *model) unblock(run string) {
	var ready []*mItem
	for _, it := range m.runs[run].items {
		if it.state == StatePending && !slices.Contains(m.pending, it) && !m.blocked(it) {
			ready = append(ready, it)
		}
	}
	slices.SortFunc(ready, func(a, b *mItem) int { return cmpU64(a.index, b.index) })
	for _, it := range ready {
		m.push(it)
	}
}

func strs(b [][]byte) []string {
	var out []string
	for _, x := range b {
		out = append(out, string(x))
	}
	return out
}

func (m *model) lookup(run, id string) (*mItem, error) {
	r := m.runs[run]
	if r == nil {
		return nil, ErrRunNotFound
	}
	it := r.items[id]
	if it == nil {
		return nil, ErrItemNotFound
	}
	return it, nil
}

func (m *model) sortedWorkers() []string {
	var ids []string
	for id := range m.workers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (m *model) repend(w *mWorker) int {
	n := len(w.owned)
	for _, it := range w.owned {
		m.enqueue(it)
	}
	w.owned = nil
	return n
}

func (m *model) command(term uint64, c *fsmpb.Command) mResult {
	bad := mResult{err: ErrInvalidCommand}
	switch {
	case c.GetEpoch() != nil:
		m.epoch = term
		for _, w := range m.workers {
			if !w.lost {
				w.last = m.now
			}
		}
		return mResult{}

	case c.GetSubmit() != nil:
		s := c.GetSubmit()
		if s.Run == "" {
			return bad
		}
		r := m.runs[s.Run]
		ids := map[string]bool{}
		newIdx := map[uint64]bool{}
		for _, ni := range s.Items {
			id := string(ni.Id)
			if id == "" || ids[id] {
				return bad
			}
			ids[id] = true
			var ex *mItem
			if r != nil {
				ex = r.items[id]
			}
			deps := strs(ni.DependsOn)
			if ex != nil {
				if ex.index != ni.Index || !slices.Equal(ex.deps, deps) {
					return bad
				}
				continue
			}
			if len(deps) > limits.MaxDepsPerItem {
				return bad
			}
			for k, d := range deps {
				// ids holds this item's own id and every earlier one.
				known := (ids[d] && d != id) || (r != nil && r.items[d] != nil)
				if d == "" || d == id || slices.Contains(deps[:k], d) || !known {
					return bad
				}
			}
			if newIdx[ni.Index] {
				return bad
			}
			newIdx[ni.Index] = true
			if r != nil {
				for _, o := range r.items {
					if o.index == ni.Index {
						return bad
					}
				}
			}
		}
		if r == nil {
			m.runSeq++
			r = &mRun{model: s.Spec.GetModel(), maxFailures: s.Spec.GetMaxFailures(), total: s.Spec.GetTotal(), items: map[string]*mItem{},
				prio: priorityOf(s.Spec), seq: m.runSeq}
			if r.maxFailures == 0 {
				r.maxFailures = m.cfg.DefaultMaxFailures
			}
			m.runs[s.Run] = r
		} else {
			r.total = max(r.total, s.Spec.GetTotal())
		}
		var res mResult
		for _, ni := range s.Items {
			it := r.items[string(ni.Id)]
			if it == nil {
				it = &mItem{run: s.Run, id: string(ni.Id), index: ni.Index, deps: strs(ni.DependsOn)}
				r.items[it.id] = it
				m.enqueue(it)
				res.submit.Created++
				continue
			}
			switch it.state {
			case StatePending:
				res.submit.AlreadyPending++
			case StateRunning:
				res.submit.AlreadyRunning++
			case StateDone:
				res.submit.AlreadyDone++
			case StateDead:
				if s.RetryDead {
					it.failures, it.reason = 0, ""
					m.enqueue(it)
					res.submit.Retried++
				} else {
					res.submit.Dead++
				}
			}
		}
		return res

	case c.GetClaim() != nil:
		cl := c.GetClaim()
		if cl.Max == 0 {
			return bad
		}
		w := m.touch(cl.Worker)
		if w == nil {
			return notRegistered
		}
		var res mResult
		for n := 0; n < int(cl.Max) && n < MaxClaimBatch; n++ {
			if k := slices.IndexFunc(m.pending, func(it *mItem) bool { return m.takes(w, it) }); k != 0 && len(m.pending) > 0 {
				m.modelSkips++
			}
			k := m.next(w)
			if k < 0 {
				break
			}
			it := m.pending[k]
			m.pending = slices.Delete(m.pending, k, k+1)
			m.runs[it.run].served++
			it.state, it.owner = StateRunning, cl.Worker
			it.attempt++
			w.owned = append(w.owned, it)
			res.items = append(res.items, fmt.Sprintf("%s/%s@%d:%s", it.run, it.id, it.attempt, it.owner))
		}
		return res

	case c.GetComplete() != nil:
		cc := c.GetComplete()
		it, err := m.lookup(cc.Run, string(cc.Id))
		if err != nil {
			return mResult{err: err}
		}
		if it.state == StateDone {
			if it.result != string(cc.Result) {
				return mResult{err: ErrConflict}
			}
			if it.owner != cc.Worker || it.attempt != cc.Attempt {
				return mResult{err: ErrCASMiss}
			}
			return mResult{duplicate: true}
		}
		if it.state != StateRunning || it.owner != cc.Worker || it.attempt != cc.Attempt {
			return mResult{err: ErrCASMiss}
		}
		m.unown(it)
		w := m.workers[cc.Worker]
		w.completed++
		w.last = m.now
		it.state, it.result = StateDone, string(cc.Result)
		m.unblock(cc.Run)
		return mResult{}

	case c.GetFail() != nil:
		f := c.GetFail()
		it, err := m.lookup(f.Run, string(f.Id))
		if err != nil {
			return mResult{err: err}
		}
		if it.state != StateRunning || it.owner != f.Worker || it.attempt != f.Attempt {
			return mResult{err: ErrCASMiss}
		}
		m.unown(it)
		m.workers[f.Worker].last = m.now
		it.failures++
		r := m.runs[f.Run]
		r.failures++
		if it.failures >= r.maxFailures {
			it.state, it.reason = StateDead, f.Reason
			return mResult{}
		}
		m.enqueue(it)
		return mResult{repended: 1}

	case c.GetNack() != nil:
		n := c.GetNack()
		it, err := m.lookup(n.Run, string(n.Id))
		if err != nil {
			return mResult{err: err}
		}
		if it.state != StateRunning || it.owner != n.Worker || it.attempt != n.Attempt {
			return mResult{err: ErrCASMiss}
		}
		m.unown(it)
		m.workers[n.Worker].last = m.now
		m.enqueue(it)
		return mResult{repended: 1}

	case c.GetHeartbeat() != nil:
		hb := c.GetHeartbeat()
		w := m.touch(hb.Worker)
		if w == nil {
			return notRegistered
		}
		w.executing = nil
		for _, k := range hb.Executing {
			w.executing = append(w.executing, execKey{run: k.Run, id: string(k.Id), attempt: k.Attempt})
		}
		var res mResult
		for _, k := range hb.Held {
			it, _ := m.lookup(k.Run, string(k.Id))
			if it != nil && it.state == StateRunning && it.owner == hb.Worker && it.attempt == k.Attempt {
				continue
			}
			res.lost = append(res.lost, fmt.Sprintf("%s/%s@%d", k.Run, k.Id, k.Attempt))
		}
		return res

	case c.GetDeregister() != nil:
		id := c.GetDeregister().Worker
		w := m.workers[id]
		if w == nil {
			if c.GetDeregister().Evicted {
				return notRegistered
			}
			return mResult{}
		}
		n := m.repend(w)
		delete(m.workers, id)
		return mResult{repended: n}

	case c.GetSteal() != nil:
		s := c.GetSteal()
		if m.workers[s.Thief] == nil {
			return notRegistered
		}
		if s.ThiefBacklog > 0 {
			return mResult{err: ErrNotIdle}
		}
		thief := m.touch(s.Thief)
		// What the thief takes of w's, of the highest priority w holds
		// of it (work of a higher priority is stolen first).
		takeable := func(w *mWorker) (int, uint32) {
			n, top := 0, uint32(0)
			for _, it := range w.owned {
				if !m.takes(thief, it) {
					continue
				}
				switch p := m.runs[it.run].prio; {
				case p > top:
					n, top = 1, p
				case p == top:
					n++
				}
			}
			return n, top
		}
		victimID, victimN, victimP := "", 0, uint32(0)
		for _, id := range m.sortedWorkers() {
			w := m.workers[id]
			n, p := takeable(w)
			if id == s.Thief || w.lost || n == 0 {
				continue
			}
			if victimID == "" || p > victimP || p == victimP && n > victimN {
				victimID, victimN, victimP = id, n, p
			}
		}
		if victimID == "" {
			return mResult{}
		}
		v := m.workers[victimID]
		want := min((victimN+1)/2, m.cfg.MaxStealBatch)
		var take []*mItem
		for i := len(v.owned) - 1; i >= 0 && len(take) < want; i-- {
			it := v.owned[i]
			if !m.takes(thief, it) || m.runs[it.run].prio != victimP || slices.Contains(v.executing, execKey{run: it.run, id: it.id, attempt: it.attempt}) {
				continue
			}
			take = append(take, it)
		}
		res := mResult{victim: victimID}
		for _, it := range take {
			m.unown(it)
			it.owner = s.Thief
			it.attempt++
			thief.owned = append(thief.owned, it)
			res.items = append(res.items, fmt.Sprintf("%s/%s@%d:%s", it.run, it.id, it.attempt, it.owner))
		}
		return res

	case c.GetExpire() != nil:
		timeout := c.GetExpire().TimeoutNano
		if timeout <= 0 {
			return bad
		}
		var res mResult
		for _, id := range m.sortedWorkers() {
			w := m.workers[id]
			if !w.lost && m.now-w.last > timeout {
				w.lost = true
				res.expired = append(res.expired, id)
				res.repended += m.repend(w)
			}
		}
		for _, id := range m.sortedWorkers() {
			w := m.workers[id]
			if w.lost && len(w.owned) == 0 && m.now-w.last > timeout*int64(m.cfg.LostWorkerRetention) {
				res.removed = append(res.removed, id)
				delete(m.workers, id)
			}
		}
		return res

	case c.GetRegister() != nil:
		models := slices.Clone(c.GetRegister().Models)
		slices.Sort(models)
		m.register(c.GetRegister().Worker, slices.Compact(models))
		return mResult{}
	}
	return bad
}

// compare checks every item, queue, worker and run counter of l against m,
// rendering both sides as text and comparing once.
func (m *model) compare(t testing.TB, l *Ledger) {
	t.Helper()
	require.Equal(t, m.render(), render(t, l))
}

func (m *model) render() []string {
	var out []string
	// Each run's queue in order, run by run by name (the ledger keeps one
	// queue per run).
	var q []string
	var names0 []string
	for name := range m.runs {
		names0 = append(names0, name)
	}
	sort.Strings(names0)
	for _, name := range names0 {
		for _, it := range m.pending {
			if it.run == name {
				q = append(q, it.run+"/"+it.id)
			}
		}
	}
	out = append(out, fmt.Sprintf("epoch %d pending %v", m.epoch, q))
	var names []string
	for name := range m.runs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		r := m.runs[name]
		var n [5]uint64
		var items []*mItem
		blocked := 0
		for _, it := range r.items {
			n[it.state]++
			items = append(items, it)
			if it.state == StatePending && m.blocked(it) {
				blocked++
			}
		}
		out = append(out, fmt.Sprintf("run %s total %d counts %v failures %d spec %d/%d blocked %d",
			name, len(r.items), n[1:], r.failures, r.total, r.maxFailures, blocked))
		slices.SortFunc(items, func(a, b *mItem) int { return cmpU64(a.index, b.index) })
		for _, it := range items {
			owner := ""
			if it.state == StateRunning {
				owner = it.owner
			}
			out = append(out, fmt.Sprintf("item %s/%s@%d %s owner=%q attempt=%d failures=%d result=%q reason=%q deps=%q",
				it.run, it.id, it.index, it.state, owner, it.attempt, it.failures, it.result, it.reason, it.deps))
		}
	}
	for _, id := range m.sortedWorkers() {
		w := m.workers[id]
		var owned []string
		for _, it := range w.owned {
			owned = append(owned, fmt.Sprintf("%s/%s@%d", it.run, it.id, it.attempt))
		}
		out = append(out, fmt.Sprintf("worker %s lost=%v completed=%d heartbeat=%d owned=%v models=%q",
			id, w.lost, w.completed, w.last, owned, w.models))
	}
	return out
}

// render describes l, through its read API, exactly as model.render does.
func render(t testing.TB, l *Ledger) []string {
	t.Helper()
	l.mu.RLock()
	var q []string
	byName := slices.Clone(l.st.runOrder)
	slices.SortFunc(byName, func(a, b *run) int { return cmpString(a.name, b.name) })
	l.st.pending.each(byName, func(it *item) {
		q = append(q, it.run.name+"/"+it.id)
	})
	l.mu.RUnlock()
	out := []string{fmt.Sprintf("epoch %d pending %v", l.Epoch(), q)}
	runs := l.Runs()
	slices.SortFunc(runs, func(a, b RunStatus) int { return cmpString(a.Name, b.Name) })
	for _, rs := range runs {
		out = append(out, fmt.Sprintf("run %s total %d counts %v failures %d spec %d/%d blocked %d",
			rs.Name, rs.Total, []uint64{rs.Pending, rs.Running, rs.Done, rs.Dead}, rs.Failures, rs.Spec.Total, rs.Spec.MaxFailures, rs.Blocked))
		items, _, done, err := l.Results(rs.Name, 0, 1<<20)
		require.NoError(t, err)
		require.True(t, done)
		for _, it := range items {
			owner := ""
			if it.State == StateRunning {
				owner = it.Owner
			}
			out = append(out, fmt.Sprintf("item %s/%s@%d %s owner=%q attempt=%d failures=%d result=%q reason=%q deps=%q",
				it.Run, it.ID, it.Index, it.State, owner, it.Attempt, it.Failures, it.Result, it.Reason, strs(it.DependsOn)))
		}
	}
	for _, w := range l.Workers() {
		var owned []string
		for _, it := range l.Owned(w.ID) {
			owned = append(owned, fmt.Sprintf("%s/%s@%d", it.Run, it.ID, it.Attempt))
		}
		hb := int64(0)
		if !w.LastHeartbeat.IsZero() {
			hb = w.LastHeartbeat.UnixNano()
		}
		out = append(out, fmt.Sprintf("worker %s lost=%v completed=%d heartbeat=%d owned=%v models=%q",
			w.ID, w.Lost, w.Completed, hb, owned, w.Models))
	}
	return out
}

// gen produces random but plausible command sequences, peeking at the model
// so that CAS commands hit as well as miss.
type gen struct {
	rng  *rand.Rand
	m    *model
	term uint64
	now  time.Time
}

func (g *gen) pick(xs ...string) string { return xs[g.rng.Intn(len(xs))] }

func (g *gen) worker() string { return g.pick("w1", "w2", "w3", "w4") }

func (g *gen) run() string { return g.pick("r1", "r2") }

// target picks an item, its owner and attempt for a CAS command: usually a
// running item with the right expectation, sometimes something off.
func (g *gen) target() (run, id, worker string, attempt uint64) {
	var running []*mItem
	for _, w := range g.m.workers {
		running = append(running, w.owned...)
	}
	slices.SortFunc(running, func(a, b *mItem) int { return cmpString(a.run+"/"+a.id, b.run+"/"+b.id) })
	if len(running) > 0 && g.rng.Intn(10) < 7 {
		it := running[g.rng.Intn(len(running))]
		run, id, worker, attempt = it.run, it.id, it.owner, it.attempt
	} else {
		run, id, worker, attempt = g.run(), fmt.Sprintf("i%d", g.rng.Intn(30)), g.worker(), uint64(g.rng.Intn(3))
		if g.rng.Intn(30) == 0 {
			run = "r3"
		}
		if g.rng.Intn(30) == 0 {
			id = "zz"
		}
	}
	switch g.rng.Intn(8) {
	case 0:
		worker = g.worker()
	case 1:
		attempt++
	case 2:
		attempt--
	}
	return
}

func (g *gen) keysOf(worker string) []*fsmpb.ItemKey {
	var keys []*fsmpb.ItemKey
	if w := g.m.workers[worker]; w != nil {
		for _, it := range w.owned {
			if g.rng.Intn(2) == 0 {
				keys = append(keys, key(it.run, it.id, it.attempt))
			}
		}
	}
	if g.rng.Intn(3) == 0 {
		keys = append(keys, key(g.run(), fmt.Sprintf("i%d", g.rng.Intn(30)), uint64(g.rng.Intn(3))))
	}
	return keys
}

func (g *gen) command() *fsmpb.Command {
	switch p := g.rng.Intn(100); {
	case p < 14:
		var items []*fsmpb.NewItem
		run := g.run()
		for range 1 + g.rng.Intn(6) {
			n := g.rng.Intn(30)
			id, idx := fmt.Sprintf("i%d", n), uint64(n)
			switch g.rng.Intn(80) {
			case 0:
				idx++ // may collide with another id's index
			case 1:
				id = "" // invalid
			case 2:
				if len(items) > 0 {
					id = string(items[0].Id) // duplicate within the command
				}
			}
			it := ni(id, idx, "p-"+id)
			it.DependsOn = g.deps(run, id, items)
			items = append(items, it)
		}
		// A run's priority is fixed: the same for every submit of it.
		prio := []uint32{0, 2, 3, 5}[int(run[len(run)-1])%4]
		spec := &fsmpb.RunSpec{MaxFailures: uint32(g.rng.Intn(4)), Total: uint64(g.rng.Intn(13)), Model: g.pick("", "A", "B"), Priority: prio}
		return cSubmit(run, spec, g.rng.Intn(3) == 0, items...)
	case p < 32:
		return cClaim(g.worker(), uint32(g.rng.Intn(5)))
	case p < 50:
		run, id, w, a := g.target()
		return cComplete(run, id, w, a, g.pick("res-a", "res-b"))
	case p < 58:
		run, id, w, a := g.target()
		return cFail(run, id, w, a, g.pick("oom", "timeout"))
	case p < 65:
		run, id, w, a := g.target()
		return cNack(run, id, w, a)
	case p < 75:
		w := g.worker()
		return cHeartbeat(w, uint32(g.rng.Intn(3)), g.rng.Float64()*10, g.keysOf(w), g.keysOf(w))
	case p < 77:
		return cDeregister(g.worker())
	case p < 79:
		return cEvict(g.worker())
	case p < 86:
		c := cRegister(g.worker())
		if g.rng.Intn(2) == 0 {
			// A set of models, with repeats, of which C has no run.
			for range 1 + g.rng.Intn(3) {
				c.GetRegister().Models = append(c.GetRegister().Models, g.pick("A", "B", "C"))
			}
		}
		return c
	case p < 92:
		backlog := uint32(0)
		if g.rng.Intn(6) == 0 {
			backlog = 1
		}
		return cSteal(g.worker(), backlog)
	case p < 97:
		return cExpire(time.Duration(1+g.rng.Intn(5)) * time.Second)
	default:
		g.term++
		return cEpoch("c1", "g1")
	}
}

// deps picks the depends_on of item id in a submit to run whose earlier
// items are before: an existing item's own (usually), or nothing, or a few
// of the run's items and the earlier ones (usually valid), sometimes
// something off.
func (g *gen) deps(run, id string, before []*fsmpb.NewItem) [][]byte {
	var out [][]byte
	var r *mRun
	if r = g.m.runs[run]; r != nil {
		if it := r.items[id]; it != nil && g.rng.Intn(20) > 0 {
			for _, d := range it.deps {
				out = append(out, []byte(d))
			}
			return out
		}
	}
	if g.rng.Intn(2) == 0 {
		return nil
	}
	var existing []string
	if r != nil {
		for d := range r.items {
			existing = append(existing, d)
		}
		sort.Strings(existing)
	}
	for range 1 + g.rng.Intn(3) {
		switch k := g.rng.Intn(40); {
		case k < 20 && len(before) > 0:
			out = append(out, before[g.rng.Intn(len(before))].Id)
		case k < 38 && len(existing) > 0:
			out = append(out, []byte(existing[g.rng.Intn(len(existing))]))
		case k < 39:
			out = append(out, []byte(fmt.Sprintf("i%d", g.rng.Intn(30))))
		default:
			out = append(out, []byte(id)) // itself
		}
	}
	return out
}

// logEntry is one generated Raft log entry.
type logEntry struct {
	term, epoch uint64
	now         int64
	cmds        []*fsmpb.Command
	data        []byte
}

func (g *gen) entry(t testing.TB) logEntry {
	t.Helper()
	g.now = g.now.Add(time.Duration(g.rng.Intn(2500)-300) * time.Millisecond)
	var cmds []*fsmpb.Command
	for range 1 + g.rng.Intn(4) {
		cmds = append(cmds, g.command())
	}
	e := logEntry{term: g.term, now: g.now.UnixNano(), cmds: cmds}
	if g.rng.Intn(2) == 0 {
		e.epoch = g.term
	}
	if g.term > 1 && g.rng.Intn(25) == 0 {
		e.term, e.epoch = g.term-1, 0 // a deposed leader's entry
	}
	raw := make([][]byte, len(cmds))
	for i, c := range cmds {
		b, err := EncodeCommand(c)
		require.NoError(t, err)
		raw[i] = b
	}
	e.data = mustEntry(t, g.now, e.epoch, raw)
	return e
}

func applyEntry(l *Ledger, index uint64, e logEntry) []Result {
	return l.Apply(&raft.Log{Index: index, Term: e.term, Type: raft.LogCommand, Data: e.data}).(Results)
}

// TestPropertyAgainstModel applies random command sequences to two ledgers
// and to the reference model, checking after every entry that results and
// state agree and that the ledger's invariants hold, and at the end that
// replicas (including one restored from a mid-way snapshot) hold
// byte-identical snapshots.
func TestPropertyAgainstModel(t *testing.T) {
	seeds, entries := 40, 400
	if testing.Short() {
		seeds = 10
	}
	modelSkips := 0 // over all seeds (the subtests run one at a time)
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxStealBatch = 3
			cfg.DefaultMaxFailures = 2
			cfg.LostWorkerRetention = 2
			a, err := New(cfg)
			require.NoError(t, err)
			b, err := New(cfg)
			require.NoError(t, err)
			m := newModel(cfg)
			g := &gen{rng: rand.New(rand.NewSource(int64(seed))), m: m, term: 1, now: startTime()}
			results := map[string]string{} // run/id -> the result it first got
			removed, unregistered := 0, 0  // expired workers removed; commands refused as unregistered
			blockedSeen, depsDone := 0, 0  // blocked items seen after an entry; items with dependencies done
			var c *Ledger
			mid := entries / 2

			for i := 1; i <= entries; i++ {
				e := g.entry(t)
				got := applyEntry(a, uint64(i), e)
				applyEntry(b, uint64(i), e)
				if c != nil {
					applyEntry(c, uint64(i), e)
				}
				want := m.apply(e.term, e.epoch, e.now, e.cmds)
				gotSum := make([]mResult, len(got))
				for j := range got {
					gotSum[j] = summarize(t, got[j])
				}
				for _, r := range gotSum {
					removed += len(r.removed)
					if r.err == ErrWorkerNotRegistered {
						unregistered++
					}
				}
				if !reflect.DeepEqual(want, gotSum) {
					require.Equal(t, want, gotSum, "entry %d: %v", i, e.cmds)
				}
				if err := invariantsErr(a); err != nil {
					t.Fatalf("entry %d: %v", i, err)
				}
				m.compare(t, a)
				for name, r := range m.runs {
					for _, it := range r.items {
						k := name + "/" + it.id
						if first, ok := results[k]; ok {
							if it.state != StateDone || it.result != first {
								t.Fatalf("entry %d: %s was Done with %q, now %s with %q", i, k, first, it.state, it.result)
							}
						} else if it.state == StateDone {
							results[k] = it.result
							if len(it.deps) > 0 {
								depsDone++
							}
						}
						if it.state == StatePending && m.blocked(it) {
							blockedSeen++
						}
					}
				}
				if i == mid {
					snap := persist(t, a)
					c, err = New(cfg)
					require.NoError(t, err)
					require.NoError(t, restore(c, snap))
					require.Equal(t, snap, persist(t, c), "restore then persist is the identity")
					checkInvariants(t, c)
					m.compare(t, c)
				}
			}
			sa := persist(t, a)
			require.Equal(t, sa, persist(t, b), "replicas that applied the same log differ")
			require.Equal(t, sa, persist(t, c), "a replica restored mid-way diverged")
			d, err := New(cfg)
			require.NoError(t, err)
			require.NoError(t, restore(d, sa))
			require.Equal(t, sa, persist(t, d))
			m.compare(t, d)
			require.NotEmpty(t, results, "the generator should complete some items")
			require.Positive(t, removed, "the generator should let some lost workers be removed")
			require.Positive(t, unregistered, "the generator should send commands from unregistered workers")
			require.Positive(t, blockedSeen, "the generator should make items wait on dependencies")
			require.Positive(t, depsDone, "the generator should complete items that had dependencies")
			modelSkips += m.modelSkips
		})
	}
	require.Positive(t, modelSkips, "the generator should make claims pass over items of models the worker does not serve")
}
