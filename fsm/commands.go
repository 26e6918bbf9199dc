package fsm

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"sort"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

func fail(err error) Result { return Result{Err: err} }

func invalid(format string, args ...any) Result {
	return Result{Err: invalidErr(format, args...)}
}

func invalidErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidCommand}, args...)...)
}

// checkName validates a printable, non-empty, bounded UTF-8 name; what names
// the field in the error.
func checkName(what, s string, max int) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidCommand, what)
	}
	return checkText(what, s, max)
}

// checkText validates a possibly empty printable bounded UTF-8 string.
func checkText(what, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrInvalidCommand, what, len(s), max)
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return fmt.Errorf("%w: %s is not valid UTF-8 at byte %d", ErrInvalidCommand, what, i)
			}
		}
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%w: %s has a non-printable character %U at byte %d", ErrInvalidCommand, what, r, i)
		}
	}
	return nil
}

func checkID(what string, id []byte) error {
	if len(id) == 0 || len(id) > limits.MaxIDBytes {
		return fmt.Errorf("%w: %s is %d bytes, must be 1 to %d", ErrInvalidCommand, what, len(id), limits.MaxIDBytes)
	}
	return nil
}

// lookup finds the item a CAS command names, validating the names first.
// The labels naming op are built only for an error: this runs for every
// completed item on every replica.
func (l *Ledger) lookup(op, runName string, id []byte, workerID string) (*item, error) {
	if checkName("run", runName, limits.MaxRunNameBytes) != nil {
		return nil, checkName(op+" run", runName, limits.MaxRunNameBytes)
	}
	if checkID("id", id) != nil {
		return nil, checkID(op+" id", id)
	}
	if checkName("worker", workerID, limits.MaxWorkerIDBytes) != nil {
		return nil, checkName(op+" worker", workerID, limits.MaxWorkerIDBytes)
	}
	r := l.st.runs[runName]
	if r == nil {
		return nil, fmt.Errorf("%w: %s names run %q", ErrRunNotFound, op, runName)
	}
	it := r.items[string(id)]
	if it == nil {
		return nil, fmt.Errorf("%w: %s names item %x of run %q", ErrItemNotFound, op, id, runName)
	}
	return it, nil
}

func casMiss(op string, it *item, workerID string, attempt uint64) error {
	return fmt.Errorf("%w: %s of %s/%x expected running(%q, %d), item is %s(%q, %d)",
		ErrCASMiss, op, it.run.name, it.id, workerID, attempt, it.state, it.owner, it.attempt)
}

// epochCommand: EpochCmd, which a new leader commits first.
func epochCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_Epoch)(nil), label: "epoch",
		apply: func(l *Ledger, term uint64, c *fsmpb.Command) Result { return l.applyEpoch(term, c.GetEpoch()) },
		before: func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore {
			_, b.existed = l.st.members[c.GetEpoch().GetLeaderId()]
			return b
		},
		events: func(l *Ledger, c *fsmpb.Command, b eventsBefore, _ Result) {
			st := l.st
			id := c.GetEpoch().GetLeaderId()
			if !b.existed {
				l.record(EventMemberJoined, "", "", id, memberDetail(st.members[id]), 0)
			}
			if st.epoch != b.epoch || id != b.leader {
				detail := ""
				if b.leader != "" {
					detail = fmt.Sprintf("previous leader %s (term %d)", b.leader, b.epoch)
				}
				l.record(EventLeaderElected, "", "", id, detail, 0)
			}
		},
		kinds:    []EventKind{EventMemberJoined, EventLeaderElected},
		snapshot: partHeader | partMembers | partWorkers | partEvents,
	}
}

func (l *Ledger) applyEpoch(term uint64, c *fsmpb.EpochCmd) Result {
	if err := checkName("epoch leader_id", c.GetLeaderId(), limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	if err := checkText("epoch leader_grpc_addr", c.GetLeaderGrpcAddr(), MaxAddrBytes); err != nil {
		return fail(err)
	}
	if err := checkEpochClusterID(c); err != nil {
		return fail(err)
	}
	st := l.st
	st.setClusterID(c.GetClusterId())
	st.epoch = term
	st.leaderID = c.GetLeaderId()
	m := st.members[c.GetLeaderId()]
	m.ID = c.GetLeaderId()
	m.GRPCAddr = c.GetLeaderGrpcAddr()
	st.members[m.ID] = m
	// A failover grants every live worker a full failure timeout to find
	// the new leader. The same update for each worker: order is irrelevant.
	for _, w := range st.workers {
		if !w.lost {
			w.lastHeartbeat = st.now
		}
	}
	return Result{}
}

// setMemberCommand: SetMemberCmd records a replica's addresses.
func setMemberCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_SetMember)(nil), label: "set_member",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applySetMember(c.GetSetMember()) },
		before: func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore {
			_, b.existed = l.st.members[c.GetSetMember().GetId()]
			return b
		},
		events: func(l *Ledger, c *fsmpb.Command, b eventsBefore, _ Result) {
			if id := c.GetSetMember().GetId(); !b.existed {
				l.record(EventMemberJoined, "", "", id, memberDetail(l.st.members[id]), 0)
			}
		},
		kinds:    []EventKind{EventMemberJoined},
		snapshot: partMembers | partEvents,
	}
}

func (l *Ledger) applySetMember(c *fsmpb.SetMemberCmd) Result {
	if err := checkName("set_member id", c.GetId(), limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	if err := checkText("set_member raft_addr", c.GetRaftAddr(), MaxAddrBytes); err != nil {
		return fail(err)
	}
	if err := checkText("set_member grpc_addr", c.GetGrpcAddr(), MaxAddrBytes); err != nil {
		return fail(err)
	}
	l.st.members[c.GetId()] = Member{ID: c.GetId(), RaftAddr: c.GetRaftAddr(), GRPCAddr: c.GetGrpcAddr()}
	return Result{}
}

// removeMemberCommand: RemoveMemberCmd forgets a replica.
func removeMemberCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_RemoveMember)(nil), label: "remove_member",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applyRemoveMember(c.GetRemoveMember()) },
		before: func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore {
			_, b.existed = l.st.members[c.GetRemoveMember().GetId()]
			return b
		},
		events: func(l *Ledger, c *fsmpb.Command, b eventsBefore, _ Result) {
			if b.existed {
				rm := c.GetRemoveMember()
				l.record(EventMemberRemoved, "", "", rm.GetId(), limits.CleanText(rm.GetReason(), MaxEventDetailBytes), 0)
			}
		},
		kinds:    []EventKind{EventMemberRemoved},
		snapshot: partMembers | partEvents,
	}
}

