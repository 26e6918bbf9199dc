package fsm

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"zero max failures", func(c *Config) { c.DefaultMaxFailures = 0 }, "DefaultMaxFailures"},
		{"zero steal batch", func(c *Config) { c.MaxStealBatch = 0 }, "MaxStealBatch"},
		{"huge steal batch", func(c *Config) { c.MaxStealBatch = MaxClaimBatch + 1 }, "MaxStealBatch"},
		{"zero payload", func(c *Config) { c.MaxPayloadBytes = 0 }, "MaxPayloadBytes"},
		{"huge payload", func(c *Config) { c.MaxPayloadBytes = 1 << 30 }, "MaxPayloadBytes"},
		{"zero lost worker retention", func(c *Config) { c.LostWorkerRetention = 0 }, "LostWorkerRetention"},
		{"huge lost worker retention", func(c *Config) { c.LostWorkerRetention = 1001 }, "LostWorkerRetention"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mod(&cfg)
			err := cfg.Validate()
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.Contains(t, err.Error(), tc.want)
			_, err = New(cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
}

func TestStateString(t *testing.T) {
	require.Equal(t, "pending", StatePending.String())
	require.Equal(t, "running", StateRunning.String())
	require.Equal(t, "done", StateDone.String())
	require.Equal(t, "dead", StateDead.String())
	require.Equal(t, "state(9)", State(9).String())
}

// base sets up run r (max_failures 2, total 3) with items a, b, c, where a
// and b are Running(w1, 1) and c is Pending; workers w1, w2 and w3 are
// registered.
func base(t *testing.T) *harness {
	h := newHarness(t)
	h.ok(cEpoch("c1", "g1"))
	h.ok(cSubmit("r", &fsmpb.RunSpec{MaxFailures: 2, Total: 3, Model: "m"}, false,
		ni("a", 0, "pa"), ni("b", 1, "pb"), ni("c", 2, "pc")))
	h.ok(cRegisterAll("w1", "w2", "w3")...)
	res := h.ok(cClaim("w1", 2))
	require.Len(t, res[0].Items, 2)
	return h
}

func claimedIDs(items []Item) []string {
	var out []string
	for _, it := range items {
		out = append(out, string(it.ID))
	}
	return out
}

// TestRefusedCommands applies, after the common setup, commands whose input
// a transition script (testdata/scripts, TestScripts) cannot spell:
// oversized fields, non-printable or invalid UTF-8 text, a command with no
// operation. Each must be refused with exactly its sentinel and leave the
// snapshot bytes unchanged.
func TestRefusedCommands(t *testing.T) {
	long := strings.Repeat("x", 200)
	tests := []struct {
		name    string
		cmd     *fsmpb.Command
		raw     []byte // the command's bytes, when cmd is nil
		wantErr error
	}{
		{name: "complete oversized result", cmd: cComplete("r", "a", "w1", 1, strings.Repeat("r", 1<<20+1)), wantErr: ErrInvalidCommand},
		{name: "fail oversized reason", cmd: cFail("r", "a", "w1", 1, strings.Repeat("e", limits.MaxReasonBytes+1)), wantErr: ErrInvalidCommand},
		{name: "claim non-printable worker", cmd: cClaim("w\x01", 1), wantErr: ErrInvalidCommand},
		{name: "submit to a new run with a bad item creates nothing", cmd: cSubmit("new", nil, false, ni("d", 0, ""), ni("", 1, "")), wantErr: ErrInvalidCommand},
		{name: "submit empty run name", cmd: cSubmit("", nil, false, ni("d", 0, "")), wantErr: ErrInvalidCommand},
		{name: "submit long run name", cmd: cSubmit(long, nil, false, ni("d", 0, "")), wantErr: ErrInvalidCommand},
		{name: "submit non-printable run name", cmd: cSubmit("r\n", nil, false, ni("d", 0, "")), wantErr: ErrInvalidCommand},
		// Proto refuses to encode invalid UTF-8 in a string, so hand-craft it:
		// Command{submit(2): SubmitItemsCmd{run(1): "r\xff"}}.
		{name: "submit invalid UTF-8 run name", raw: []byte{0x12, 0x04, 0x0a, 0x02, 'r', 0xff}, wantErr: ErrInvalidCommand},
		{name: "submit long id", cmd: cSubmit("r", nil, false, ni(strings.Repeat("i", limits.MaxIDBytes+1), 9, "")), wantErr: ErrInvalidCommand},
		{name: "submit oversized payload", cmd: cSubmit("r", nil, false, ni("d", 3, strings.Repeat("p", 1<<20+1))), wantErr: ErrInvalidCommand},
		{name: "submit oversized sampling", cmd: cSubmit("r2", &fsmpb.RunSpec{Sampling: make([]byte, 1<<20+1)}, false), wantErr: ErrInvalidCommand},
		{name: "register non-printable worker", cmd: cRegister("w\n"), wantErr: ErrInvalidCommand},
		{name: "register long worker", cmd: cRegister(long), wantErr: ErrInvalidCommand},
		{name: "set member with a long address", cmd: cSetMember("c3", strings.Repeat("a", MaxAddrBytes+1), ""), wantErr: ErrInvalidCommand},
		{name: "command with no operation", cmd: &fsmpb.Command{}, wantErr: ErrInvalidCommand},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := base(t)
			before := persist(t, h.l)
			var res Result
			if tc.cmd == nil || tc.cmd.Cmd == nil {
				// EncodeCommand refuses these; send the bytes as they are.
				out := h.applyData(h.term, mustEntry(t, h.now, h.term, [][]byte{tc.raw}))
				res = out.(Results)[0]
			} else {
				res = h.applyAt(tc.cmd)[0]
			}
			checkInvariants(t, h.l)
			require.ErrorIs(t, res.Err, tc.wantErr)
			require.Equal(t, tc.wantErr, errKind(t, res.Err), "wraps exactly one sentinel")
			require.Equal(t, before, persist(t, h.l), "a refused command changed the ledger")
		})
	}
}

