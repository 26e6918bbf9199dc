package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
	"lukechampine.com/blake3"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// Snapshot stream format (version 9, or 10 when the ledger holds handles;
// version 10 added federation handles (handles.go): HandleRecords after
// the tenants and the header's handles. A ledger without handles still
// writes version 9, byte for byte as before federation, so that a
// coordinator without --peers writes what it always wrote; a version 9
// reader refuses a version 10 stream instead of dropping its handles.
// Version 9 added the runs whose store
// is unreachable, RunStallRecord.store and RunRecord.store_suspects: a
// version 8 reader would have read such a stall as a missing input and
// dropped the suspects, isolating runs differently from a replica that
// applied the log; version 8 added tenants, their
// TenantRecords after the revocations and the header's tenants and
// usage_at_unix_nano, and RunRecord.served: a version 7 reader would have
// dropped them and chosen claims differently from a replica that applied
// the log; version 7 added range runs,
// RunRecord.ranged and record_seq and ItemRecord.count, base and started:
// a version 6 reader would have read each range as one item; version 6
// added the revocation list,
// RevocationRecords after the events, and the known admin certificates in
// the header: a version 5 reader would have dropped them and re-admitted
// revoked certificates; version 5 added a stalled run's
// record, RunRecord.stall, whose Pending items are in its parked list: a
// version 4 reader would have put them back in the claim queue and lost
// the stall; version 3 added run object tables,
// item references and summaries, cancelled runs, and the header's run_seq:
// a version 2 reader would have dropped them, so the version was raised and
// older readers refuse the stream instead of misreading it; version 4 added
// the models a worker serves, WorkerRecord.models, for the same reason: a
// version 3 reader would have let the worker claim every model):
//
//	"RLDG" | uint32 big-endian version | uvarint n | SnapshotHeader (n bytes)
//	| (uvarint n | SnapshotRecord (n bytes))*  | blake3-256 of all bytes before it
//
// Records come in this order: members sorted by id; runs in creation order;
// items; workers sorted by id; events in seq order (version 2: version 1
// streams hold no events, and Restore still reads them). Items are written run by run (creation order),
// each run's non-Running items in ascending index, followed by every
// Running item of every run in global claim order, which rebuilds each
// worker's claim-ordered list. ItemRecord.pending_seq is the item's 1-based
// position in the pending queue (version 8: the queued records run by run in
// creation order, each run's in its queue order; before, one global FIFO
// order, which keeps each run's order); the parked items of stalled runs (version
// 5) follow the queue's, run by run in creation order, each run's in its
// parked order. Messages are marshalled deterministically,
// so two ledgers that applied the same log write identical bytes, and
// Persist after Restore reproduces the restored stream.
const (
	snapshotMagic   = "RLDG"
	snapshotVersion = 9
	// snapshotVersionHandles is the version written when the ledger holds
	// handles; Restore reads up to it.
	snapshotVersionHandles = 10
	// minSnapshotVersion is the oldest version Restore reads (version 1:
	// the same records, without events).
	minSnapshotVersion = 1
	maxHeaderBytes     = 1 << 20
	maxRecordBytes     = 1 << 30
	readChunkBytes     = 1 << 20
	maxRecordCount     = 1 << 40
)

type runSnap struct {
	name      string
	spec      *fsmpb.RunSpec
	seq       uint64
	created   int64
	finished  int64
	failures  uint64
	cancelled bool
	objects   []string // shared: only appended to by the ledger
	stall     *fsmpb.RunStallRecord
	ranged    bool
	recSeq    uint64
	served    uint64
	suspects  []string // shared: replaced, never modified in place
}

type tenantSnap struct {
	name                  string
	weight                uint32
	maxQueued, maxRunning uint64
	maxPriority           uint32
	usage                 uint64
	set                   bool
}

// itemSnap is an item as a snapshot holds it. Its rare fields are the
// item's itemExt itself: the ledger never changes an itemExt it handed out
// (item.ext copies on write), so sharing it costs a pointer, not a copy.
type itemSnap struct {
	run        string
	id         string
	index      uint64
	x          *itemExt
	owner      string
	attempt    uint64
	pendingSeq uint64
	created    int64
	updated    int64
	claimed    int64
	failures   uint32
	state      State
	dependsOn  []*item // shared: never modified; only the ids are read
	pref, rref ref
	rsum       [hashBytes]byte
	// n, base and started are a range record's (ranges.go).
	n, base, started uint64
}

type workerSnap struct {
	id            string
	registered    int64
	lastHeartbeat int64
	backlog       uint32
	itemsPerSec   float64
	executing     []execKey // shared: never modified in place
	lost          bool
	completed     uint64
	kinds         []string // shared: never modified in place
	models        []string // shared: never modified in place
}

// snapshot is a point-in-time copy of the ledger. Item byte slices are
// shared with the ledger, which only ever replaces them.
type snapshot struct {
	epoch    uint64
	now      int64
	leaderID string
	members  []Member
	runs     []runSnap
	items    []itemSnap
	workers  []workerSnap
	events   []event // shared with the ledger: held events never change
	eventSeq uint64
	runSeq   uint64
	revoked  []Revocation // shared: only appended to by the ledger
	admins   []string     // sorted names of the known admins
	adminSer []string     // their serials
	tenants  []tenantSnap // sorted by name
	usageAt  int64
	cluster  string
	handles  []*fsmpb.HandleRecord // sorted by run name; none: version 9
}

var _ raft.FSMSnapshot = (*snapshot)(nil)

