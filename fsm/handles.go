package fsm

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"lukechampine.com/blake3"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// Federation handles (issue 42).
//
// A run that the leader routed to a peer cluster is a handle: a record
// naming the run, the peer, the remote run name and the handle's state,
// with no items and no ranges. HandleCmd (one command, its op says what)
// creates it, records the peer's acknowledgment, refusal and status, and
// the durable cancel and delete intents and their confirmations. Run
// names are one namespace: a submit naming a handle is ErrHandled, a
// CREATE naming a local run ErrRouteConflict.
//
// The remote run name is fixed when CREATE is applied, from ledger state
// only (RemoteRunName), so every replica, and every later leader, computes
// the same one: a deposed leader's forward and a new leader's re-drive
// name the same remote run, which the peer's idempotent submit makes one.

// The states of a handle (HandleStatus.State, rolloutv1
// RunCounters.handle_state).
const (
	// HandlePending: created, not yet accepted by the peer.
	HandlePending = "pending"
	// HandleAcknowledged: the peer holds the remote run.
	HandleAcknowledged = "acknowledged"
	// HandleFinished: the peer reported the remote run finished.
	HandleFinished = "finished"
	// HandleCancelled: the peer confirmed the remote run cancelled.
	HandleCancelled = "cancelled"
	// HandleLost: the remote run was missing on the peer after it was
	// acknowledged.
	HandleLost = "lost"
	// HandleRefused: the peer refused the run permanently: it is nowhere.
	HandleRefused = "refused"
)

// HandleTerminal reports whether a handle in state s changes no more
// (finished, cancelled, lost, refused).
func HandleTerminal(s string) bool {
	return s == HandleFinished || s == HandleCancelled || s == HandleLost || s == HandleRefused
}

// RemoteRunName returns the name a handle's run has on the peer: parent +
// "/" + run + "." + the first 4 bytes, in hex, of blake3(clusterID, 0,
// run, 0, seq as 8 bytes big-endian, remoteNameSalt()). parent is the
// parent cluster's name, clusterID the parent ledger's identity and seq the
// run sequence number the creating command took: all ledger state, so the
// name is the same on every replica and under every leader.
func RemoteRunName(parent, clusterID, run string, seq uint64) string {
	h := blake3.New(32, nil)
	h.Write([]byte(clusterID))
	h.Write([]byte{0})
	h.Write([]byte(run))
	h.Write([]byte{0})
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	h.Write(b[:])
	if salt := remoteNameSalt(); salt != nil {
		h.Write(salt)
	}
	return parent + "/" + run + "." + hex.EncodeToString(h.Sum(nil)[:4])
}

// handle is the ledger's record of a run handed to a peer.
type handle struct {
	run, peer, remote, parent, tenant string
	spec                              *fsmpb.RunSpec
	state, reason                     string
	code                              uint32
	counters                          *fsmpb.HandleCounters // never nil
	created, updated, acked           int64
	seq                               uint64
	cancel, del                       bool
	cancelBy, delBy                   string
}

// HandleStatus is a copy of a handle.
type HandleStatus struct {
	Run, Peer, RemoteRun, Parent, Tenant string
	// Spec is a clone of the spec the run was created with.
	Spec *fsmpb.RunSpec
	// State is one of the Handle* states; Reason why it was refused or
	// lost; Code the gRPC code of a refusal.
	State, Reason string
	Code          uint32
	// Counters are the peer's last reported counters (a clone, never nil).
	Counters *fsmpb.HandleCounters
	// Created, Updated and Acked are stamped times (Acked zero until the
	// peer acknowledged the run).
	Created, Updated, Acked time.Time
	Seq                     uint64
	// CancelIntent and DeleteIntent are the recorded intents, by whom.
	CancelIntent, DeleteIntent bool
	CancelBy, DeleteBy         string
}

func (h *handle) copyOut() HandleStatus {
	s := HandleStatus{Run: h.run, Peer: h.peer, RemoteRun: h.remote, Parent: h.parent, Tenant: h.tenant,
		Spec: proto.Clone(h.spec).(*fsmpb.RunSpec), State: h.state, Reason: h.reason, Code: h.code,
		Counters: proto.Clone(h.counters).(*fsmpb.HandleCounters), Created: unixTime(h.created),
		Updated: unixTime(h.updated), Seq: h.seq, CancelIntent: h.cancel, DeleteIntent: h.del,
		CancelBy: h.cancelBy, DeleteBy: h.delBy}
	if h.acked != 0 {
		s.Acked = unixTime(h.acked)
	}
	return s
}

// Handle returns a copy of the handle of run, or ErrRunNotFound.
func (l *Ledger) Handle(run string) (HandleStatus, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	h := l.st.handles[run]
	if h == nil {
		return HandleStatus{}, fmt.Errorf("%w: no handle %q", ErrRunNotFound, run)
	}
	return h.copyOut(), nil
}