func mustEntry(t testing.TB, now time.Time, epoch uint64, cmds [][]byte) []byte {
	t.Helper()
	b, err := EncodeEntry(now, epoch, cmds)
	require.NoError(t, err)
	return b
}

func TestEncodeCommandRejectsEmpty(t *testing.T) {
	_, err := EncodeCommand(nil)
	require.ErrorIs(t, err, ErrInvalidCommand)
	_, err = EncodeCommand(&fsmpb.Command{})
	require.ErrorIs(t, err, ErrInvalidCommand)
}

func TestApplyNonEntries(t *testing.T) {
	h := base(t)
	before := persist(t, h.l)
	// Other log types are not the ledger's business.
	require.Nil(t, h.l.Apply(&raft.Log{Index: 100, Term: 1, Type: raft.LogConfiguration, Data: []byte{1, 2}}))
	require.Nil(t, h.l.Apply(&raft.Log{Index: 101, Term: 1, Type: raft.LogNoop}))
	// Data that is not an Entry is an error value and changes nothing.
	out := h.l.Apply(&raft.Log{Index: 102, Term: 1, Type: raft.LogCommand, Data: []byte{0xff, 0xff, 0xff}})
	err, ok := out.(error)
	require.True(t, ok, "got %T", out)
	require.ErrorIs(t, err, ErrCorruptEntry)
	require.Equal(t, before, persist(t, h.l))
	// A command that does not decode fails alone.
	good, err := EncodeCommand(cClaim("w2", 1))
	require.NoError(t, err)
	out = h.applyData(1, mustEntry(t, h.now.Add(time.Second), 1, [][]byte{{0xff}, good}))
	res := out.(Results)
	require.ErrorIs(t, res[0].Err, ErrInvalidCommand)
	require.NoError(t, res[1].Err)
	require.Len(t, res[1].Items, 1)
}