func (l *Ledger) applyRemoveMember(c *fsmpb.RemoveMemberCmd) Result {
	if err := checkName("remove_member id", c.GetId(), limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	delete(l.st.members, c.GetId())
	return Result{}
}

// noteCommand: NoteCmd records an event a replica noticed.
func noteCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_Note)(nil), label: "note",
		apply: func(_ *Ledger, _ uint64, c *fsmpb.Command) Result { return applyNote(c.GetNote()) },
		events: func(l *Ledger, c *fsmpb.Command, _ eventsBefore, _ Result) {
			n := c.GetNote()
			l.record(EventKind(n.GetKind()), "", "", n.GetMember(), n.GetDetail(), n.GetCount())
		},
		kinds:    []EventKind{EventConnsRefused, EventLeaderSteppedAside, EventPeerUnreachable, EventPeerReachable}, // noteKind
		snapshot: partEvents,
	}
}

// applyNote checks a NoteCmd; its spec's events function records it. It changes nothing
// else: a note of a kind that NoteCmd does not carry, a bad member name or
// an over-long detail is ErrInvalidCommand and records nothing.
func applyNote(c *fsmpb.NoteCmd) Result {
	if k := c.GetKind(); k > 255 || !noteKind(EventKind(k)) {
		return invalid("note kind %d is not one a note records", k)
	}
	if err := checkName("note member", c.GetMember(), limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	if err := checkText("note detail", c.GetDetail(), MaxEventDetailBytes); err != nil {
		return fail(err)
	}
	return Result{}
}

func (l *Ledger) checkSpec(s *fsmpb.RunSpec) error {
	if err := checkText("spec model", s.GetModel(), limits.MaxModelBytes); err != nil {
		return err
	}
	if err := checkText("spec kind", s.GetKind(), limits.MaxKindBytes); err != nil {
		return err
	}
	if n := len(s.GetSampling()); n > l.cfg.MaxPayloadBytes {
		return fmt.Errorf("%w: spec sampling is %d bytes, limit %d", ErrInvalidCommand, n, l.cfg.MaxPayloadBytes)
	}
	if err := checkStoreURL(s.GetStore()); err != nil {
		return err
	}
	if s.GetRetainNano() < 0 {
		return fmt.Errorf("%w: spec retain_nano is %d, must be >= 0", ErrInvalidCommand, s.GetRetainNano())
	}
	return checkSpecTenant(s)
}

// submitCommand: SubmitItemsCmd creates a run or adds items to it.
func submitCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_Submit)(nil), label: "submit",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applySubmit(c.GetSubmit()) },
		before: func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore {
			return runBefore(l, c.GetSubmit().GetRun(), b)
		},
		events: func(l *Ledger, c *fsmpb.Command, b eventsBefore, res Result) {
			s := c.GetSubmit()
			if !b.existed {
				l.record(EventRunCreated, s.GetRun(), "", "", l.runDetail(s.GetRun()), 0)
			}
			if n := res.Submit.CreatedDead; n > 0 {
				for _, ni := range s.GetItems() {
					if ni.GetDeadReason() != "" {
						l.recordItemsDead(s.GetRun(), "", ni.GetDeadReason(), uint64(n))
						break
					}
				}
			}
			l.recordFinished(s.GetRun(), b)
		},
		kinds:    []EventKind{EventRunResumed, EventRunCreated, EventItemDead, EventRunFinished},
		snapshot: partHeader | partRuns | partItems | partWorkers | partTenants | partEvents,
	}
}

// applySubmit validates a SubmitItems command against the ledger and then
// applies it. Validation reads the ledger and writes nothing, so a refused
// submit changes nothing; the apply step cannot fail.
func (l *Ledger) applySubmit(c *fsmpb.SubmitItemsCmd) Result {
	p, err := l.validateSubmit(c)
	if err != nil {
		return fail(err)
	}
	return l.submit(c, p)
}

// submitPlan is what validateSubmit learned that the apply step needs.
type submitPlan struct {
	run    *run   // the existing run; nil when the submit creates it
	fresh  int    // how many of the command's items the run does not hold
	tenant string // the tenant a new run gets
}