// Handles returns a copy of every handle, in run name order.
func (l *Ledger) Handles() []HandleStatus {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]HandleStatus, 0, len(l.st.handles))
	for _, h := range l.st.handles {
		out = append(out, h.copyOut())
	}
	slices.SortFunc(out, func(a, b HandleStatus) int { return cmpString(a.Run, b.Run) })
	return out
}

// handledErr is the error of a local operation on a run that is a handle.
func (st *state) handledErr(op, run string) error {
	h := st.handles[run]
	return fmt.Errorf("%w: %s names run %q, which was handed to peer %q as %q", ErrHandled, op, run, h.peer, h.remote)
}

// handleCommand: HandleCmd changes one handle.
func handleCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_Handle)(nil), label: "handle",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applyHandle(c.GetHandle()) },
		before: func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore {
			if h := l.st.handles[c.GetHandle().GetRun()]; h != nil {
				b.existed = true
				b.handleState = h.state
				b.handleIntent = h.cancel
				b.handleDelBy = h.delBy
			}
			return b
		},
		events:   handleEvents,
		kinds:    []EventKind{EventRunHandedOff, EventPeerRefused, EventHandleChanged, EventRunCancelled, EventRunDeleted},
		snapshot: partHeader | partHandles | partEvents,
	}
}

// handleEvents records a HandleCmd's events: one per change, none for a
// command that changed nothing (a repeated poll's status).
func handleEvents(l *Ledger, c *fsmpb.Command, b eventsBefore, res Result) {
	x := c.GetHandle()
	h := l.st.handles[x.GetRun()]
	switch x.GetOp() {
	case fsmpb.HandleOp_HANDLE_OP_CREATE:
		if !b.existed && h != nil {
			l.record(EventRunHandedOff, h.run, "", h.peer, h.remote, 0)
		}
	case fsmpb.HandleOp_HANDLE_OP_REFUSED:
		if h != nil && b.handleState != h.state {
			l.record(EventPeerRefused, h.run, "", h.peer, h.reason, 0)
		}
	case fsmpb.HandleOp_HANDLE_OP_CANCEL:
		if h != nil && h.cancel && !b.handleIntent {
			l.record(EventRunCancelled, h.run, "", "", "cancel of the handed-off run requested by "+orUnknown(x.GetBy()), 0)
		}
	case fsmpb.HandleOp_HANDLE_OP_DELETE, fsmpb.HandleOp_HANDLE_OP_DELETED:
		if b.existed && h == nil {
			by := x.GetBy()
			if by == "" {
				by = b.handleDelBy
			}
			l.record(EventRunDeleted, x.GetRun(), "", x.GetPeer(), "handle deleted by "+orUnknown(by), 0)
		}
	default:
		if h != nil && b.existed && b.handleState != h.state {
			d := h.state
			if h.reason != "" {
				d += ": " + h.reason
			}
			l.record(EventHandleChanged, h.run, "", h.peer, d, 0)
		}
	}
}