func TestStaleEpoch(t *testing.T) {
	h := base(t)
	h.term = 5
	h.ok(cEpoch("c2", "g2"))
	require.Equal(t, uint64(5), h.l.Epoch())
	before := persist(t, h.l)
	now := h.l.Now()

	tests := []struct {
		name  string
		term  uint64
		epoch uint64
		want  error
	}{
		{"older raft term", 4, 0, ErrStaleEpoch},
		{"older raft term, current stamp", 4, 5, ErrStaleEpoch},
		{"current term, older stamp", 5, 4, ErrStaleEpoch},
		{"current term, unset stamp", 5, 0, nil},
		{"newer term", 6, 6, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h.now = h.now.Add(time.Second)
			data := h.entry(tc.epoch, cComplete("r", "a", "w1", 1, "ra"), cClaim("w3", 1))
			if tc.want == nil {
				// Probe on a copy so the main ledger stays at "before".
				l2, err := New(DefaultConfig())
				require.NoError(t, err)
				require.NoError(t, restore(l2, before))
				res := l2.Apply(&raft.Log{Index: 1000, Term: tc.term, Type: raft.LogCommand, Data: data}).(Results)
				require.NoError(t, res[0].Err)
				require.NoError(t, res[1].Err)
				return
			}
			res := h.applyData(tc.term, data).(Results)
			for _, r := range res {
				require.ErrorIs(t, r.Err, tc.want)
			}
			require.Equal(t, before, persist(t, h.l), "a stale entry changed the ledger")
			require.Equal(t, now, h.l.Now(), "a stale entry moved the clock")
		})
	}
}

func TestClockIsMonotone(t *testing.T) {
	h := base(t)
	at := h.l.Now()
	h.now = h.now.Add(-time.Hour) // a new leader whose clock is behind
	res := h.applyAt(cSubmit("r", nil, false, ni("d", 3, "")))
	require.NoError(t, res[0].Err)
	require.Equal(t, at, h.l.Now())
	require.Equal(t, at, h.item("r", "d").CreatedAt)
}