// Snapshot returns a point-in-time copy of the ledger for Persist. It copies
// every item's fixed-size fields (not payloads or results) and sorts the
// Running items by claim order: O(items + running·log running).
func (l *Ledger) Snapshot() (raft.FSMSnapshot, error) {
	// The write lock: pending positions are staged in item.seq below.
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st.snapshot(), nil
}

func (st *state) snapshot() *snapshot {
	s := &snapshot{epoch: st.epoch, now: st.now, leaderID: st.leaderID, runSeq: st.runSeq}
	s.events, s.eventSeq = st.events.evs[:len(st.events.evs):len(st.events.evs)], st.events.seq
	s.members = make([]Member, 0, len(st.members))
	for _, m := range st.members {
		s.members = append(s.members, m)
	}
	slices.SortFunc(s.members, func(a, b Member) int { return cmpString(a.ID, b.ID) })

	// Stage each pending item's queue position in seq (0 for every pending
	// item otherwise), and clear it again below.
	rank := uint64(0)
	st.pending.each(st.runOrder, func(it *item) {
		rank++
		it.seq = rank
	})
	for _, r := range st.stalled {
		p := r.parkedList()
		for it := p.front(); it != nil; it = p.after(it) {
			rank++
			it.seq = rank
		}
	}
	s.runs = make([]runSnap, len(st.runOrder))
	s.items = make([]itemSnap, 0, st.items)
	var running []*item
	for i, r := range st.runOrder {
		s.runs[i] = runSnap{
			name: r.name, spec: proto.Clone(r.spec).(*fsmpb.RunSpec), seq: r.seq,
			created: r.created, finished: r.finished, failures: r.failures,
			cancelled: r.cancelled, objects: r.objects[:len(r.objects):len(r.objects)],
			stall: stallRecord(r.stall), ranged: r.ranged, recSeq: r.recSeq, served: r.served,
			suspects: r.storeSuspects,
		}
		r.byIndex.each(func(it *item) bool {
			if it.state == StateRunning {
				running = append(running, it)
				return true
			}
			s.items = append(s.items, snapItem(it))
			return true
		})
	}
	st.pending.each(st.runOrder, func(it *item) { it.seq = 0 })
	for _, r := range st.stalled {
		p := r.parkedList()
		for it := p.front(); it != nil; it = p.after(it) {
			it.seq = 0
		}
	}
	slices.SortFunc(running, func(a, b *item) int { return cmpU64(a.seq, b.seq) })
	for _, it := range running {
		is := snapItem(it)
		is.pendingSeq = 0
		s.items = append(s.items, is)
	}

	s.workers = make([]workerSnap, 0, len(st.workers))
	for _, w := range st.workers {
		s.workers = append(s.workers, workerSnap{
			id: w.id, registered: w.registered, lastHeartbeat: w.lastHeartbeat,
			backlog: w.backlog, itemsPerSec: w.itemsPerSec, executing: w.executing,
			lost: w.lost, completed: w.completed, kinds: w.kinds, models: w.models,
		})
	}
	slices.SortFunc(s.workers, func(a, b workerSnap) int { return cmpString(a.id, b.id) })
	s.revoked = st.revoked[:len(st.revoked):len(st.revoked)]
	for name := range st.admins {
		s.admins = append(s.admins, name)
	}
	slices.Sort(s.admins)
	for _, name := range s.admins {
		s.adminSer = append(s.adminSer, st.admins[name])
	}
	s.usageAt = st.usageAt
	s.cluster = st.clusterID
	s.tenants = make([]tenantSnap, 0, len(st.tenants))
	for _, t := range st.tenants {
		s.tenants = append(s.tenants, tenantSnap{name: t.name, weight: t.weight, maxQueued: t.maxQueued,
			maxRunning: t.maxRunning, maxPriority: t.maxPriority, usage: t.usage, set: t.set})
	}
	slices.SortFunc(s.tenants, func(a, b tenantSnap) int { return cmpString(a.name, b.name) })
	if len(st.handles) > 0 {
		s.handles = st.handleRecords()
	}
	return s
}

// version is the stream version s is written in: snapshotVersion, or
// snapshotVersionHandles when it holds handles.
func (s *snapshot) version() uint32 {
	if len(s.handles) > 0 {
		return snapshotVersionHandles
	}
	return snapshotVersion
}

func snapItem(it *item) itemSnap {
	is := itemSnap{
		run: it.run.name, id: it.id, index: it.index, x: it.x, owner: it.owner, attempt: it.attempt,
		created: it.created, updated: it.updated, claimed: it.claimed,
		failures: it.failures, state: it.state, dependsOn: it.dependsOn(),
		pref: it.pref, rref: it.rref, rsum: it.rsum,
		n: it.n, base: it.base, started: it.started,
	}
	if it.state == StatePending {
		is.pendingSeq = it.seq
	}
	return is
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Persist writes the snapshot stream to sink and closes it, or cancels the
// sink and returns the write error.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.writeTo(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("fsm: persist snapshot: %w", err)
	}
	return sink.Close()
}

// Release is a no-op: the snapshot holds only garbage-collected copies.
func (s *snapshot) Release() {}

// snapshotWriter frames deterministic records and hashes everything written.
type snapshotWriter struct {
	w    *bufio.Writer
	opts proto.MarshalOptions
	buf  []byte
	len  [binary.MaxVarintLen64]byte
}