// validateSubmit checks the whole command against the ledger: the run name,
// spec and stale window; every item's id, payload and dead reason; no id
// twice; an existing id at its recorded index; new ids at distinct indexes
// that the run does not already hold. It only reads the ledger.
func (l *Ledger) validateSubmit(c *fsmpb.SubmitItemsCmd) (submitPlan, error) {
	name := c.GetRun()
	if err := checkName("submit run", name, limits.MaxRunNameBytes); err != nil {
		return submitPlan{}, err
	}
	if err := l.checkSpec(c.GetSpec()); err != nil {
		return submitPlan{}, err
	}
	if c.GetRependStaleNano() < 0 {
		return submitPlan{}, invalidErr("submit repend_stale_nano is %d, must be >= 0", c.GetRependStaleNano())
	}
	if err := checkStaleWorkers("submit", c.GetStaleWorkers()); err != nil {
		return submitPlan{}, err
	}
	r := l.st.runs[name]
	if r == nil && l.st.handles[name] != nil {
		return submitPlan{}, l.st.handledErr("submit", name)
	}
	store := c.GetSpec().GetStore()
	if r != nil {
		if r.cancelled {
			return submitPlan{}, fmt.Errorf("%w: run %q was cancelled; it takes no new items (delete it to reuse the name)", ErrRunCancelled, name)
		}
		if r.ranged {
			return submitPlan{}, invalidErr("submit names items with ids for run %q, a range run (its work is submitted as ranges)", name)
		}
		if c.GetSpec() != nil && store != r.spec.GetStore() {
			return submitPlan{}, invalidErr("submit names store %q for run %q, whose store is %q", store, name, r.spec.GetStore())
		}
		store = r.spec.GetStore()
	}
	if err := l.checkDataPrefix("submit", name, c.GetSpec(), r); err != nil {
		return submitPlan{}, err
	}
	for i, o := range c.GetObjects() {
		if err := checkRef(fmt.Sprintf("submit objects[%d]", i), &fsmpb.DataRef{Object: o}, false); err != nil {
			return submitPlan{}, err
		}
	}
	items := c.GetItems()
	seen := make(map[string]int, len(items))
	var fresh []*fsmpb.NewItem // new ids, command order
	for i, ni := range items {
		if ni == nil {
			return submitPlan{}, invalidErr("submit items[%d] is nil", i)
		}
		if len(ni.Id) == 0 || len(ni.Id) > limits.MaxIDBytes {
			return submitPlan{}, invalidErr("submit items[%d].id is %d bytes, must be 1 to %d", i, len(ni.Id), limits.MaxIDBytes)
		}
		if len(ni.Payload) > l.cfg.MaxPayloadBytes {
			return submitPlan{}, invalidErr("submit items[%d] (id %x) payload is %d bytes, limit %d", i, ni.Id, len(ni.Payload), l.cfg.MaxPayloadBytes)
		}
		if k := ni.GetPayloadObj(); k > 0 && (int(k) > len(c.GetObjects()) || ni.GetPayloadRef() == nil || ni.GetPayloadRef().GetObject() != "") {
			return submitPlan{}, invalidErr("submit items[%d] (id %x) payload_obj %d names none of %d objects, or comes without a payload_ref of no object", i, ni.Id, k, len(c.GetObjects()))
		}
		switch pr := submitRef(c, ni); {
		case store != "" && pr == nil:
			return submitPlan{}, invalidErr("submit items[%d] (id %x) has no payload_ref; run %q keeps its payloads in its store", i, ni.Id, name)
		case store != "" && len(ni.Payload) > 0:
			return submitPlan{}, invalidErr("submit items[%d] (id %x) has an inline payload; run %q keeps its payloads in its store", i, ni.Id, name)
		case store == "" && pr != nil:
			return submitPlan{}, invalidErr("submit items[%d] (id %x) has a payload_ref, but run %q has no store", i, ni.Id, name)
		case pr != nil:
			if err := checkRef(fmt.Sprintf("submit items[%d].payload_ref", i), pr, false); err != nil {
				return submitPlan{}, err
			}
		}
		if ni.DeadReason != "" {
			if err := checkText("dead_reason", ni.DeadReason, limits.MaxReasonBytes); err != nil {
				return submitPlan{}, fmt.Errorf("submit items[%d]: %w", i, err)
			}
		}
		if j, dup := seen[string(ni.Id)]; dup {
			return submitPlan{}, invalidErr("submit items[%d] repeats the id %x of items[%d]", i, ni.Id, j)
		}
		if r != nil {
			if ex := r.items[string(ni.Id)]; ex != nil {
				if ex.index != ni.Index {
					return submitPlan{}, invalidErr("submit items[%d] gives id %x index %d, run %q holds it at index %d", i, ni.Id, ni.Index, name, ex.index)
				}
				if !sameDeps(ex, ni.DependsOn) {
					return submitPlan{}, invalidErr("submit items[%d] gives id %x other dependencies than run %q holds for it", i, ni.Id, name)
				}
				seen[string(ni.Id)] = i
				continue
			}
		}
		if err := checkDeps(r, items, i, seen); err != nil {
			return submitPlan{}, err
		}
		seen[string(ni.Id)] = i
		fresh = append(fresh, ni)
	}
	byIdx := slices.Clone(fresh)
	slices.SortFunc(byIdx, func(a, b *fsmpb.NewItem) int { return cmpU64(a.Index, b.Index) })
	for k := 1; k < len(byIdx); k++ {
		if byIdx[k].Index == byIdx[k-1].Index {
			return submitPlan{}, invalidErr("submit gives ids %x and %x the same index %d", byIdx[k-1].Id, byIdx[k].Id, byIdx[k].Index)
		}
	}
	if last := r.lastRecord(); last != nil && len(byIdx) > 0 && byIdx[0].Index <= last.index {
		for _, ni := range byIdx {
			if ex := r.findIndex(ni.Index); ex != nil {
				return submitPlan{}, invalidErr("submit gives new id %x index %d, which run %q holds for id %x", ni.Id, ni.Index, name, ex.id)
			}
		}
	}
	adds := uint64(0)
	for _, ni := range fresh {
		if ni.DeadReason == "" {
			adds++
		}
	}
	ten, err := l.submitTenant("submit", name, r, c.GetSpec(), c.GetTenant(), adds)
	if err != nil {
		return submitPlan{}, err
	}
	return submitPlan{run: r, fresh: len(fresh), tenant: ten}, nil
}

// submit applies a command validateSubmit accepted with plan p: it creates
// the run if needed (or raises its spec total), creates the new items
// (Pending, or Dead with their dead reason) and counts what it did with the
// existing ones, re-pending stale Running items and, with retry_dead,
// Dead ones.
func (l *Ledger) submit(c *fsmpb.SubmitItemsCmd, p submitPlan) Result {
	st := l.st
	now := st.now
	r := l.openRun(p.run, c.GetRun(), c.GetSpec(), p.tenant, p.fresh)
	// A resubmit re-uploads the run's inputs: a stall ends at once.
	l.resume(r, "", "the run was submitted again")
	var res Result
	block := make([]item, p.fresh)
	created := make([]*item, 0, p.fresh)
	stale := newStaleOwners(c.GetRependStaleNano(), c.GetStaleByLeader(), c.GetStaleWorkers())
	for _, ni := range c.GetItems() {
		if ex := r.items[string(ni.Id)]; ex != nil {
			switch ex.state {
			case StatePending:
				res.Submit.AlreadyPending++
			case StateRunning:
				// A Running item whose owner has been silent for longer
				// than the stale window goes back to Pending, attempt
				// unchanged: the owner's later report misses (CAS).
				if stale.owns(st, ex.owner) {
					st.release(ex)
					st.enqueue(ex)
					l.addedPending = true
					res.Submit.RependedStale++
					continue
				}
				res.Submit.AlreadyRunning++
			case StateDone:
				res.Submit.AlreadyDone++
			case StateDead:
				// An item created Dead (an input line that cannot run)
				// stays Dead: retrying it cannot succeed.
				if !c.GetRetryDead() || ni.DeadReason != "" {
					res.Submit.Dead++
					continue
				}
				ex.failures = 0
				ex.setReason("")
				st.enqueue(ex)
				l.addedPending = true
				res.Submit.Retried++
			}
			continue
		}
		it := &block[len(created)]
		it.run = r
		it.id = string(ni.Id)
		it.index = ni.Index
		if len(ni.Payload) > 0 {
			it.ext().payload = ni.Payload
			st.dataBytes += uint64(len(ni.Payload))
		}
		if pr := submitRef(c, ni); pr != nil {
			it.pref = r.refIn(pr)
			if len(pr.GetBlake3()) > 0 {
				it.ext().psum = pr.GetBlake3()
			}
		}
		it.created = now
		r.items[it.id] = it
		linkDeps(r, it, ni.DependsOn)
		created = append(created, it)
		st.items++
		r.total++
		if ni.DeadReason != "" {
			it.setReason(ni.DeadReason)
			st.setState(it, StateDead)
			res.Submit.CreatedDead++
			continue
		}
		st.enqueue(it)
		l.addedPending = true
		res.Submit.Created++
	}
	r.insertByIndex(created)
	r.updateFinished(now)
	return res
}