// TestExpireRemovesLostIdleWorkers: a Lost worker that holds nothing and
// stays silent past LostWorkerRetention × the timeout is removed; a worker
// that holds items and heartbeats stays however long it lives; a removed
// worker must register again.
func TestExpireRemovesLostIdleWorkers(t *testing.T) {
	const timeout = 5 * time.Second
	retention := time.Duration(DefaultLostWorkerRetention) * timeout
	h := base(t)                           // w1 holds a, b; w2 and w3 idle
	h.ok(cClaim("w2", 1), cRegister("w9")) // w2 holds c
	require.False(t, expiryDue(h.l, h.now, timeout))

	// 6s later everyone but w2 (which heartbeats) is silent past the timeout.
	h.now = h.now.Add(3 * time.Second)
	h.ok(cHeartbeat("w2", 1, 1, nil, nil))
	h.now = h.now.Add(3 * time.Second)
	require.True(t, expiryDue(h.l, h.now, timeout))
	res := h.applyAt(cExpire(timeout))[0]
	require.NoError(t, res.Err)
	require.Equal(t, []string{"w1", "w3", "w9"}, res.Expired)
	require.Empty(t, res.Removed, "lost, but not yet past the retention")
	require.Equal(t, 2, res.Repended)
	require.False(t, expiryDue(h.l, h.now, timeout), "nothing more to do until the retention passes")

	// w9 comes back before the retention: it is live again and stays.
	h.now = h.now.Add(10 * time.Second)
	h.ok(cRegister("w9"))
	// w2 keeps heartbeating while it holds c, well past the retention.
	for range 20 {
		h.now = h.now.Add(3 * time.Second)
		h.ok(cHeartbeat("w2", 1, 1, nil, nil), cHeartbeat("w9", 0, 0, nil, nil))
	}
	require.Greater(t, h.now.Sub(h.worker("w1").LastHeartbeat), retention)
	require.True(t, expiryDue(h.l, h.now, timeout))
	res = h.applyAt(cExpire(timeout))[0]
	require.NoError(t, res.Err)
	require.Empty(t, res.Expired)
	require.Equal(t, []string{"w1", "w3"}, res.Removed)
	var ids []string
	for _, w := range h.l.Workers() {
		ids = append(ids, w.ID)
	}
	require.Equal(t, []string{"w2", "w9"}, ids)
	require.Equal(t, []string{"c"}, claimedIDs(h.l.Owned("w2")), "a worker holding items is never removed while it lives")
	require.False(t, expiryDue(h.l, h.now, timeout))
	checkInvariants(t, h.l)

	// A removed worker is unknown: it must register before it claims.
	require.ErrorIs(t, h.one(cClaim("w1", 1)).Err, ErrWorkerNotRegistered)
	require.ErrorIs(t, h.one(cHeartbeat("w3", 0, 0, nil, nil)).Err, ErrWorkerNotRegistered)
	got := h.ok(cRegister("w1"), cClaim("w1", 1))[1]
	require.Equal(t, []string{"a"}, claimedIDs(got.Items))
	require.Equal(t, uint64(2), got.Items[0].Attempt)

	// w2 goes silent holding c: first Lost (c re-pended), then removed.
	h.now = h.now.Add(timeout + time.Second)
	h.ok(cHeartbeat("w1", 1, 1, nil, nil), cHeartbeat("w9", 0, 0, nil, nil))
	res = h.applyAt(cExpire(timeout))[0]
	require.Equal(t, []string{"w2"}, res.Expired)
	require.Equal(t, 1, res.Repended)
	require.Empty(t, res.Removed)
	h.now = h.now.Add(retention)
	h.ok(cHeartbeat("w1", 1, 1, nil, nil), cHeartbeat("w9", 0, 0, nil, nil))
	res = h.applyAt(cExpire(timeout))[0]
	require.Empty(t, res.Expired)
	require.Equal(t, []string{"w2"}, res.Removed)
	checkInvariants(t, h.l)
}

// TestExpireRemovalIsDeterministic: removal decides from stamped time only,
// and two ledgers applying the same log (one restored from a snapshot taken
// while workers were Lost) end byte-identical.
func TestExpireRemovalIsDeterministic(t *testing.T) {
	a := base(t)
	a.now = a.now.Add(time.Minute)
	first := a.applyAt(cExpire(30 * time.Second))[0]
	require.Equal(t, []string{"w1", "w2", "w3"}, first.Expired)
	require.Empty(t, first.Removed)
	b, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(b, persist(t, a.l)))
	a.now = a.now.Add(time.Hour)
	data := a.entry(1, cExpire(30*time.Second))
	ra := a.applyData(1, data).(Results)[0]
	rb := b.Apply(&raft.Log{Index: 999, Term: 1, Type: raft.LogCommand, Data: data}).(Results)[0]
	require.Equal(t, []string{"w1", "w2", "w3"}, ra.Removed)
	require.Equal(t, ra, rb)
	require.Equal(t, persist(t, a.l), persist(t, b))
	require.Empty(t, a.l.Workers())
}