func (sw *snapshotWriter) record(m proto.Message) error {
	var err error
	sw.buf, err = sw.opts.MarshalAppend(sw.buf[:0], m)
	if err != nil {
		return err
	}
	n := binary.PutUvarint(sw.len[:], uint64(len(sw.buf)))
	if _, err := sw.w.Write(sw.len[:n]); err != nil {
		return err
	}
	_, err = sw.w.Write(sw.buf)
	return err
}

// writeTo writes the whole stream, checksum included, to w.
func (s *snapshot) writeTo(w io.Writer) error {
	h := blake3.New(32, nil)
	sw := &snapshotWriter{
		w:    bufio.NewWriterSize(io.MultiWriter(w, h), 1<<16),
		opts: proto.MarshalOptions{Deterministic: true},
	}
	var pre [8]byte
	copy(pre[:4], snapshotMagic)
	binary.BigEndian.PutUint32(pre[4:], s.version())
	if _, err := sw.w.Write(pre[:]); err != nil {
		return err
	}
	// The owners' table: every owner of an item, in first-seen order.
	ownerIdx := map[string]uint32{}
	var owners []string
	for i := range s.items {
		if o := s.items[i].owner; o != "" {
			if _, ok := ownerIdx[o]; !ok {
				owners = append(owners, o)
				ownerIdx[o] = uint32(len(owners))
			}
		}
	}
	hdr := &fsmpb.SnapshotHeader{
		Owners:          owners,
		Version:         s.version(),
		Epoch:           s.epoch,
		NowUnixNano:     s.now,
		Runs:            uint64(len(s.runs)),
		Items:           uint64(len(s.items)),
		Workers:         uint64(len(s.workers)),
		Members:         uint64(len(s.members)),
		LeaderId:        s.leaderID,
		Events:          uint64(len(s.events)),
		EventSeq:        s.eventSeq,
		RunSeq:          s.runSeq,
		Revocations:     uint64(len(s.revoked)),
		Admins:          s.admins,
		AdminSerials:    s.adminSer,
		Tenants:         uint64(len(s.tenants)),
		UsageAtUnixNano: s.usageAt,
		ClusterId:       s.cluster,
		Handles:         uint64(len(s.handles)),
	}
	if err := sw.record(hdr); err != nil {
		return err
	}

	mr := &fsmpb.MemberRecord{}
	rec := &fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Member{Member: mr}}
	for _, m := range s.members {
		mr.Id, mr.RaftAddr, mr.GrpcAddr = m.ID, m.RaftAddr, m.GRPCAddr
		if err := sw.record(rec); err != nil {
			return err
		}
	}
	rr := &fsmpb.RunRecord{}
	rec.Rec = &fsmpb.SnapshotRecord_Run{Run: rr}
	for _, r := range s.runs {
		rr.Name, rr.Spec, rr.CreatedUnixNano, rr.Seq, rr.FinishedUnixNano, rr.Failures =
			r.name, r.spec, r.created, r.seq, r.finished, r.failures
		rr.Cancelled, rr.Objects, rr.Stall = r.cancelled, r.objects, r.stall
		rr.Ranged, rr.RecordSeq, rr.Served = r.ranged, r.recSeq, r.served
		rr.StoreSuspects = r.suspects
		if err := sw.record(rec); err != nil {
			return err
		}
	}
	ir := &fsmpb.ItemRecord{}
	rec.Rec = &fsmpb.SnapshotRecord_Item{Item: ir}
	var prevRun string
	var prevCreated, prevUpdated, prevClaimed int64
	for i := range s.items {
		it := &s.items[i]
		var x itemExt
		if it.x != nil {
			x = *it.x
		}
		ir.Run, ir.Id, ir.Index, ir.Payload = it.run, []byte(it.id), it.index, x.payload
		if i > 0 && it.run == prevRun {
			ir.Run = ""
		}
		prevRun = it.run
		ir.State, ir.OwnerIdx, ir.Attempt, ir.Failures = uint32(it.state), ownerIdx[it.owner], it.attempt, it.failures
		ir.Result, ir.Reason = x.result, x.reason
		ir.CreatedDelta, ir.UpdatedDelta, ir.ClaimedDelta = it.created-prevCreated, it.updated-prevUpdated, it.claimed-prevClaimed
		prevCreated, prevUpdated, prevClaimed = it.created, it.updated, it.claimed
		ir.PendingSeq = it.pendingSeq
		ir.Count, ir.Base, ir.Started = it.n, it.base, it.started
		ir.PayloadRef, ir.ResultRef, ir.Summary = nil, nil, x.summary
		if it.pref.obj != 0 {
			ir.PayloadRef = &fsmpb.RefRecord{Obj: it.pref.obj, Offset: it.pref.off, Length: uint64(it.pref.n), Blake3: x.psum}
		}
		if it.rref.obj != 0 {
			ir.ResultRef = &fsmpb.RefRecord{Obj: it.rref.obj, Offset: it.rref.off, Length: uint64(it.rref.n), Blake3: it.rsum[:]}
		}
		ir.DependsOn = ir.DependsOn[:0]
		for _, d := range it.dependsOn {
			ir.DependsOn = append(ir.DependsOn, []byte(d.id))
		}
		if len(ir.DependsOn) == 0 {
			ir.DependsOn = nil
		}
		if err := sw.record(rec); err != nil {
			return err
		}
	}
	wr := &fsmpb.WorkerRecord{}
	rec.Rec = &fsmpb.SnapshotRecord_Worker{Worker: wr}
	for _, w := range s.workers {
		wr.Id, wr.LastHeartbeatUnixNano, wr.Backlog, wr.ItemsPerSec = w.id, w.lastHeartbeat, w.backlog, w.itemsPerSec
		wr.Lost, wr.Completed, wr.RegisteredUnixNano = w.lost, w.completed, w.registered
		wr.Kinds, wr.Models = w.kinds, w.models
		wr.Executing = wr.Executing[:0]
		for _, k := range w.executing {
			wr.Executing = append(wr.Executing, &fsmpb.ItemKey{Run: k.run, Id: []byte(k.id), Attempt: k.attempt})
		}
		if len(wr.Executing) == 0 {
			wr.Executing = nil
		}
		if err := sw.record(rec); err != nil {
			return err
		}
	}
	if err := writeEvents(sw, s.events); err != nil {
		return err
	}
	vr := &fsmpb.RevocationRecord{}
	rec.Rec = &fsmpb.SnapshotRecord_Revocation{Revocation: vr}
	for _, r := range s.revoked {
		vr.Serial, vr.Name, vr.Holder, vr.Role, vr.By, vr.Reason = r.Serial, r.Name, r.Holder, r.Role, r.By, r.Reason
		vr.UnixNano = r.At.UnixNano()
		if r.At.IsZero() {
			vr.UnixNano = 0
		}
		if err := sw.record(rec); err != nil {
			return err
		}
	}
	tr := &fsmpb.TenantRecord{}
	rec.Rec = &fsmpb.SnapshotRecord_Tenant{Tenant: tr}
	for _, t := range s.tenants {
		tr.Name, tr.Weight, tr.MaxQueued, tr.MaxRunning, tr.Usage, tr.Set = t.name, t.weight, t.maxQueued, t.maxRunning, t.usage, t.set
		tr.MaxPriority = t.maxPriority // 0 (none) is not encoded: older snapshots' bytes stay
		if err := sw.record(rec); err != nil {
			return err
		}
	}
	for _, h := range s.handles {
		rec.Rec = &fsmpb.SnapshotRecord_Handle{Handle: h}
		if err := sw.record(rec); err != nil {
			return err
		}
	}
	if err := sw.w.Flush(); err != nil {
		return err
	}
	_, err := w.Write(h.Sum(nil))
	return err
}