// openRun returns r, raising its spec total to spec's, or, when r is nil,
// creates the run name with spec (max_failures defaulted) for tenant (its
// spec records it, unless it is the default tenant the spec names by
// naming none).
func (l *Ledger) openRun(r *run, name string, spec *fsmpb.RunSpec, tenant string, fresh int) *run {
	st := l.st
	if r != nil {
		if t := spec.GetTotal(); t > r.spec.Total {
			r.spec.Total = t
		}
		return r
	}
	sp := &fsmpb.RunSpec{}
	if spec != nil {
		sp = proto.Clone(spec).(*fsmpb.RunSpec)
	}
	if sp.MaxFailures == 0 {
		sp.MaxFailures = l.cfg.DefaultMaxFailures
	}
	if tenant != tenantOf(sp) {
		sp.Tenant = tenant
	}
	st.runSeq++
	r = &run{
		name:    name,
		spec:    sp,
		seq:     st.runSeq,
		created: st.now,
		items:   make(map[string]*item, fresh),
		ten:     st.tenant(tenantOf(sp)),
	}
	r.ten.runs++
	if p := r.ten.clampPriority(sp.Priority); p != priorityOf(sp) {
		sp.Priority = p // the tenant's max_priority (tenants.go)
	}
	r.byIndex.init()
	st.runs[r.name] = r
	st.runOrder = append(st.runOrder, r)
	return r
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// findIndex returns the item of r at index idx, or nil.
func (r *run) findIndex(idx uint64) *item { return r.byIndex.get(idx) }

// lastRecord returns r's record of the highest index; nil for a nil run or
// one without records.
func (r *run) lastRecord() *item {
	if r == nil {
		return nil
	}
	return r.byIndex.last()
}

// insertByIndex adds new items (distinct indexes, none already in r) to
// r.byIndex: O(k log n).
func (r *run) insertByIndex(add []*item) {
	for _, it := range add {
		r.byIndex.insert(it)
	}
}

// claimCommand: ClaimCmd hands pending work to a worker.
func claimCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_Claim)(nil), label: "claim",
		apply:    func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applyClaim(c.GetClaim()) },
		snapshot: partRuns | partItems | partWorkers | partTenants,
	}
}

func (l *Ledger) applyClaim(c *fsmpb.ClaimCmd) Result {
	if err := checkName("claim worker", c.GetWorker(), limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	if c.GetMax() == 0 {
		return invalid("claim max is 0")
	}
	st := l.st
	w, err := st.registered("claim", c.GetWorker())
	if err != nil {
		return fail(err)
	}
	st.refresh(w)
	limit := int(min(c.GetMax(), MaxClaimBatch))
	var out []Item
	// One probe per stalled run whose probe is due (stall.go), first.
	for _, r := range st.stalled {
		if len(out) >= limit {
			break
		}
		if st.probeDue(r, w, st.now) {
			it := st.takeProbe(r)
			st.assign(it, w)
			out = append(out, it.copyOut())
		}
	}
	n := min(limit-len(out), st.pending.count(w))
	if n == 0 {
		return Result{Items: out}
	}
	// budget counts indexes: a range longer than what is left is carved,
	// the claim taking its head (ranges.go).
	budget := c.GetMaxIndexes()
	if budget == 0 {
		budget = uint64(c.GetMax())
	}
	for _, it := range out {
		budget -= min(budget, max(it.Count, 1))
	}
	out = slices.Grow(out, n)
	// The run whose turn it is (queue.go pick: the highest priority, the
	// tenant of least usage per weight, its least served run) gives the
	// claim its oldest records, carved to the budget and to the tenant's
	// max_running room, until it has none; then the next turn's run. A
	// claim's records thus come from as few runs as the turns allow (one
	// store, one model for the worker's backlog), and the turns, counted in
	// items, even out over claims.
	// The turn's run is charged its items when the claim leaves it, before
	// the next pick (one re-keying per run, not per record).
	var cur *run
	var owed uint64
	for range n {
		if budget == 0 {
			break
		}
		var it *item
		if cur != nil && cur.lane != nil && !cur.ten.throttled {
			it = cur.queued.front()
		} else {
			if cur != nil {
				st.charge(cur, owed)
				cur, owed = nil, 0
			}
			it = st.pending.pick(w)
		}
		if it == nil {
			break // the rest is a throttled tenant's
		}
		r := it.run
		cur = r
		if k := min(budget, r.ten.room()); it.width() > k {
			it = st.carve(it, k)
		} else {
			st.pending.remove(it)
		}
		budget -= it.width()
		owed += it.width()
		st.assign(it, w)
		out = append(out, it.copyOut())
	}
	if cur != nil {
		st.charge(cur, owed)
	}
	return Result{Items: out}
}

// completeCommand: CompleteCmd reports an item done.
func completeCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_Complete)(nil), label: "complete",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applyComplete(c.GetComplete()) },
		before: func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore {
			return runBefore(l, c.GetComplete().GetRun(), b)
		},
		events: func(l *Ledger, c *fsmpb.Command, b eventsBefore, _ Result) {
			l.recordFinished(c.GetComplete().GetRun(), b)
		},
		kinds:    []EventKind{EventRunResumed, EventRunFinished},
		snapshot: partRuns | partItems | partWorkers | partTenants | partEvents,
	}
}