func TestRunFinished(t *testing.T) {
	h := base(t)
	require.True(t, h.run("r").FinishedAt.IsZero())
	h.ok(cComplete("r", "a", "w1", 1, "ra"), cFail("r", "b", "w1", 1, "x"))
	h.ok(cClaim("w1", 5))
	require.True(t, h.run("r").FinishedAt.IsZero())
	h.ok(cComplete("r", "c", "w1", 1, "rc"))
	h.ok(cFail("r", "b", "w1", 2, "y"))
	fin := h.run("r").FinishedAt
	require.Equal(t, h.now, fin, "done and dead items finish the run")
	h.ok(cHeartbeat("w1", 0, 0, nil, nil))
	require.Equal(t, fin, h.run("r").FinishedAt, "set once")

	// A larger total clears it until more items arrive and finish.
	h.ok(cSubmit("r", &fsmpb.RunSpec{Total: 4}, false))
	require.True(t, h.run("r").FinishedAt.IsZero())
	h.ok(cSubmit("r", nil, false, ni("d", 3, "")))
	require.True(t, h.run("r").FinishedAt.IsZero())
	h.ok(cClaim("w1", 1))
	h.ok(cComplete("r", "d", "w1", 1, "rd"))
	require.Equal(t, h.now, h.run("r").FinishedAt)
	// retry_dead re-opens the run.
	h.ok(cSubmit("r", nil, true, ni("b", 1, "")))
	require.True(t, h.run("r").FinishedAt.IsZero())
	checkInvariants(t, h.l)
}

func TestReads(t *testing.T) {
	h := newHarness(t)
	_, err := h.l.Run("r")
	require.ErrorIs(t, err, ErrRunNotFound)
	_, _, _, err = h.l.Results("r", 0, 10)
	require.ErrorIs(t, err, ErrRunNotFound)
	require.Nil(t, h.l.Owned("w1"))

	// Chunks out of index order still read back in index order.
	h.ok(cSubmit("r", nil, false, ni("i5", 5, ""), ni("i6", 6, ""), ni("i9", 9, "")))
	h.ok(cSubmit("r", nil, false, ni("i1", 1, ""), ni("i7", 7, ""), ni("i0", 0, "")))
	h.ok(cSubmit("s", nil, false, ni("i0", 0, "")))
	rs := h.l.Runs()
	require.Len(t, rs, 2)
	require.Equal(t, "r", rs[0].Name)
	require.Equal(t, "s", rs[1].Name)
	require.Equal(t, DefaultConfig().DefaultMaxFailures, rs[0].Spec.MaxFailures)

	items, next, done, err := h.l.Results("r", 0, 4)
	require.NoError(t, err)
	require.Equal(t, []string{"i0", "i1", "i5", "i6"}, claimedIDs(items))
	require.Equal(t, uint64(7), next)
	require.False(t, done)
	items, next, done, err = h.l.Results("r", next, 4)
	require.NoError(t, err)
	require.Equal(t, []string{"i7", "i9"}, claimedIDs(items))
	require.Equal(t, uint64(10), next)
	require.True(t, done)
	items, next, done, err = h.l.Results("r", 100, 0)
	require.NoError(t, err)
	require.Empty(t, items)
	require.Equal(t, uint64(100), next)
	require.True(t, done)

	// Owned is in claim order; returned bytes are copies.
	c := h.ok(cRegister("w1"), cClaim("w1", 3))[1]
	require.Equal(t, []string{"i5", "i6", "i9"}, claimedIDs(c.Items))
	owned := h.l.Owned("w1")
	require.Equal(t, []string{"i5", "i6", "i9"}, claimedIDs(owned))
	owned[0].ID[0] = 'X'
	c.Items[1].ID[0] = 'X'
	require.Equal(t, []string{"i5", "i6", "i9"}, claimedIDs(h.l.Owned("w1")))
	rs[0].Spec.Model = "changed"
	require.Empty(t, h.run("r").Spec.Model)
	require.Equal(t, 4, h.l.Pending())
}