// Restore replaces the whole ledger with the snapshot read from rc, and
// closes rc. The stream is decoded and checked into a fresh state that is
// swapped in only on full success; on any error (wrapping
// ErrCorruptSnapshot) the ledger is unchanged.
func (l *Ledger) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := decodeSnapshot(rc)
	if err != nil {
		return err
	}
	st.events.trim(l.cfg.EventHistory)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st = st
	// Wake long-pollers: the pending set and the events were replaced
	// wholesale.
	l.addedPending = true
	l.signalLocked()
	l.ev.recorded = true
	l.endEventsLocked()
	return nil
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorruptSnapshot}, args...)...)
}

// snapshotReader reads framed records and hashes every byte it consumes.
type snapshotReader struct {
	r   *bufio.Reader
	h   *blake3.Hasher
	buf []byte
	off int64
}

func (sr *snapshotReader) readN(n uint64, what string) ([]byte, error) {
	// Grow in chunks, so a lying length cannot force a large allocation
	// before the stream runs out.
	buf := sr.buf[:0]
	for uint64(len(buf)) < n {
		start := len(buf)
		chunk := int(min(n-uint64(start), readChunkBytes))
		buf = slices.Grow(buf, chunk)[:start+chunk]
		if _, err := io.ReadFull(sr.r, buf[start:]); err != nil {
			return nil, corrupt("truncated in %s at byte %d: %v", what, sr.off+int64(start), err)
		}
	}
	sr.buf = buf
	sr.h.Write(buf)
	sr.off += int64(n)
	return buf, nil
}

func (sr *snapshotReader) uvarint(what string) (uint64, error) {
	var b [binary.MaxVarintLen64]byte
	for i := range b {
		c, err := sr.r.ReadByte()
		if err != nil {
			return 0, corrupt("truncated in the length of %s at byte %d: %v", what, sr.off, err)
		}
		b[i] = c
		if c < 0x80 {
			v, n := binary.Uvarint(b[:i+1])
			if n <= 0 {
				return 0, corrupt("bad length of %s at byte %d", what, sr.off)
			}
			sr.h.Write(b[:i+1])
			sr.off += int64(i + 1)
			return v, nil
		}
	}
	return 0, corrupt("overlong length of %s at byte %d", what, sr.off)
}

func (sr *snapshotReader) message(m proto.Message, max uint64, what string) error {
	n, err := sr.uvarint(what)
	if err != nil {
		return err
	}
	if n > max {
		return corrupt("%s claims %d bytes, limit %d", what, n, max)
	}
	b, err := sr.readN(n, what)
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return corrupt("%s does not decode: %v", what, err)
	}
	return nil
}