func (l *Ledger) applyComplete(c *fsmpb.CompleteCmd) Result {
	if n := len(c.GetResult()); n > l.cfg.MaxPayloadBytes {
		return invalid("complete result is %d bytes, limit %d", n, l.cfg.MaxPayloadBytes)
	}
	if n := len(c.GetSummary()); n > limits.MaxSummaryBytes {
		return invalid("complete summary is %d bytes, limit %d", n, limits.MaxSummaryBytes)
	}
	cp := completion{run: c.GetRun(), id: c.GetId(), worker: c.GetWorker(), attempt: c.GetAttempt(),
		result: c.GetResult(), summary: c.GetSummary()}
	if rr := c.GetResultRef(); rr != nil {
		if err := checkRef("complete result_ref", rr, true); err != nil {
			return fail(err)
		}
		cp.hasRef, cp.object, cp.off, cp.n, cp.sum = true, rr.GetObject(), rr.GetOffset(), rr.GetLength(), rr.GetBlake3()
	}
	return l.complete(cp)
}

// completion is one item's completion, from a CompleteCmd or one item of a
// CompleteManyCmd (already checked on its own: sizes and the reference).
type completion struct {
	run     string
	id      []byte
	worker  string
	attempt uint64
	result  []byte
	summary []byte
	hasRef  bool
	object  string
	off, n  uint64
	sum     []byte
}

func (l *Ledger) complete(c completion) Result {
	it, err := l.lookup("complete", c.run, c.id, c.worker)
	if err != nil {
		return fail(err)
	}
	if it.width() > 1 {
		return invalid("complete names %s/%x, a range of %d indexes: report it with ReportRange", it.run.name, it.id, it.width())
	}
	switch store := hasStore(it.run); {
	case store && !c.hasRef:
		return invalid("complete of %s/%x has no result_ref; run %q keeps its results in its store", it.run.name, it.id, it.run.name)
	case store && len(c.result) > 0:
		return invalid("complete of %s/%x has an inline result; run %q keeps its results in its store", it.run.name, it.id, it.run.name)
	case !store && c.hasRef:
		return invalid("complete of %s/%x has a result_ref, but run %q has no store", it.run.name, it.id, it.run.name)
	}
	if it.state == StateDone {
		same := bytes.Equal(it.result(), c.result)
		if c.hasRef {
			// The hash of the bytes decides: the same bytes written into
			// another object by a retry are the same result.
			same = it.rref.obj != 0 && bytes.Equal(it.rsum[:], c.sum)
		}
		if !same {
			return fail(fmt.Errorf("%w: %s/%x was completed by %q at attempt %d; the first result stands",
				ErrConflict, it.run.name, it.id, it.owner, it.attempt))
		}
		// Only the winning completion's own retry is idempotent; the same
		// bytes from another owner or attempt (a worker that lost the item)
		// are a CAS miss, so an item has exactly one accepted completion.
		if casEnforced && (it.owner != c.worker || it.attempt != c.attempt) {
			return fail(casMiss("complete", it, c.worker, c.attempt))
		}
		return Result{Duplicate: true}
	}
	if !it.isRunning(c.worker, c.attempt) {
		return fail(casMiss("complete", it, c.worker, c.attempt))
	}
	st := l.st
	if w := st.workers[it.owner]; w != nil {
		w.completed++
		w.lastHeartbeat = st.now
	}
	st.release(it)
	if len(c.result) > 0 {
		it.ext().result = c.result
		st.dataBytes += uint64(len(c.result))
	}
	if c.hasRef {
		it.rref = ref{obj: it.run.intern(c.object), n: uint32(c.n), off: c.off}
		copy(it.rsum[:], c.sum)
	}
	if len(c.summary) > 0 {
		it.ext().summary = c.summary
		st.dataBytes += uint64(len(c.summary))
	}
	st.setState(it, StateDone)
	if st.unblockDependents(it) {
		l.addedPending = true
	}
	l.probeReported(it, c.worker)
	return Result{}
}

// completeManyCommand: CompleteManyCmd reports items of one object done.
func completeManyCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_CompleteMany)(nil), label: "complete_many",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applyCompleteMany(c.GetCompleteMany()) },
		before: func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore {
			return runBefore(l, c.GetCompleteMany().GetRun(), b)
		},
		events: func(l *Ledger, c *fsmpb.Command, b eventsBefore, _ Result) {
			l.recordFinished(c.GetCompleteMany().GetRun(), b)
		},
		kinds:    []EventKind{EventRunResumed, EventRunFinished},
		snapshot: partRuns | partItems | partWorkers | partTenants | partEvents,
	}
}

// applyCompleteMany checks the whole command's shape (one id, attempt,
// offset, length and hash per item; summaries none or one per item, each
// bounded; the object a valid key) and then completes each item as
// CompleteCmd would: Result.Each[i] is item i's outcome (an item's CAS
// miss, conflict or unknown id does not stop the others). A malformed
// command changes nothing and fails as a whole.
func (l *Ledger) applyCompleteMany(c *fsmpb.CompleteManyCmd) Result {
	n := len(c.GetIds())
	switch {
	case n == 0:
		return invalid("complete_many has no items")
	case len(c.GetAttempts()) != n || len(c.GetOffsets()) != n || len(c.GetLengths()) != n || len(c.GetHashes()) != n*hashBytes:
		return invalid("complete_many has %d ids, %d attempts, %d offsets, %d lengths and %d hash bytes; want one of each per item",
			n, len(c.GetAttempts()), len(c.GetOffsets()), len(c.GetLengths()), len(c.GetHashes()))
	case len(c.GetSummaries()) != 0 && len(c.GetSummaries()) != n:
		return invalid("complete_many has %d summaries for %d items", len(c.GetSummaries()), n)
	}
	for i := range n {
		d := &fsmpb.DataRef{Object: c.GetObject(), Offset: c.GetOffsets()[i], Length: c.GetLengths()[i], Blake3: c.GetHashes()[i*hashBytes : (i+1)*hashBytes]}
		if err := checkRef(fmt.Sprintf("complete_many item %d", i), d, true); err != nil {
			return fail(err)
		}
		if len(c.GetSummaries()) > 0 && len(c.GetSummaries()[i]) > limits.MaxSummaryBytes {
			return invalid("complete_many item %d summary is %d bytes, limit %d", i, len(c.GetSummaries()[i]), limits.MaxSummaryBytes)
		}
	}
	res := Result{Each: make([]Result, n)}
	for i := range n {
		cp := completion{run: c.GetRun(), id: c.GetIds()[i], worker: c.GetWorker(), attempt: c.GetAttempts()[i],
			hasRef: true, object: c.GetObject(), off: c.GetOffsets()[i], n: c.GetLengths()[i],
			sum: c.GetHashes()[i*hashBytes : (i+1)*hashBytes]}
		if len(c.GetSummaries()) > 0 {
			cp.summary = c.GetSummaries()[i]
		}
		res.Each[i] = l.complete(cp)
	}
	return res
}