func TestPendingSignal(t *testing.T) {
	h := newHarness(t)
	ch := h.l.PendingSignal()
	h.ok(cRegister("w1"), cRegister("w2"), cRegister("w3"), cHeartbeat("w1", 0, 0, nil, nil))
	requireOpen(t, ch)

	h.ok(cSubmit("r", nil, false, ni("a", 0, ""), ni("b", 1, "")))
	requireClosed(t, ch)
	ch2 := h.l.PendingSignal()
	require.NotEqual(t, ch, ch2)

	// Claiming everything and stealing never signal.
	h.ok(cClaim("w1", 2))
	h.ok(cSteal("w2", 0))
	requireOpen(t, ch2)
	require.Zero(t, h.l.Pending())

	// A submit of items that all exist adds nothing.
	h.ok(cSubmit("r", nil, false, ni("a", 0, "")))
	requireOpen(t, ch2)

	h.ok(cNack("r", "a", "w1", 1))
	requireClosed(t, ch2)
	ch3 := h.l.PendingSignal()
	h.ok(cDeregister("w1"))
	requireOpen(t, ch3, "w1 owned nothing more to re-pend")
	h.ok(cClaim("w3", 5))
	ch4 := h.l.PendingSignal()
	h.ok(cFail("r", "a", "w3", 2, "x"))
	requireClosed(t, ch4)
}

func requireClosed(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	default:
		t.Fatal("signal channel not closed")
	}
}

func requireOpen(t *testing.T, ch <-chan struct{}, msg ...any) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal(append([]any{"signal channel closed"}, msg...)...)
	default:
	}
}

func TestItemCopyBytes(t *testing.T) {
	h := base(t)
	h.ok(cComplete("r", "a", "w1", 1, "result-a"))
	it := h.item("r", "a")
	require.Equal(t, "a", string(it.ID))
	require.Equal(t, "pa", string(it.Payload))
	require.Equal(t, "result-a", string(it.Result))
	it.Result[0] = 'X'
	it.Payload[0] = 'X'
	it2 := h.item("r", "a")
	require.Equal(t, "pa", string(it2.Payload))
	require.Equal(t, "result-a", string(it2.Result))
	res := h.one(cComplete("r", "a", "w1", 1, "result-a"))
	require.NoError(t, res.Err)
	require.True(t, res.Duplicate)
}

// TestConcurrentReads reads from several goroutines while entries apply;
// run with -race it proves reads are guarded and return copies.
func TestConcurrentReads(t *testing.T) {
	h := base(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, r := range h.l.Runs() {
					_, _, _, _ = h.l.Results(r.Name, 0, 10)
				}
				for _, w := range h.l.Workers() {
					_ = h.l.Owned(w.ID)
				}
				_ = h.l.Pending()
				_ = h.l.PendingSignal()
				_, _ = h.l.Leader()
				_ = h.l.Members()
			}
		}()
	}
	for i := range 200 {
		id := fmt.Sprintf("x%d", i)
		h.ok(cSubmit("r", nil, false, ni(id, uint64(10+i), "p")))
		res := h.ok(cClaim("w2", 1))
		it := res[0].Items[0]
		h.ok(cComplete("r", string(it.ID), "w2", it.Attempt, "done"))
	}
	close(stop)
	wg.Wait()
	checkInvariants(t, h.l)
}

// TestLongPollWakeup follows the documented long-poll pattern: take the
// channel, check Pending, wait. A submit applied from another goroutine
// must wake the waiter.
func TestLongPollWakeup(t *testing.T) {
	h := newHarness(t)
	ready := make(chan struct{})
	woke := make(chan int, 1)
	go func() {
		ch := h.l.PendingSignal()
		n := h.l.Pending()
		close(ready)
		if n == 0 {
			<-ch
		}
		woke <- h.l.Pending()
	}()
	<-ready
	data := h.entry(1, cSubmit("r", nil, false, ni("a", 0, "")))
	h.applyData(1, data)
	select {
	case n := <-woke:
		require.Equal(t, 1, n)
	case <-time.After(10 * time.Second):
		t.Fatal("long-poller was not woken")
	}
}

// expiryDue reports whether an ExpireWorkers command with this timeout,
// stamped at now, would change the ledger (ExpiryCandidates).
func expiryDue(l *Ledger, now time.Time, timeout time.Duration) bool {
	silent, removal := l.ExpiryCandidates(now, timeout)
	return len(silent) > 0 || removal
}
