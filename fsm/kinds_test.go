package fsm

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

func cRegisterKinds(worker string, kinds ...string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Register{Register: &fsmpb.RegisterWorkerCmd{Worker: worker, Kinds: kinds}}}
}

// kindsLedger holds a batch run b (b1..b3) and a training run t (t1..t3),
// submitted interleaved: b1 t1 b2 t2 b3 t3 is the global FIFO order.
func kindsLedger(t *testing.T) *harness {
	h := newHarness(t)
	h.ok(cRegisterKinds("wb", "batch"), cRegisterKinds("wt", "train"), cRegister("wany"),
		cRegisterKinds("wboth", "train", "batch", "train"))
	train := &fsmpb.RunSpec{Kind: "train"}
	for i, n := range []string{"1", "2", "3"} {
		h.ok(cSubmit("b", nil, false, ni("b"+n, uint64(i), `{}`)))
		h.ok(cSubmit("t", train, false, ni("t"+n, uint64(i), `{}`)))
	}
	checkInvariants(t, h.l)
	return h
}

// TestClaimByKind: a worker receives only items of the kinds it registered;
// one that named none, or several, receives the oldest claimable items
// across kinds, in the global FIFO order.
func TestClaimByKind(t *testing.T) {
	h := kindsLedger(t)
	require.Equal(t, 3, h.l.Claimable("wb", h.now))
	require.Equal(t, 3, h.l.Claimable("wt", h.now))
	require.Equal(t, 6, h.l.Claimable("wany", h.now))
	require.Equal(t, 0, h.l.Claimable("nobody", h.now))
	require.Equal(t, []string{"batch", "train"}, h.worker("wboth").Kinds)
	require.Nil(t, h.worker("wany").Kinds)

	require.Equal(t, []string{"t1", "t2"}, claimedIDs(h.ok(cClaim("wt", 2))[0].Items))
	require.Equal(t, []string{"b1"}, claimedIDs(h.ok(cClaim("wb", 1))[0].Items))
	require.Equal(t, 3, h.l.Claimable("wany", h.now))
	require.Equal(t, 3, h.l.Claimable("wboth", h.now))
	require.Equal(t, []string{"b2", "b3"}, claimedIDs(h.ok(cClaim("wany", 2))[0].Items))
	require.Empty(t, h.ok(cClaim("wb", 5))[0].Items, "no batch item is left")
	require.Equal(t, 1, h.l.Claimable("wboth", h.now))
	require.Equal(t, []string{"t3"}, claimedIDs(h.ok(cClaim("wboth", 5))[0].Items))
	require.Equal(t, 0, h.l.Claimable("wt", h.now))
	checkInvariants(t, h.l)

	// A nacked training item goes back behind nothing else of its kind and
	// is claimable by training workers only.
	h.ok(cNack("t", "t1", "wt", 1))
	require.Equal(t, 0, h.l.Claimable("wb", h.now))
	require.Empty(t, h.ok(cClaim("wb", 5))[0].Items)
	require.Equal(t, []string{"t1"}, claimedIDs(h.ok(cClaim("wt", 5))[0].Items))
	checkInvariants(t, h.l)
}

// TestRegisterReplacesKinds: registering again replaces the set; an empty
// set means every kind.
func TestRegisterReplacesKinds(t *testing.T) {
	h := kindsLedger(t)
	h.ok(cRegisterKinds("wt", "batch"))
	require.Equal(t, []string{"b1"}, claimedIDs(h.ok(cClaim("wt", 1))[0].Items))
	h.ok(cRegister("wt"))
	require.Nil(t, h.worker("wt").Kinds)
	require.Equal(t, []string{"t1", "b2"}, claimedIDs(h.ok(cClaim("wt", 2))[0].Items))
}

// TestRegisterKindsRefused: a bad kind set is refused whole and changes
// nothing.
func TestRegisterKindsRefused(t *testing.T) {
	h := kindsLedger(t)
	before := persist(t, h.l)
	many := make([]string, limits.MaxWorkerKinds+1)
	for i := range many {
		many[i] = strings.Repeat("k", i+1)
	}
	for name, c := range map[string]*fsmpb.Command{
		"too many":      cRegisterKinds("wb", many...),
		"too long":      cRegisterKinds("wb", strings.Repeat("x", limits.MaxKindBytes+1)),
		"non-printable": cRegisterKinds("wb", "tr\x00ain"),
	} {
		r := h.applyAt(c)[0]
		require.True(t, errors.Is(r.Err, ErrInvalidCommand), "%s: %v", name, r.Err)
		require.Contains(t, r.Err.Error(), "kind", name)
	}
	require.Equal(t, before, persist(t, h.l), "a refused register changed the ledger")
}

// TestStealByKind: a thief steals only items of its kinds, and picks its
// victim by how many of those it holds.
func TestStealByKind(t *testing.T) {
	h := kindsLedger(t)
	h.ok(cRegister("big"), cRegister("small"))
	require.Len(t, h.ok(cClaim("big", 4))[0].Items, 4)   // b1 t1 b2 t2
	require.Len(t, h.ok(cClaim("small", 2))[0].Items, 2) // b3 t3
	// big holds more items, but only 2 training items; small holds 1.
	r := h.ok(cSteal("wt", 0))[0]
	require.Equal(t, "big", r.Victim)
	require.Equal(t, []string{"t2"}, claimedIDs(r.Items), "half of big's 2 training items, newest first")
	for _, it := range r.Items {
		require.Equal(t, "t", it.Run)
	}
	// Now big and small each hold one training item; the tie goes to the
	// smaller id.
	r = h.ok(cSteal("wt", 0))[0]
	require.Equal(t, "big", r.Victim)
	require.Equal(t, []string{"t1"}, claimedIDs(r.Items))
	r = h.ok(cSteal("wt", 0))[0]
	require.Equal(t, "small", r.Victim)
	require.Equal(t, []string{"t3"}, claimedIDs(r.Items))
	// No training item is held by anyone else now: nothing to steal, even
	// though big and small hold batch items.
	r = h.ok(cSteal("wt", 0))[0]
	require.Empty(t, r.Victim)
	require.Empty(t, r.Items)
	checkInvariants(t, h.l)
}

// TestKindsSnapshotRoundTrip: kinds and the global FIFO order across kinds
// survive a snapshot, and the restored ledger claims exactly like the
// original.
func TestKindsSnapshotRoundTrip(t *testing.T) {
	h := kindsLedger(t)
	h.ok(cClaim("wb", 1))
	h.ok(cNack("b", "b1", "wb", 1)) // b1 goes to the back: t1 b2 t2 b3 t3 b1
	b := persist(t, h.l)
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, b))
	checkInvariants(t, l)
	require.Equal(t, dumpLedger(h.l), dumpLedger(l))
	require.Equal(t, b, persist(t, l))
	other := &harness{t: t, l: l, term: h.term, now: h.now, index: h.index}
	for _, x := range []*harness{h, other} {
		require.Equal(t, []string{"batch"}, x.worker("wb").Kinds)
		require.Equal(t, []string{"t1", "b2", "t2", "b3"}, claimedIDs(x.ok(cClaim("wany", 4))[0].Items))
		require.Equal(t, []string{"b1"}, claimedIDs(x.ok(cClaim("wb", 4))[0].Items))
		require.Equal(t, []string{"t3"}, claimedIDs(x.ok(cClaim("wt", 4))[0].Items))
	}
	require.Equal(t, dumpLedger(h.l), dumpLedger(l))
}