// failCommand: FailCmd reports an item failed.
func failCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_Fail)(nil), label: "fail",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applyFail(c.GetFail()) },
		before: func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore {
			return runBefore(l, c.GetFail().GetRun(), b)
		},
		events: func(l *Ledger, c *fsmpb.Command, b eventsBefore, res Result) {
			f := c.GetFail()
			if r := l.st.runs[f.GetRun()]; r != nil && res.Repended == 0 {
				if it := r.items[string(f.GetId())]; it != nil && it.state == StateDead {
					l.recordItemsDead(f.GetRun(), f.GetWorker(), f.GetReason(), 1)
				}
			}
			l.recordFinished(f.GetRun(), b)
		},
		kinds:    []EventKind{EventRunResumed, EventItemDead, EventRunFinished},
		snapshot: partRuns | partItems | partWorkers | partTenants | partEvents,
	}
}

func (l *Ledger) applyFail(c *fsmpb.FailCmd) Result {
	if err := checkText("fail reason", c.GetReason(), limits.MaxReasonBytes); err != nil {
		return fail(err)
	}
	it, err := l.lookup("fail", c.GetRun(), c.GetId(), c.GetWorker())
	if err != nil {
		return fail(err)
	}
	if it.width() > 1 {
		return invalid("fail names %s/%x, a range of %d indexes: report its failed indexes with ReportRange", it.run.name, it.id, it.width())
	}
	if !it.isRunning(c.GetWorker(), c.GetAttempt()) {
		return fail(casMiss("fail", it, c.GetWorker(), c.GetAttempt()))
	}
	st := l.st
	st.heartbeat(it.owner)
	st.release(it)
	l.probeReported(it, c.GetWorker())
	it.failures++
	it.run.failures++
	if it.failures >= it.run.spec.GetMaxFailures() || c.GetPermanent() {
		it.setReason(c.GetReason())
		st.setState(it, StateDead)
		return Result{}
	}
	st.enqueue(it)
	l.addedPending = true
	return Result{Repended: 1}
}

// nackCommand: NackCmd gives an item back without a failure.
func nackCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_Nack)(nil), label: "nack",
		apply:    func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applyNack(c.GetNack()) },
		snapshot: partRuns | partItems | partWorkers | partTenants,
	}
}

func (l *Ledger) applyNack(c *fsmpb.NackCmd) Result {
	it, err := l.lookup("nack", c.GetRun(), c.GetId(), c.GetWorker())
	if err != nil {
		return fail(err)
	}
	if !it.isRunning(c.GetWorker(), c.GetAttempt()) {
		return fail(casMiss("nack", it, c.GetWorker(), c.GetAttempt()))
	}
	st := l.st
	st.heartbeat(it.owner)
	st.release(it)
	st.enqueue(it)
	l.addedPending = true
	return Result{Repended: int(it.width())}
}

func checkKeys(what string, keys []*fsmpb.ItemKey) error {
	for i, k := range keys {
		// Format the field name only on the error path: this runs per key.
		if err := checkName("run", k.GetRun(), limits.MaxRunNameBytes); err != nil {
			return fmt.Errorf("%s[%d]: %w", what, i, err)
		}
		if err := checkID("id", k.GetId()); err != nil {
			return fmt.Errorf("%s[%d]: %w", what, i, err)
		}
	}
	return nil
}

// heartbeatCommand: HeartbeatCmd says a worker is alive.
func heartbeatCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_Heartbeat)(nil), label: "heartbeat",
		apply:    func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applyHeartbeat(c.GetHeartbeat()) },
		snapshot: partItems | partWorkers,
	}
}

func (l *Ledger) applyHeartbeat(c *fsmpb.HeartbeatCmd) Result {
	if err := checkName("heartbeat worker", c.GetWorker(), limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	if r := c.GetItemsPerSec(); math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
		return invalid("heartbeat items_per_sec is %v, must be finite and >= 0", r)
	}
	if err := checkKeys("heartbeat executing", c.GetExecuting()); err != nil {
		return fail(err)
	}
	if err := checkKeys("heartbeat held", c.GetHeld()); err != nil {
		return fail(err)
	}
	st := l.st
	w, err := st.registered("heartbeat", c.GetWorker())
	if err != nil {
		return fail(err)
	}
	st.refresh(w)
	w.backlog = c.GetBacklog()
	w.itemsPerSec = c.GetItemsPerSec()
	// A fresh slice, never an in-place update: snapshots share the old one.
	w.executing = execKeys(c.GetExecuting())
	var res Result
	st.markStarted(w, c.GetExecuting())
	held := make([]ItemKey, len(c.GetHeld()))
	for i, k := range c.GetHeld() {
		held[i] = ItemKey{Run: k.GetRun(), ID: k.GetId(), Attempt: k.GetAttempt()}
	}
	res.Lost, res.Bounds = st.held(w.id, held)
	return res
}

// deregisterCommand: DeregisterCmd removes a worker (itself, or evicted).
func deregisterCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_Deregister)(nil), label: "deregister",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applyDeregister(c.GetDeregister()) },
		check: func(c *fsmpb.Command) error {
			return checkText("deregister reason", c.GetDeregister().GetReason(), limits.MaxReasonBytes)
		},
		before: func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore {
			_, b.existed = l.st.workers[c.GetDeregister().GetWorker()]
			return b
		},
		events: func(l *Ledger, c *fsmpb.Command, b eventsBefore, res Result) {
			d := c.GetDeregister()
			switch {
			case !b.existed:
			case d.GetEvicted():
				l.record(EventWorkerEvicted, "", d.GetWorker(), "", d.GetReason(), uint64(res.Repended))
			default:
				l.record(EventWorkerDeregistered, "", d.GetWorker(), "", d.GetReason(), uint64(res.Repended))
			}
		},
		kinds:    []EventKind{EventWorkerEvicted, EventWorkerDeregistered},
		snapshot: partRuns | partItems | partWorkers | partTenants | partEvents,
	}
}