// decodeSnapshot reads and checks a whole stream into a fresh state.
func decodeSnapshot(r io.Reader) (*state, error) {
	sr := &snapshotReader{r: bufio.NewReaderSize(r, 1<<16), h: blake3.New(32, nil)}
	pre, err := sr.readN(8, "preamble")
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(pre[:4], []byte(snapshotMagic)) {
		return nil, corrupt("bad magic %q", pre[:4])
	}
	v := binary.BigEndian.Uint32(pre[4:])
	if v < minSnapshotVersion || v > snapshotVersionHandles {
		return nil, corrupt("unsupported version %d (want %d to %d)", v, minSnapshotVersion, snapshotVersionHandles)
	}
	hdr := &fsmpb.SnapshotHeader{}
	if err := sr.message(hdr, maxHeaderBytes, "header"); err != nil {
		return nil, err
	}
	if hdr.Version != v {
		return nil, corrupt("header version %d (preamble %d)", hdr.Version, v)
	}
	if v < 6 && (hdr.Revocations != 0 || len(hdr.Admins) != 0 || len(hdr.AdminSerials) != 0) {
		return nil, corrupt("a version %d header claims %d revocations and %d admins (version 6 fields)", v, hdr.Revocations, len(hdr.Admins))
	}
	if v < 8 && (hdr.Tenants != 0 || hdr.UsageAtUnixNano != 0) {
		return nil, corrupt("a version %d header claims %d tenants (a version 8 field)", v, hdr.Tenants)
	}
	if v < snapshotVersionHandles && hdr.Handles != 0 {
		return nil, corrupt("a version %d header claims %d handles (a version %d field)", v, hdr.Handles, snapshotVersionHandles)
	}
	if v == snapshotVersionHandles && hdr.Handles == 0 {
		return nil, corrupt("a version %d header claims no handles (a ledger without handles writes version %d)", v, snapshotVersion)
	}
	if id := hdr.GetClusterId(); id != "" {
		if err := checkHexID("header cluster_id", id); err != nil {
			return nil, corrupt("%v", err)
		}
	}
	if len(hdr.Admins) != len(hdr.AdminSerials) {
		return nil, corrupt("header has %d admins and %d admin serials", len(hdr.Admins), len(hdr.AdminSerials))
	}
	if v < 2 && (hdr.Events != 0 || hdr.EventSeq != 0) {
		return nil, corrupt("a version %d header claims %d events (event_seq %d)", v, hdr.Events, hdr.EventSeq)
	}
	for _, c := range []struct {
		what string
		n    uint64
	}{{"members", hdr.Members}, {"runs", hdr.Runs}, {"items", hdr.Items}, {"workers", hdr.Workers}, {"events", hdr.Events}, {"revocations", hdr.Revocations}, {"tenants", hdr.Tenants}, {"handles", hdr.Handles}} {
		if c.n > maxRecordCount {
			return nil, corrupt("header claims %d %s", c.n, c.what)
		}
	}

	b := newBuilder(hdr)
	rec := &fsmpb.SnapshotRecord{}
	phases := []struct {
		what string
		n    uint64
		add  func(*fsmpb.SnapshotRecord) error
	}{
		{"member", hdr.Members, b.member},
		{"run", hdr.Runs, b.run},
		{"item", hdr.Items, b.item},
		{"worker", hdr.Workers, b.worker},
		{"event", hdr.Events, b.event},
		{"revocation", hdr.Revocations, b.revocation},
		{"tenant", hdr.Tenants, b.tenant},
		{"handle", hdr.Handles, b.handle},
	}
	for _, p := range phases {
		for i := uint64(0); i < p.n; i++ {
			what := fmt.Sprintf("%s record %d", p.what, i)
			rec.Reset()
			if err := sr.message(rec, maxRecordBytes, what); err != nil {
				return nil, err
			}
			if err := p.add(rec); err != nil {
				return nil, fmt.Errorf("%w (%s)", err, what)
			}
		}
	}

	sum := sr.h.Sum(nil)
	var trailer [32]byte
	if _, err := io.ReadFull(sr.r, trailer[:]); err != nil {
		return nil, corrupt("truncated in the checksum at byte %d: %v", sr.off, err)
	}
	if !bytes.Equal(sum, trailer[:]) {
		return nil, corrupt("checksum mismatch")
	}
	if _, err := sr.r.ReadByte(); err != io.EOF {
		return nil, corrupt("data after the checksum at byte %d", sr.off+32)
	}
	return b.finish()
}

// builder assembles a state from snapshot records, checking each against
// those before it.
type builder struct {
	st         *state
	lastMember string
	lastWorker string
	lastRunSeq uint64
	runSeq     uint64 // the header's run_seq (0: an older snapshot)
	// version is the stream's; owners, prevRun and the times undo version
	// 3's item compaction.
	version                   uint32
	lastTenant                string
	tenants                   int
	lastHandle                string
	handles                   int
	owners                    []string
	prevRun                   string
	created, updated, claimed int64
	slab                      []item
	pending                   []*item
	running                   []*item
	// deps holds the dependency ids of the items that have them, resolved
	// by restoreDeps once every item is known.
	deps map[*item][][]byte
}

func newBuilder(hdr *fsmpb.SnapshotHeader) *builder {
	st := newState()
	st.epoch, st.now, st.leaderID = hdr.Epoch, hdr.NowUnixNano, hdr.LeaderId
	st.events.seq = hdr.EventSeq
	for i, name := range hdr.Admins {
		st.admins[name] = hdr.AdminSerials[i]
	}
	st.usageAt = hdr.UsageAtUnixNano
	st.clusterID = hdr.GetClusterId()
	return &builder{st: st, runSeq: hdr.RunSeq, version: hdr.Version, owners: hdr.Owners}
}

func (b *builder) revocation(rec *fsmpb.SnapshotRecord) error {
	r := rec.GetRevocation()
	if r == nil {
		return corrupt("expected a revocation record")
	}
	if (r.Serial == "") == (r.Name == "") || checkSerialHex("serial", r.Serial) != nil {
		return corrupt("revocation of serial %q name %q: exactly one, serial in lowercase hex", r.Serial, r.Name)
	}
	e := Revocation{Serial: r.Serial, Name: r.Name, Holder: r.Holder, Role: r.Role, By: r.By, Reason: r.Reason}
	if r.UnixNano != 0 {
		e.At = unixTime(r.UnixNano)
	}
	b.st.revoked = append(b.st.revoked, e)
	return nil
}