// applyHandle validates and applies a HandleCmd.
func (l *Ledger) applyHandle(c *fsmpb.HandleCmd) Result {
	st := l.st
	name := c.GetRun()
	if err := checkName("handle run", name, limits.MaxRunNameBytes); err != nil {
		return fail(err)
	}
	if err := checkText("handle peer", c.GetPeer(), limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	if err := checkText("handle reason", c.GetReason(), limits.MaxReasonBytes); err != nil {
		return fail(err)
	}
	if err := checkText("handle by", c.GetBy(), limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	if c.GetOp() == fsmpb.HandleOp_HANDLE_OP_CREATE {
		return l.createHandle(c)
	}
	h := st.handles[name]
	if h == nil {
		if c.GetOp() == fsmpb.HandleOp_HANDLE_OP_DELETED {
			return Result{} // already gone: a re-driven confirmation
		}
		return fail(fmt.Errorf("%w: handle %s names run %q, which is not a handle", ErrRunNotFound, opName(c.GetOp()), name))
	}
	if p := c.GetPeer(); p != "" && p != h.peer {
		return fail(fmt.Errorf("%w: handle %s names peer %q for run %q, handed to peer %q", ErrRouteConflict, opName(c.GetOp()), p, name, h.peer))
	}
	if r := c.GetRemoteRun(); r != "" && r != h.remote {
		return fail(fmt.Errorf("%w: handle %s names remote run %q for run %q, whose remote run is %q", ErrRouteConflict, opName(c.GetOp()), r, name, h.remote))
	}
	now := st.now
	switch c.GetOp() {
	case fsmpb.HandleOp_HANDLE_OP_ACKNOWLEDGED:
		if h.state == HandlePending {
			h.state, h.acked, h.updated = HandleAcknowledged, nonZero(now), now
		}
	case fsmpb.HandleOp_HANDLE_OP_REFUSED:
		if h.state == HandlePending {
			h.state, h.reason, h.code, h.updated = HandleRefused, c.GetReason(), c.GetCode(), now
		}
	case fsmpb.HandleOp_HANDLE_OP_STATUS:
		return l.handleStatus(h, c)
	case fsmpb.HandleOp_HANDLE_OP_CANCEL:
		if !h.cancel && !HandleTerminal(h.state) { // a finished, refused or lost run has nothing to cancel
			h.cancel, h.cancelBy, h.updated = true, c.GetBy(), now
		}
	case fsmpb.HandleOp_HANDLE_OP_CANCELLED:
		if !HandleTerminal(h.state) {
			h.state, h.updated = HandleCancelled, now
			if h.acked == 0 {
				h.acked = nonZero(now)
			}
		}
	case fsmpb.HandleOp_HANDLE_OP_DELETE:
		if !HandleTerminal(h.state) {
			return fail(fmt.Errorf("%w: run %q (handed to peer %q) is %s; cancel it first", ErrRunActive, name, h.peer, h.state))
		}
		if h.state == HandleRefused || h.state == HandleLost {
			delete(st.handles, name) // nothing of it is on the peer
			return Result{}
		}
		if !h.del {
			h.del, h.delBy, h.updated = true, c.GetBy(), now
		}
	case fsmpb.HandleOp_HANDLE_OP_DELETED:
		if !h.del {
			return fail(fmt.Errorf("%w: handle deleted names run %q, whose deletion was not requested", ErrInvalidCommand, name))
		}
		delete(st.handles, name)
	default:
		return invalid("handle command has op %d", c.GetOp())
	}
	return Result{}
}

// opName names a HandleOp in errors ("create", "status", ...).
func opName(op fsmpb.HandleOp) string {
	s := op.String()
	const p = "HANDLE_OP_"
	if len(s) > len(p) && s[:len(p)] == p {
		s = s[len(p):]
	}
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func nonZero(ns int64) int64 {
	if ns == 0 {
		return 1
	}
	return ns
}

// createHandle applies a CREATE: the run becomes a handle for the peer,
// with its remote name computed here.
func (l *Ledger) createHandle(c *fsmpb.HandleCmd) Result {
	st := l.st
	name, peer := c.GetRun(), c.GetPeer()
	if err := checkName("handle create peer", peer, limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	if err := checkName("handle create parent", c.GetParent(), limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	if c.GetSpec() == nil {
		return invalid("handle create of run %q has no spec", name)
	}
	if err := l.checkSpec(c.GetSpec()); err != nil {
		return fail(err)
	}
	if err := l.checkDataPrefix("handle create", name, c.GetSpec(), nil); err != nil {
		return fail(err)
	}
	if err := checkTenantName("handle create tenant", c.GetTenant()); err != nil {
		return fail(err)
	}
	if c.GetSpec().GetOrigin() != "" {
		return fail(fmt.Errorf("%w: run %q came from cluster %q and is never handed on (one hop)", ErrRouteConflict, name, c.GetSpec().GetOrigin()))
	}
	if h := st.handles[name]; h != nil {
		if h.peer != peer {
			return fail(fmt.Errorf("%w: run %q was handed to peer %q, not %q", ErrRouteConflict, name, h.peer, peer))
		}
		return Result{} // the same decision again: idempotent
	}
	if st.runs[name] != nil {
		return fail(fmt.Errorf("%w: run %q is local; it cannot be handed to peer %q", ErrRouteConflict, name, peer))
	}
	if st.clusterID == "" {
		return invalid("handle create of run %q before the ledger has a cluster id", name)
	}
	seq := st.runSeq + 1
	remote := RemoteRunName(c.GetParent(), st.clusterID, name, seq)
	if len(remote) > limits.MaxRunNameBytes {
		return invalid("run %q is too long to hand off: its remote name %q is %d bytes, limit %d", name, remote, len(remote), limits.MaxRunNameBytes)
	}
	st.runSeq = seq
	sp := proto.Clone(c.GetSpec()).(*fsmpb.RunSpec)
	if sp.MaxFailures == 0 {
		sp.MaxFailures = l.cfg.DefaultMaxFailures
	}
	st.handles[name] = &handle{run: name, peer: peer, remote: remote, parent: c.GetParent(), tenant: c.GetTenant(),
		spec: sp, state: HandlePending, counters: &fsmpb.HandleCounters{}, created: st.now, updated: st.now, seq: seq}
	return Result{}
}

// handleStatus applies a STATUS: the peer's counters, never going
// backwards, and a state change; a terminal handle changes no more.
func (l *Ledger) handleStatus(h *handle, c *fsmpb.HandleCmd) Result {
	if HandleTerminal(h.state) {
		return Result{}
	}
	state := c.GetState()
	switch state {
	case HandleAcknowledged, HandleFinished, HandleCancelled:
	case HandleLost:
		if h.acked == 0 {
			return fail(fmt.Errorf("%w: run %q was never acknowledged by peer %q; it cannot be lost", ErrInvalidCommand, h.run, h.peer))
		}
	default:
		return invalid("handle status names state %q, must be %s, %s, %s or %s", state, HandleAcknowledged, HandleFinished, HandleCancelled, HandleLost)
	}
	now := l.st.now
	if x := c.GetCounters(); x != nil {
		k := h.counters
		changed := false
		up := func(dst *uint64, v uint64) {
			if v > *dst {
				*dst, changed = v, true
			}
		}
		up(&k.Total, x.GetTotal())
		up(&k.Done, x.GetDone())
		up(&k.Dead, x.GetDead())
		up(&k.Failures, x.GetFailures())
		up(&k.CancelledItems, x.GetCancelledItems())
		up(&k.ExpectedTotal, x.GetExpectedTotal())
		// Pending, running and blocked go down as work finishes: they are
		// the peer's latest, except that they never undo finished work.
		if k.Pending != x.GetPending() || k.Running != x.GetRunning() || k.Blocked != x.GetBlocked() {
			k.Pending, k.Running, k.Blocked, changed = x.GetPending(), x.GetRunning(), x.GetBlocked(), true
		}
		if x.GetFinishedUnixMs() != 0 && (state == HandleFinished || state == HandleCancelled) && k.FinishedUnixMs == 0 {
			k.FinishedUnixMs, changed = x.GetFinishedUnixMs(), true
		}
		if changed {
			h.updated = now
		}
	}
	if state != h.state {
		if h.acked == 0 {
			h.acked = nonZero(now)
		}
		h.state, h.updated = state, now
		if state == HandleLost {
			h.reason = c.GetReason()
		}
		if state == HandleFinished || state == HandleCancelled {
			h.counters.Pending, h.counters.Running, h.counters.Blocked = 0, 0, 0
		}
	}
	return Result{}
}

// handleRecords returns the snapshot records of every handle, in run name
// order.
func (st *state) handleRecords() []*fsmpb.HandleRecord {
	out := make([]*fsmpb.HandleRecord, 0, len(st.handles))
	for _, h := range st.handles {
		out = append(out, &fsmpb.HandleRecord{Run: h.run, Peer: h.peer, RemoteRun: h.remote, Spec: h.spec, Tenant: h.tenant,
			Parent: h.parent, State: h.state, Reason: h.reason, Code: h.code, Counters: proto.Clone(h.counters).(*fsmpb.HandleCounters),
			CreatedUnixNano: h.created, UpdatedUnixNano: h.updated, Seq: h.seq, Cancel: h.cancel, CancelBy: h.cancelBy,
			Delete: h.del, DeleteBy: h.delBy, AckedUnixNano: h.acked})
	}
	slices.SortFunc(out, func(a, b *fsmpb.HandleRecord) int { return cmpString(a.Run, b.Run) })
	return out
}

// handle restores one handle (snapshot version 10), in run name order.
func (b *builder) handle(rec *fsmpb.SnapshotRecord) error {
	hr := rec.GetHandle()
	if hr == nil {
		return corrupt("expected a handle record")
	}
	if err := checkName("handle run", hr.Run, limits.MaxRunNameBytes); err != nil {
		return corrupt("%v", err)
	}
	if hr.Run <= b.lastHandle && b.handles > 0 {
		return corrupt("handle %q out of order", hr.Run)
	}
	if hr.Peer == "" || hr.RemoteRun == "" || hr.Spec == nil {
		return corrupt("handle %q lacks its peer, remote run or spec", hr.Run)
	}
	switch hr.State {
	case HandlePending, HandleAcknowledged, HandleFinished, HandleCancelled, HandleLost, HandleRefused:
	default:
		return corrupt("handle %q has state %q", hr.Run, hr.State)
	}
	if b.st.runs[hr.Run] != nil {
		return corrupt("handle %q is also a run", hr.Run)
	}
	b.lastHandle = hr.Run
	b.handles++
	k := hr.Counters
	if k == nil {
		k = &fsmpb.HandleCounters{}
	}
	b.st.handles[hr.Run] = &handle{run: hr.Run, peer: hr.Peer, remote: hr.RemoteRun, parent: hr.Parent, tenant: hr.Tenant,
		spec: hr.Spec, state: hr.State, reason: hr.Reason, code: hr.Code, counters: k, created: hr.CreatedUnixNano,
		updated: hr.UpdatedUnixNano, acked: hr.AckedUnixNano, seq: hr.Seq, cancel: hr.Cancel, cancelBy: hr.CancelBy,
		del: hr.Delete, delBy: hr.DeleteBy}
	return nil
}