func (l *Ledger) applyDeregister(c *fsmpb.DeregisterCmd) Result {
	if err := checkName("deregister worker", c.GetWorker(), limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	st := l.st
	w := st.workers[c.GetWorker()]
	if w == nil {
		if c.GetEvicted() {
			// An operator named a worker the ledger does not hold: say so,
			// rather than report an eviction that did nothing.
			return fail(fmt.Errorf("%w: evict names %q", ErrWorkerNotRegistered, c.GetWorker()))
		}
		// A worker's own deregistration is idempotent: a retry, or one
		// after its record expired, succeeds with nothing to do.
		return Result{}
	}
	n := st.repend(w)
	if n > 0 {
		l.addedPending = true
	}
	delete(st.workers, w.id)
	return Result{Repended: n}
}

// stealCommand: StealCmd moves items from a busy worker to an idle one.
func stealCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_Steal)(nil), label: "steal",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applySteal(c.GetSteal()) },
		events: func(l *Ledger, c *fsmpb.Command, _ eventsBefore, res Result) {
			if len(res.Items) > 0 {
				l.record(EventItemsStolen, "", c.GetSteal().GetThief(), "", res.Victim, uint64(len(res.Items)))
			}
		},
		kinds:    []EventKind{EventItemsStolen},
		snapshot: partRuns | partItems | partWorkers | partTenants | partEvents,
	}
}

func (l *Ledger) applySteal(c *fsmpb.StealCmd) Result {
	if err := checkName("steal thief", c.GetThief(), limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	st := l.st
	thief, err := st.registered("steal", c.GetThief())
	if err != nil {
		return fail(err)
	}
	if c.GetThiefBacklog() > 0 {
		return fail(fmt.Errorf("%w: %q reports a backlog of %d", ErrNotIdle, c.GetThief(), c.GetThiefBacklog()))
	}
	st.refresh(thief)
	var victim *worker
	victimLen, victimPrio := 0, uint32(0)
	victimExec := []execKey(nil)
	if c.GetByLeader() {
		// The leader chose the victim from its own view of liveness and
		// progress (by the rule of busiest, among the workers it heard
		// from); the ledger checks the choice still stands and takes the
		// leader's view of what the victim is executing.
		if err := checkKeys("steal victim_executing", c.GetVictimExecuting()); err != nil {
			return fail(err)
		}
		w := st.workers[c.GetVictim()]
		if w == nil || w.lost || w == thief || w.owned.len == 0 {
			return Result{}
		}
		victimExec = execKeys(c.GetVictimExecuting())
		st.markStarted(w, c.GetVictimExecuting())
		if victimLen, victimPrio = stealable(thief, w); victimLen == 0 {
			return Result{}
		}
		victim = w
	} else {
		victim, victimLen, victimPrio = st.busiest(thief, nil)
		if victim == nil {
			return Result{}
		}
		victimExec = victim.executing
	}
	want := min((victimLen+1)/2, l.cfg.MaxStealBatch)
	if victimRanges(thief, victim) {
		return l.stealRanges(thief, victim, uint64(want), victimPrio, victimExec)
	}
	executing := execSet(victimExec)
	taken := make([]*item, 0, want)
	for it := victim.owned.back(); it != nil && len(taken) < want; it = victim.owned.before(it) {
		if !thief.takesItem(it) || priorityOf(it.run.spec) != victimPrio {
			continue
		}
		if _, busy := executing[execKey{run: it.run.name, id: it.id, attempt: it.attempt}]; busy {
			continue
		}
		taken = append(taken, it)
	}
	res := Result{Victim: victim.id}
	if len(taken) > 0 {
		res.Items = make([]Item, 0, len(taken))
	}
	for _, it := range taken {
		victim.owned.remove(it)
		st.assign(it, thief)
		res.Items = append(res.Items, it.copyOut())
	}
	return res
}

// stealable counts what victim owns that thief takes, of the highest
// priority among it (returned too): its items, and the unstarted indexes of
// its ranges.
func stealable(thief, victim *worker) (int, uint32) {
	all := thief.takesAll()
	n, top := 0, uint32(0)
	for it := victim.owned.front(); it != nil; it = victim.owned.after(it) {
		if !all && !thief.takesItem(it) {
			continue
		}
		k := 1
		if it.isRange() {
			k = int(min(it.unstarted(), 1<<31))
			if k == 0 {
				continue
			}
		}
		switch p := priorityOf(it.run.spec); {
		case p > top:
			n, top = k, p
		case p == top:
			n += k
		}
	}
	return n, top
}

// busiest is the live peer of thief holding the most stealable work of the
// highest priority any peer holds (what thief takes: its kinds and models;
// everything for a thief that takes every kind and model), with that count
// and priority; nil when none holds any. Only workers heard accepts are
// candidates (nil: all). The comparison is a total order, so map iteration
// order cannot change the choice.
func (st *state) busiest(thief *worker, heard func(id string) bool) (*worker, int, uint32) {
	var victim *worker
	victimLen, victimPrio := 0, uint32(0)
	for _, w := range st.workers {
		if w.lost || w == thief || w.owned.len == 0 || (heard != nil && !heard(w.id)) {
			continue
		}
		n, prio := stealable(thief, w)
		if n == 0 {
			continue
		}
		if victim == nil || prio > victimPrio || prio == victimPrio && (n > victimLen || (n == victimLen && w.id < victim.id)) {
			victim, victimLen, victimPrio = w, n, prio
		}
	}
	return victim, victimLen, victimPrio
}

// execKeys converts reported executing keys.
func execKeys(keys []*fsmpb.ItemKey) []execKey {
	if len(keys) == 0 {
		return nil
	}
	out := make([]execKey, len(keys))
	for i, k := range keys {
		out[i] = execKey{run: k.GetRun(), id: string(k.GetId()), attempt: k.GetAttempt()}
	}
	return out
}

// execSet indexes executing keys; nil for none.
func execSet(keys []execKey) map[execKey]struct{} {
	if len(keys) == 0 {
		return nil
	}
	m := make(map[execKey]struct{}, len(keys))
	for _, k := range keys {
		m[k] = struct{}{}
	}
	return m
}

// markStarted raises the started mark of each of w's Running ranges that
// keys name with a started mark (never past the range's end, never down).
func (st *state) markStarted(w *worker, keys []*fsmpb.ItemKey) {
	for _, k := range keys {
		if k.GetStarted() == 0 {
			continue
		}
		if r := st.runs[k.GetRun()]; r != nil {
			if it := r.items[string(k.GetId())]; it != nil && it.isRange() && it.isRunning(w.id, k.GetAttempt()) {
				it.started = max(it.started, min(k.GetStarted(), it.end()))
			}
		}
	}
}

// checkStaleWorkers checks a submit's stale_workers names.
func checkStaleWorkers(op string, ids []string) error {
	for i, id := range ids {
		if err := checkName(fmt.Sprintf("%s stale_workers[%d]", op, i), id, limits.MaxWorkerIDBytes); err != nil {
			return err
		}
	}
	return nil
}

// staleOwners is a submit's rule for which owners of Running work are
// stale (their work goes back to Pending, attempt unchanged).
type staleOwners struct {
	window   int64
	byLeader bool
	named    map[string]struct{}
}

func newStaleOwners(window int64, byLeader bool, workers []string) staleOwners {
	s := staleOwners{window: window, byLeader: byLeader}
	if byLeader && len(workers) > 0 {
		s.named = make(map[string]struct{}, len(workers))
		for _, w := range workers {
			s.named[w] = struct{}{}
		}
	}
	return s
}

// owns reports whether owner is stale: with no window, never; otherwise an
// owner the ledger does not hold or holds Lost is; then, when the leader
// judged (liveness is leader-local), one it named, else one whose last
// command is older than the window at the entry's stamped time.
func (s staleOwners) owns(st *state, owner string) bool {
	if s.window <= 0 {
		return false
	}
	w := st.workers[owner]
	if w == nil || w.lost {
		return true
	}
	if s.byLeader {
		_, ok := s.named[owner]
		return ok
	}
	return st.now-w.lastHeartbeat > s.window
}

// victimRanges reports whether victim owns a range thief takes.
func victimRanges(thief, victim *worker) bool {
	for it := victim.owned.front(); it != nil; it = victim.owned.after(it) {
		if it.isRange() && thief.takesItem(it) {
			return true
		}
	}
	return false
}

// stealRanges takes up to want of victim's work of priority prio for thief,
// latest claims first (victimExec: what the victim is executing): each of
// its items not executing whole, and from each range the tail of at most
// half its unstarted indexes (splitTail).
func (l *Ledger) stealRanges(thief, victim *worker, want uint64, prio uint32, victimExec []execKey) Result {
	st := l.st
	executing := execSet(victimExec)
	res := Result{Victim: victim.id}
	taken := uint64(0)
	for it := victim.owned.back(); it != nil && taken < want; {
		prev := victim.owned.before(it)
		if !thief.takesItem(it) || priorityOf(it.run.spec) != prio {
			it = prev
			continue
		}
		if it.isRange() {
			if k := min(it.unstarted()/2, want-taken); k > 0 {
				tail := st.splitTail(it, k, thief)
				res.Items = append(res.Items, tail.copyOut())
				taken += k
			}
			it = prev
			continue
		}
		if _, busy := executing[execKey{run: it.run.name, id: it.id, attempt: it.attempt}]; !busy {
			victim.owned.remove(it)
			st.assign(it, thief)
			res.Items = append(res.Items, it.copyOut())
			taken++
		}
		it = prev
	}
	return res
}

// expireCommand: ExpireWorkersCmd, the leader's failure scan.
func expireCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_Expire)(nil), label: "expire",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applyExpire(c.GetExpire()) },
		before: func(l *Ledger, _ *fsmpb.Command, b eventsBefore) eventsBefore {
			b.workers = make([]wasWorker, 0, len(l.st.workers))
			for _, w := range l.st.workers {
				b.workers = append(b.workers, wasWorker{id: w.id, lastHeartbeat: w.lastHeartbeat, owned: int(w.runningIndexes())})
			}
			return b
		},
		events: func(l *Ledger, c *fsmpb.Command, b eventsBefore, res Result) {
			l.recordExpire(c.GetExpire(), b, res)
		},
		kinds:    []EventKind{EventWorkerExpired, EventWorkerRemoved},
		snapshot: partRuns | partItems | partWorkers | partTenants | partEvents,
	}
}