// tenant restores a tenant's record (version 8), in name order.
func (b *builder) tenant(rec *fsmpb.SnapshotRecord) error {
	tr := rec.GetTenant()
	if tr == nil {
		return corrupt("expected a tenant record")
	}
	if err := checkTenantName("tenant name", tr.Name); err != nil {
		return corrupt("%v", err)
	}
	if tr.Name <= b.lastTenant && b.tenants > 0 {
		return corrupt("tenant %q out of order", tr.Name)
	}
	if tr.Weight < 1 || tr.Weight > MaxTenantWeight {
		return corrupt("tenant %q has weight %d", tr.Name, tr.Weight)
	}
	if tr.MaxPriority > MaxPriority {
		return corrupt("tenant %q has max_priority %d", tr.Name, tr.MaxPriority)
	}
	b.lastTenant = tr.Name
	b.tenants++
	t := b.st.tenant(tr.Name)
	t.weight, t.maxQueued, t.maxRunning, t.usage, t.set = tr.Weight, tr.MaxQueued, tr.MaxRunning, tr.Usage, tr.Set
	t.maxPriority = tr.MaxPriority
	return nil
}

func (b *builder) member(rec *fsmpb.SnapshotRecord) error {
	m := rec.GetMember()
	if m == nil {
		return corrupt("expected a member record")
	}
	if m.Id == "" || (len(b.st.members) > 0 && m.Id <= b.lastMember) {
		return corrupt("member id %q is empty or out of order", m.Id)
	}
	b.lastMember = m.Id
	b.st.members[m.Id] = Member{ID: m.Id, RaftAddr: m.RaftAddr, GRPCAddr: m.GrpcAddr}
	return nil
}

func (b *builder) run(rec *fsmpb.SnapshotRecord) error {
	rr := rec.GetRun()
	if rr == nil {
		return corrupt("expected a run record")
	}
	if err := checkName("run name", rr.Name, limits.MaxRunNameBytes); err != nil {
		return corrupt("%v", err)
	}
	if b.st.runs[rr.Name] != nil {
		return corrupt("run %q appears twice", rr.Name)
	}
	if rr.Spec == nil || rr.Spec.MaxFailures == 0 {
		return corrupt("run %q has no spec or max_failures 0", rr.Name)
	}
	if rr.Seq <= b.lastRunSeq || (b.runSeq != 0 && rr.Seq > b.runSeq) || (b.runSeq == 0 && rr.Seq != b.lastRunSeq+1) {
		return corrupt("run %q has seq %d (previous %d, last handed out %d)", rr.Name, rr.Seq, b.lastRunSeq, b.runSeq)
	}
	b.lastRunSeq = rr.Seq
	r := &run{
		name: rr.Name, spec: proto.Clone(rr.Spec).(*fsmpb.RunSpec), seq: rr.Seq,
		created: rr.CreatedUnixNano, finished: rr.FinishedUnixNano, failures: rr.Failures,
		items: make(map[string]*item), cancelled: rr.Cancelled,
		ranged: rr.Ranged, recSeq: rr.RecordSeq,
	}
	r.byIndex.init()
	if rr.Served != 0 && b.version < 8 {
		return corrupt("version %d run %q has a served count, a field of version 8", b.version, rr.Name)
	}
	if err := checkSpecTenant(rr.Spec); err != nil {
		return corrupt("run %q: %v", rr.Name, err)
	}
	r.served = rr.Served
	r.ten = b.st.tenant(tenantOf(r.spec))
	r.ten.runs++
	if (rr.Ranged || rr.RecordSeq != 0) && b.version < 7 {
		return corrupt("version %d run %q is a range run, a field of version 7", b.version, rr.Name)
	}
	if rr.Stall != nil {
		if b.version < 5 {
			return corrupt("version %d run %q has a stall, a field of version 5", b.version, rr.Name)
		}
		if rr.Cancelled {
			return corrupt("cancelled run %q has a stall", rr.Name)
		}
		if rr.Stall.GetStore() && b.version < 9 {
			return corrupt("version %d run %q has a store stall, a field of version 9", b.version, rr.Name)
		}
		s, err := stallFromRecord(rr.Name, rr.Stall)
		if err != nil {
			return err
		}
		r.stall = s
		b.st.stalled = append(b.st.stalled, r) // runs come in creation order
	}
	if len(rr.StoreSuspects) > 0 {
		if b.version < 9 {
			return corrupt("version %d run %q has store suspects, a field of version 9", b.version, rr.Name)
		}
		if rr.Stall != nil || rr.Cancelled {
			return corrupt("run %q has store suspects while stalled or cancelled", rr.Name)
		}
		ids, err := suspectsFromRecord(rr.Name, rr.StoreSuspects)
		if err != nil {
			return err
		}
		r.storeSuspects = ids
	}
	if err := checkStoreURL(r.spec.GetStore()); err != nil {
		return corrupt("run %q: %v", rr.Name, err)
	}
	for i, k := range rr.Objects {
		if err := checkRef("object", &fsmpb.DataRef{Object: k}, false); err != nil {
			return corrupt("run %q objects[%d]: %v", rr.Name, i, err)
		}
		if _, dup := r.objIdx[k]; dup {
			return corrupt("run %q objects[%d] repeats %q", rr.Name, i, k)
		}
		r.intern(k)
	}
	b.st.runs[r.name] = r
	b.st.runOrder = append(b.st.runOrder, r)
	return nil
}

