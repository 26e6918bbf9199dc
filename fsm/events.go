package fsm

import (
	"fmt"
	"strings"
	"time"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// EventKind classifies a ledger event. The numbers equal those of
// rolloutv1.EventKind, so the API converts with a plain cast.
type EventKind uint8

// The event kinds. See Event for the fields each one sets.
const (
	// EventLeaderElected: a leader committed its epoch. Term is its term,
	// Member its id, Detail names the previous leader.
	EventLeaderElected EventKind = 1
	// EventMemberJoined: the ledger gained a member (SetMember of a new id,
	// or an Epoch naming a leader it did not hold). Member is its id,
	// Detail its addresses.
	EventMemberJoined EventKind = 2
	// EventMemberRemoved: RemoveMember removed a member it held. Detail is
	// the command's reason ("" for an operator's removal; the leader's
	// dead-server cleanup says how long the member was unreachable).
	EventMemberRemoved EventKind = 3
	// EventWorkerRegistered: Register of a worker the ledger did not hold,
	// or of a Lost one (Detail says so).
	EventWorkerRegistered EventKind = 4
	// EventWorkerDeregistered: a worker deregistered itself. Detail is its
	// reason (a drain's notice and outcome), Count the items re-pended.
	EventWorkerDeregistered EventKind = 5
	// EventWorkerEvicted: an operator evicted a worker. Detail is the
	// reason given, Count the items re-pended.
	EventWorkerEvicted EventKind = 6
	// EventWorkerExpired: ExpireWorkers declared a silent worker Lost.
	// Count is the items re-pended, Detail how long it was silent.
	EventWorkerExpired EventKind = 7
	// EventWorkerRemoved: ExpireWorkers removed a Lost worker after the
	// retention (Config.LostWorkerRetention).
	EventWorkerRemoved EventKind = 8
	// EventItemsStolen: Worker (the thief) stole Count items from the
	// worker named in Detail (the victim).
	EventItemsStolen EventKind = 9
	// EventRunCreated: a Submit created Run. Detail describes its spec.
	EventRunCreated EventKind = 10
	// EventRunFinished: Run became finished (nothing Pending or Running,
	// every expected item submitted). Count is its items, Detail how many
	// are Done and Dead. A run that is re-opened (retry_dead, a resubmit)
	// and finishes again records it again.
	EventRunFinished EventKind = 11
	// EventItemDead: Count items of Run went Dead. Detail is the reason of
	// the first; Worker the worker whose failure made them Dead ("" for
	// items submitted Dead). One entry records at most one such event per
	// run and worker: a mass failure does not flood the history.
	EventItemDead EventKind = 12
	// EventRunCancelled: Run was cancelled; Detail says by whom, Count how
	// many items it cancelled.
	EventRunCancelled EventKind = 13
	// EventRunDeleted: Run's records left the ledger; Detail says by whom
	// ("retention" when its retain passed), Count how many items.
	EventRunDeleted EventKind = 14
	// EventConnsRefused: replica Member's listeners refused Count
	// connections over the limits of package internal/connlimit since its last
	// such event. Detail names the listener and the reasons and the
	// source address that was refused most. Only a NoteCmd records it; the
	// leader proposes at most one per listener a minute (see
	// server.Server.ReportRefusals), so a flood never becomes a flood
	// of log entries.
	EventConnsRefused EventKind = 15
	// EventLeaderSteppedAside: leader Member handed leadership away; Detail
	// says why and to whom. Only a NoteCmd records it, proposed by the
	// leader just before the transfer.
	EventLeaderSteppedAside EventKind = 16
	// EventRunStalled: Worker reported an input object of Run missing or
	// changed (HoldCmd) and the run was not stalled: it is now. Detail
	// names the object and the reason, Count the Pending items parked.
	EventRunStalled EventKind = 17
	// EventRunResumed: stalled Run resumes. Detail names the object and
	// why (its probe item read its input; the run was submitted again),
	// Count the parked items put back in the claim queue.
	EventRunResumed EventKind = 18
	// EventRunHandedOff: Run became a handle for the peer named in Member
	// (HandleCmd CREATE); Detail is the remote run name.
	EventRunHandedOff EventKind = 19
	// EventPeerRefused: the peer named in Member refused Run permanently;
	// Detail is its reason. The run is nowhere.
	EventPeerRefused EventKind = 20
	// EventPeerUnreachable and EventPeerReachable: the leader lost or
	// regained the peer named in Member (Detail: the last error). Only a
	// NoteCmd records them, on a change.
	EventPeerUnreachable EventKind = 21
	EventPeerReachable   EventKind = 22
	// EventHandleChanged: the recorded state of handle Run changed (peer in
	// Member); Detail is the new state and its reason.
	EventHandleChanged EventKind = 23
)

// noteKind reports whether k is a kind that NoteCmd records.
func noteKind(k EventKind) bool {
	return k == EventConnsRefused || k == EventLeaderSteppedAside || k == EventPeerUnreachable || k == EventPeerReachable
}

// String returns the kind's lower-case, dash-separated name, or
// "event(N)" for a number that is not a kind.
func (k EventKind) String() string {
	switch k {
	case EventLeaderElected:
		return "leader-elected"
	case EventMemberJoined:
		return "member-joined"
	case EventMemberRemoved:
		return "member-removed"
	case EventWorkerRegistered:
		return "worker-registered"
	case EventWorkerDeregistered:
		return "worker-deregistered"
	case EventWorkerEvicted:
		return "worker-evicted"
	case EventWorkerExpired:
		return "worker-expired"
	case EventWorkerRemoved:
		return "worker-removed"
	case EventItemsStolen:
		return "items-stolen"
	case EventRunCreated:
		return "run-created"
	case EventRunFinished:
		return "run-finished"
	case EventItemDead:
		return "item-dead"
	case EventRunCancelled:
		return "run-cancelled"
	case EventRunDeleted:
		return "run-deleted"
	case EventConnsRefused:
		return "conns-refused"
	case EventLeaderSteppedAside:
		return "leader-stepped-aside"
	case EventRunStalled:
		return "run-stalled"
	case EventRunResumed:
		return "run-resumed"
	case EventRunHandedOff:
		return "run-handed-off"
	case EventPeerRefused:
		return "peer-refused"
	case EventPeerUnreachable:
		return "peer-unreachable"
	case EventPeerReachable:
		return "peer-reachable"
	case EventHandleChanged:
		return "handle-changed"
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Bounds of the event history.
const (
	// DefaultEventHistory is Config.EventHistory's default.
	DefaultEventHistory = 10000
	// MaxEventHistory bounds Config.EventHistory.
	MaxEventHistory = 1 << 20
	// MaxEventDetailBytes bounds an event's Detail (longer reasons are cut,
	// see limits.CleanText).
	MaxEventDetailBytes = 1024
	// MaxEventsPage caps the events one Ledger.Events call returns.
	MaxEventsPage = 1000
)

// Event is one entry of the ledger's event history, as Ledger.Events hands
// it out. Every replica records the same events with the same Seq while it
// applies the log.
type Event struct {
	// Seq numbers events from 1, without gaps, over the ledger's whole
	// life; it never restarts (not after a snapshot, not when the bound
	// drops old events).
	Seq uint64
	// Time is the stamped time of the log entry that caused the event (UTC).
	Time time.Time
	// Term is the ledger's epoch when the event happened.
	Term   uint64
	Kind   EventKind
	Run    string
	Worker string
	Member string
	Detail string
	Count  uint64
}

// event is the ledger's record of an Event.
type event struct {
	seq    uint64
	at     int64
	term   uint64
	kind   EventKind
	run    string
	worker string
	member string
	detail string
	count  uint64
}

func (e *event) copyOut() Event {
	return Event{Seq: e.seq, Time: unixTime(e.at), Term: e.term, Kind: e.kind, Run: e.run,
		Worker: e.worker, Member: e.member, Detail: e.detail, Count: e.count}
}

// eventLog is the bounded history: evs holds the newest events, oldest
// first, with consecutive seqs ending at seq (the newest ever recorded).
// Events are only appended and dropped from the front; an event is never
// changed once the Apply that recorded it has returned, so snapshots share
// the slice.
type eventLog struct {
	evs []event
	seq uint64
}

// first returns the seq of the oldest event held, 0 when none.
func (e *eventLog) first() uint64 {
	if len(e.evs) == 0 {
		return 0
	}
	return e.evs[0].seq
}

// trim drops the oldest events beyond bound.
func (e *eventLog) trim(bound int) {
	if n := len(e.evs) - bound; n > 0 {
		// Not cleared: a snapshot may still read them. The backing array
		// is replaced once appends exhaust its capacity, so memory stays
		// within a small multiple of the bound.
		e.evs = e.evs[n:]
	}
}

// eventScratch is per-Apply bookkeeping of the event recorder; it is reset
// when an Apply ends and is never part of the replicated state.
type eventScratch struct {
	// ch is closed by the Apply (or Restore) that records events; see
	// EventSignal.
	ch chan struct{}
	// recorded is set when the current Apply recorded an event.
	recorded bool
	// dead maps a run and worker to the seq of the EventItemDead this
	// Apply recorded for them, so that later deaths in the same entry add
	// to its count.
	dead map[deadKey]uint64
}

type deadKey struct{ run, worker string }

// record appends an event stamped with the ledger's clock and epoch, drops
// the oldest beyond the bound, and returns its seq. detail is cleaned and
// bounded (limits.CleanText).
func (l *Ledger) record(kind EventKind, run, worker, member, detail string, count uint64) uint64 {
	st := l.st
	st.events.seq++
	st.events.evs = append(st.events.evs, event{
		seq: st.events.seq, at: st.now, term: st.epoch, kind: kind,
		run: run, worker: worker, member: member,
		detail: limits.CleanText(detail, MaxEventDetailBytes), count: count,
	})
	st.events.trim(l.cfg.EventHistory)
	l.ev.recorded = true
	return st.events.seq
}

// recordItemsDead records that n items of run went Dead, adding to the
// EventItemDead this Apply already recorded for run and worker if it is
// still held. Command handlers that make items Dead call it.
func (l *Ledger) recordItemsDead(run, worker, reason string, n uint64) {
	if n == 0 {
		return
	}
	k := deadKey{run: run, worker: worker}
	if seq, ok := l.ev.dead[k]; ok {
		if first := l.st.events.first(); first != 0 && seq >= first {
			e := &l.st.events.evs[seq-first]
			e.count += n
			if reason = limits.CleanText(reason, MaxEventDetailBytes); reason != e.detail && !strings.HasSuffix(e.detail, otherReasons) {
				e.detail = limits.CleanText(e.detail+otherReasons, MaxEventDetailBytes)
			}
			return
		}
	}
	if l.ev.dead == nil {
		l.ev.dead = make(map[deadKey]uint64)
	}
	l.ev.dead[k] = l.record(EventItemDead, run, worker, "", reason, n)
}

// otherReasons ends the detail of an EventItemDead whose items died for
// more than one reason.
const otherReasons = " (and other reasons)"

// endEventsLocked ends an Apply (or Restore) for the recorder: it wakes the
// EventSignal waiters if events were recorded and resets the scratch.
func (l *Ledger) endEventsLocked() {
	if l.ev.recorded {
		close(l.ev.ch)
		l.ev.ch = make(chan struct{})
	}
	l.ev.recorded = false
	clear(l.ev.dead)
}

// eventsBefore is what a command spec's events function needs to know of the ledger as it was
// before a command.
type eventsBefore struct {
	epoch    uint64
	leader   string
	existed  bool        // the member, worker or run the command names was held
	lost     bool        // that worker was Lost
	finished bool        // that run was finished
	workers  []wasWorker // ExpireWorkers: every worker
	// handleState and handleIntent (HandleCmd): the handle's state and
	// whether a cancel was already requested.
	handleState  string
	handleIntent bool
	handleDelBy  string // who asked for the handle's delete
}

type wasWorker struct {
	id            string
	lastHeartbeat int64
	owned         int
}

// applyRecorded applies one command and records the events it caused, both
// as the command's spec (registry.go) declares. Events come only from
// commands that applied (a refused command records nothing), in a fixed
// order, so every replica records the same ones.
func (l *Ledger) applyRecorded(term uint64, c *fsmpb.Command) Result {
	s := commands.spec(c)
	if s == nil {
		return fail(fmt.Errorf("%w: command has no operation set", ErrInvalidCommand))
	}
	if s.check != nil {
		if err := s.check(c); err != nil {
			return fail(err)
		}
	}
	b := eventsBefore{epoch: l.st.epoch, leader: l.st.leaderID}
	if s.before != nil {
		b = s.before(l, c, b)
	}
	res := s.apply(l, term, c)
	if res.Err == nil && s.events != nil {
		s.events(l, c, b, res)
	}
	return res
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

// recordFinished records EventRunFinished when the named run was not
// finished before the command and is now.
func (l *Ledger) recordFinished(name string, b eventsBefore) {
	r := l.st.runs[name]
	if r == nil || r.finished == 0 || (b.existed && b.finished) {
		return
	}
	l.record(EventRunFinished, name, "", "", fmt.Sprintf("%d done, %d dead", r.done, r.dead), r.total)
}

// recordExpire records one EventWorkerExpired per worker declared Lost and
// one EventWorkerRemoved per worker removed, in the result's (sorted) order.
func (l *Ledger) recordExpire(c *fsmpb.ExpireWorkersCmd, b eventsBefore, res Result) {
	if len(res.Expired) == 0 && len(res.Removed) == 0 {
		return
	}
	was := make(map[string]wasWorker, len(b.workers))
	for _, w := range b.workers {
		was[w.id] = w
	}
	now := l.st.now
	timeout := time.Duration(c.GetTimeoutNano())
	for _, id := range res.Expired {
		w := was[id]
		l.record(EventWorkerExpired, "", id, "",
			fmt.Sprintf("silent for %s (failure timeout %s)", time.Duration(now-w.lastHeartbeat), timeout), uint64(w.owned))
	}
	for _, id := range res.Removed {
		w := was[id]
		l.record(EventWorkerRemoved, "", id, "",
			fmt.Sprintf("lost and silent for %s (retention %d × %s)", time.Duration(now-w.lastHeartbeat), l.cfg.LostWorkerRetention, timeout), 0)
	}
}

func memberDetail(m Member) string {
	var f []string
	if m.RaftAddr != "" {
		f = append(f, "raft "+m.RaftAddr)
	}
	if m.GRPCAddr != "" {
		f = append(f, "grpc "+m.GRPCAddr)
	}
	return strings.Join(f, ", ")
}

// runDetail describes a run's spec for its EventRunCreated.
func (l *Ledger) runDetail(name string) string {
	r := l.st.runs[name]
	if r == nil {
		return ""
	}
	var f []string
	// The tenant and priority when not the defaults (events of runs
	// without tenants read as before).
	if t := r.ten.name; t != DefaultTenant {
		f = append(f, "tenant "+t)
	}
	if p := priorityOf(r.spec); p != DefaultPriority {
		f = append(f, fmt.Sprintf("priority %d", p))
	}
	if k := r.spec.GetKind(); k != "" {
		f = append(f, "kind "+k)
	}
	if m := r.spec.GetModel(); m != "" {
		f = append(f, "model "+m)
	}
	if t := r.spec.GetTotal(); t > 0 {
		f = append(f, fmt.Sprintf("total %d", t))
	}
	f = append(f, fmt.Sprintf("max failures %d", r.spec.GetMaxFailures()))
	return strings.Join(f, ", ")
}

// Events returns at most limit events with Seq > after, oldest first, and
// only those of run when run is not "" (limit <= 0 or above MaxEventsPage
// means MaxEventsPage). first and last are the seqs of the oldest and newest
// events the history holds (0, 0 when it holds none); first > after+1 means
// events after after were dropped by the bound (Config.EventHistory). It
// holds the read lock for one pass over at most the history.
func (l *Ledger) Events(after uint64, limit int, run string) (events []Event, first, last uint64) {
	if limit <= 0 || limit > MaxEventsPage {
		limit = MaxEventsPage
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	el := &l.st.events
	first = el.first()
	if first == 0 {
		return nil, 0, 0
	}
	last = el.seq
	i := 0
	if after >= first {
		if after >= last {
			return nil, first, last
		}
		i = int(after - first + 1)
	}
	for ; i < len(el.evs) && len(events) < limit; i++ {
		e := &el.evs[i]
		if run != "" && e.run != run {
			continue
		}
		events = append(events, e.copyOut())
	}
	return events, first, last
}

// EventSignal returns a channel that the next Apply which records an event
// (or a Restore) closes; a fresh channel is made after each close. A
// long-poller takes the channel before it reads Events, so no event is
// missed:
//
//	for {
//		ch := l.EventSignal()
//		if evs, _, _ := l.Events(after, 100, ""); len(evs) > 0 { return evs }
//		select { case <-ch: case <-ctx.Done(): return nil }
//	}
func (l *Ledger) EventSignal() <-chan struct{} {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.ev.ch
}

// writeEvents writes one SnapshotRecord per event, oldest first.
func writeEvents(sw *snapshotWriter, evs []event) error {
	er := &fsmpb.EventRecord{}
	rec := &fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Event{Event: er}}
	for i := range evs {
		e := &evs[i]
		er.Seq, er.UnixNano, er.Term, er.Kind = e.seq, e.at, e.term, uint32(e.kind)
		er.Run, er.Worker, er.Member, er.Detail, er.Count = e.run, e.worker, e.member, e.detail, e.count
		if err := sw.record(rec); err != nil {
			return err
		}
	}
	return nil
}

// event adds an event record: seqs must be consecutive, the kind set and
// fit an EventKind, and the text fields what the ledger records.
func (b *builder) event(rec *fsmpb.SnapshotRecord) error {
	er := rec.GetEvent()
	if er == nil {
		return corrupt("expected an event record")
	}
	el := &b.st.events
	if n := len(el.evs); (n == 0 && er.Seq == 0) || (n > 0 && er.Seq != el.evs[n-1].seq+1) {
		return corrupt("event seq %d does not follow the one before it", er.Seq)
	}
	if er.Kind == 0 || er.Kind > 255 {
		return corrupt("event %d has kind %d", er.Seq, er.Kind)
	}
	for _, f := range []struct {
		what string
		s    string
		max  int
	}{{"run", er.Run, limits.MaxRunNameBytes}, {"worker", er.Worker, limits.MaxWorkerIDBytes}, {"member", er.Member, limits.MaxWorkerIDBytes}, {"detail", er.Detail, MaxEventDetailBytes}} {
		if err := checkText("event "+f.what, f.s, f.max); err != nil {
			return corrupt("event %d: %v", er.Seq, err)
		}
	}
	el.evs = append(el.evs, event{seq: er.Seq, at: er.UnixNano, term: er.Term, kind: EventKind(er.Kind),
		run: er.Run, worker: er.Worker, member: er.Member, detail: er.Detail, count: er.Count})
	return nil
}

// finishEvents checks that the events end at the header's event_seq.
func (b *builder) finishEvents() error {
	el := &b.st.events
	if n := len(el.evs); n > 0 && el.evs[n-1].seq != el.seq {
		return corrupt("the newest event has seq %d, the header's event_seq is %d", el.evs[n-1].seq, el.seq)
	}
	return nil
}