func (l *Ledger) applyExpire(c *fsmpb.ExpireWorkersCmd) Result {
	timeout := c.GetTimeoutNano()
	if timeout <= 0 {
		return invalid("expire timeout_nano is %d, must be > 0", timeout)
	}
	st := l.st
	var expired []string
	if c.GetByLeader() {
		// The leader decided from its heartbeat timers; the ledger
		// declares lost only named workers it holds live that sent no
		// command within the timeout either (a worker whose claim or
		// report the log ordered after the leader's decision stays).
		for i, id := range c.GetWorkers() {
			if err := checkName(fmt.Sprintf("expire workers[%d]", i), id, limits.MaxWorkerIDBytes); err != nil {
				return fail(err)
			}
		}
		for _, id := range c.GetWorkers() {
			if w := st.workers[id]; w != nil && !w.lost && st.now-w.lastHeartbeat > timeout {
				expired = append(expired, w.id)
			}
		}
		sort.Strings(expired)
		expired = slices.Compact(expired)
	} else {
		for _, w := range st.workers {
			// lastHeartbeat <= now always holds (now is monotone), so the
			// subtraction cannot overflow for stamped times.
			if !w.lost && st.now-w.lastHeartbeat > timeout {
				expired = append(expired, w.id)
			}
		}
		sort.Strings(expired)
	}
	res := Result{Expired: expired}
	for _, id := range expired {
		w := st.workers[id]
		w.lost = true
		res.Repended += st.repend(w)
	}
	if res.Repended > 0 {
		l.addedPending = true
	}
	// Lost workers that hold nothing and stayed silent past the retention
	// are forgotten (a Lost worker never holds items; the check states the
	// rule rather than rely on it).
	retention := retentionNano(timeout, l.cfg.LostWorkerRetention)
	for _, w := range st.workers {
		if w.lost && w.owned.len == 0 && st.now-w.lastHeartbeat > retention {
			res.Removed = append(res.Removed, w.id)
		}
	}
	sort.Strings(res.Removed)
	for _, id := range res.Removed {
		delete(st.workers, id)
	}
	return res
}