func (b *builder) item(rec *fsmpb.SnapshotRecord) error {
	ir := rec.GetItem()
	if ir == nil {
		return corrupt("expected an item record")
	}
	if b.version >= 3 {
		// Undo version 3's compaction: the run when it repeats, the owner
		// by index, the times as differences.
		if ir.Owner != "" || ir.CreatedUnixNano != 0 || ir.UpdatedUnixNano != 0 || ir.ClaimedUnixNano != 0 {
			return corrupt("version 3 item %x has an owner or times of version 2", ir.Id)
		}
		if ir.Run == "" {
			ir.Run = b.prevRun
		}
		b.prevRun = ir.Run
		if k := ir.OwnerIdx; k > 0 {
			if int(k) > len(b.owners) {
				return corrupt("item %x names owner %d of %d", ir.Id, k, len(b.owners))
			}
			ir.Owner = b.owners[k-1]
		}
		b.created += ir.CreatedDelta
		b.updated += ir.UpdatedDelta
		b.claimed += ir.ClaimedDelta
		ir.CreatedUnixNano, ir.UpdatedUnixNano, ir.ClaimedUnixNano = b.created, b.updated, b.claimed
	} else if ir.OwnerIdx != 0 || ir.CreatedDelta != 0 || ir.UpdatedDelta != 0 || ir.ClaimedDelta != 0 {
		return corrupt("version %d item %x has fields of version 3", b.version, ir.Id)
	}
	r := b.st.runs[ir.Run]
	if r == nil {
		return corrupt("item %x names unknown run %q", ir.Id, ir.Run)
	}
	if len(ir.Id) == 0 || len(ir.Id) > limits.MaxIDBytes {
		return corrupt("item id of run %q is %d bytes", ir.Run, len(ir.Id))
	}
	if r.items[string(ir.Id)] != nil {
		return corrupt("item %x of run %q appears twice", ir.Id, ir.Run)
	}
	s := State(min(ir.State, math.MaxUint8))
	if !s.valid() || uint32(s) != ir.State {
		return corrupt("item %x has state %d", ir.Id, ir.State)
	}
	switch {
	case s == StatePending && ((ir.PendingSeq == 0 && len(ir.DependsOn) == 0) || ir.Owner != ""):
		return corrupt("pending item %x has pending_seq %d, owner %q", ir.Id, ir.PendingSeq, ir.Owner)
	case s != StatePending && ir.PendingSeq != 0:
		return corrupt("%s item %x has pending_seq %d", s, ir.Id, ir.PendingSeq)
	case s == StateRunning && (ir.Owner == "" || ir.Attempt == 0):
		return corrupt("running item %x has owner %q, attempt %d", ir.Id, ir.Owner, ir.Attempt)
	}
	if len(b.slab) == 0 {
		b.slab = make([]item, 1024)
	}
	it := &b.slab[0]
	b.slab = b.slab[1:]
	*it = item{
		run: r, id: string(ir.Id), index: ir.Index, owner: ir.Owner,
		attempt: ir.Attempt, failures: ir.Failures, state: s,
		created: ir.CreatedUnixNano, updated: ir.UpdatedUnixNano, claimed: ir.ClaimedUnixNano,
	}
	it.setReason(ir.Reason)
	if len(ir.Payload) > 0 {
		it.ext().payload = ir.Payload
	}
	if len(ir.Result) > 0 {
		it.ext().result = ir.Result
	}
	if len(ir.Summary) > 0 {
		if len(ir.Summary) > limits.MaxSummaryBytes {
			return corrupt("item %x has a %d-byte summary", ir.Id, len(ir.Summary))
		}
		it.ext().summary = ir.Summary
	}
	for _, x := range []struct {
		rec  *fsmpb.RefRecord
		dst  *ref
		what string
	}{{ir.PayloadRef, &it.pref, "payload_ref"}, {ir.ResultRef, &it.rref, "result_ref"}} {
		if x.rec == nil {
			continue
		}
		if x.rec.Obj == 0 || int(x.rec.Obj) > len(r.objects) || x.rec.Length > 1<<32-1 {
			return corrupt("item %x %s names object %d of %d, length %d", ir.Id, x.what, x.rec.Obj, len(r.objects), x.rec.Length)
		}
		if n := len(x.rec.Blake3); n != 0 && n != hashBytes {
			return corrupt("item %x %s has a %d-byte hash", ir.Id, x.what, n)
		}
		*x.dst = ref{obj: x.rec.Obj, n: uint32(x.rec.Length), off: x.rec.Offset}
	}
	if it.pref.obj != 0 && len(ir.PayloadRef.Blake3) > 0 {
		it.ext().psum = ir.PayloadRef.Blake3
	}
	if it.rref.obj != 0 {
		if len(ir.ResultRef.Blake3) != hashBytes {
			return corrupt("item %x result_ref has no hash", ir.Id)
		}
		copy(it.rsum[:], ir.ResultRef.Blake3)
	}
	if ir.Count > 0 || ir.Base > 0 || ir.Started > 0 {
		if b.version < 7 {
			return corrupt("version %d item %x has range fields of version 7", b.version, ir.Id)
		}
		if !r.ranged || ir.Count == 0 || ir.Count > MaxRangeCount || ir.Index > limits.MaxRefLength || ir.Base > ir.Index {
			return corrupt("range record %x of run %q has index %d, count %d, base %d (run ranged: %v)", ir.Id, r.name, ir.Index, ir.Count, ir.Base, r.ranged)
		}
		if len(ir.DependsOn) > 0 {
			return corrupt("range record %x has dependencies", ir.Id)
		}
		it.n, it.base, it.started = ir.Count, ir.Base, ir.Started
	} else if r.ranged {
		return corrupt("record %x of range run %q has no count", ir.Id, r.name)
	}
	if _, dup := r.items[it.id]; dup {
		return corrupt("run %q has record %x twice", r.name, ir.Id)
	}
	if other := r.byIndex.insert(it); other != nil {
		return corrupt("run %q has items %x and %x at index %d", r.name, other.id, it.id, it.index)
	}
	r.items[it.id] = it
	r.addCount(s, int64(it.width()))
	r.total += it.width()
	b.st.items++
	b.st.dataBytes += it.dataBytes()
	if len(ir.DependsOn) > 0 {
		if b.deps == nil {
			b.deps = make(map[*item][][]byte)
		}
		b.deps[it] = ir.DependsOn
	}
	switch s {
	case StatePending:
		// The queue position, until finish; 0 for a blocked item, which
		// is in no queue (restoreDeps checks that it is blocked).
		it.seq = ir.PendingSeq
		if it.seq != 0 {
			b.pending = append(b.pending, it)
		}
	case StateRunning:
		b.running = append(b.running, it)
	}
	return nil
}

func (b *builder) worker(rec *fsmpb.SnapshotRecord) error {
	wr := rec.GetWorker()
	if wr == nil {
		return corrupt("expected a worker record")
	}
	if err := checkName("worker id", wr.Id, limits.MaxWorkerIDBytes); err != nil {
		return corrupt("%v", err)
	}
	if len(b.st.workers) > 0 && wr.Id <= b.lastWorker {
		return corrupt("worker %q out of order", wr.Id)
	}
	b.lastWorker = wr.Id
	w := newWorker(wr.Id, wr.RegisteredUnixNano)
	w.lastHeartbeat, w.backlog, w.itemsPerSec = wr.LastHeartbeatUnixNano, wr.Backlog, wr.ItemsPerSec
	w.lost, w.completed = wr.Lost, wr.Completed
	if len(wr.Kinds) > 0 {
		kinds, err := checkKinds(wr.Kinds)
		if err != nil {
			return corrupt("worker %q: %v", wr.Id, err)
		}
		if !slices.Equal(kinds, wr.Kinds) {
			return corrupt("worker %q: kinds %q are not canonical and sorted", wr.Id, wr.Kinds)
		}
		w.kinds = kinds
	}
	if len(wr.Models) > 0 {
		if b.version < 4 {
			return corrupt("version %d worker %q has models, a field of version 4", b.version, wr.Id)
		}
		models, err := checkModels(wr.Models)
		if err != nil {
			return corrupt("worker %q: %v", wr.Id, err)
		}
		if !slices.Equal(models, wr.Models) {
			return corrupt("worker %q: models %q are not sorted without repeats", wr.Id, wr.Models)
		}
		w.models = models
	}
	if len(wr.Executing) > 0 {
		w.executing = make([]execKey, len(wr.Executing))
		for i, k := range wr.Executing {
			w.executing[i] = execKey{run: k.GetRun(), id: string(k.GetId()), attempt: k.GetAttempt()}
		}
	}
	b.st.workers[w.id] = w
	return nil
}

// finish rebuilds the ordered indexes and checks cross-record consistency.
func (b *builder) finish() (*state, error) {
	st := b.st
	if err := b.finishEvents(); err != nil {
		return nil, err
	}
	st.runSeq = max(b.runSeq, b.lastRunSeq)
	for _, r := range st.runOrder {
		var prev *item
		var overlap error
		r.byIndex.each(func(it *item) bool {
			if prev != nil && it.index < prev.end() {
				overlap = corrupt("run %q record %x [%d, %d) overlaps record %x at index %d",
					r.name, prev.id, prev.index, prev.end(), it.id, it.index)
				return false
			}
			prev = it
			return true
		})
		if overlap != nil {
			return nil, overlap
		}
		fin := r.pending+r.running == 0 && (r.cancelled || r.total > 0 && r.total >= r.spec.Total)
		if fin != (r.finished != 0) {
			return nil, corrupt("run %q has finished time %d but finished is %v", r.name, r.finished, fin)
		}
	}
	if err := b.restoreDeps(); err != nil {
		return nil, err
	}
	slices.SortFunc(b.pending, func(x, y *item) int { return cmpU64(x.seq, y.seq) })
	for i := 1; i < len(b.pending); i++ {
		if b.pending[i].seq == b.pending[i-1].seq {
			return nil, corrupt("items %x and %x share pending_seq %d", b.pending[i-1].id, b.pending[i].id, b.pending[i].seq)
		}
	}
	for _, t := range st.tenants {
		if !t.set && t.runs == 0 {
			return nil, corrupt("tenant %q has no run and was never set", t.name)
		}
		t.updateThrottle() // its quota, before its lanes are made
	}
	st.pending.restoring = true
	for _, it := range b.pending {
		it.seq = 0
		st.queue(it) // a stalled run's go to its parked list
	}
	st.pending.restoring = false
	for _, it := range b.running {
		w := st.workers[it.owner]
		if w == nil || w.lost {
			return nil, corrupt("running item %x of run %q is owned by unknown or lost worker %q", it.id, it.run.name, it.owner)
		}
		st.claimSeq++
		it.seq = st.claimSeq
		w.owned.pushBack(it)
	}
	return st, nil
}
