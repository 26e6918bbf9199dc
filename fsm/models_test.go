package fsm

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

func cRegisterModels(worker string, models ...string) *fsmpb.Command {
	return &fsmpb.Command{Cmd: &fsmpb.Command_Register{Register: &fsmpb.RegisterWorkerCmd{Worker: worker, Models: models}}}
}

// modelsLedger holds three runs submitted interleaved: a of model "A"
// (a1..a3), b of model "B" (b1..b3) and n naming no model (n1..n3); the
// global FIFO order is a1 b1 n1 a2 b2 n2 a3 b3 n3. Workers: wa serves A,
// wb serves B, wab serves both (named twice, out of order), wany every
// model, wc serves C (nobody submits C).
func modelsLedger(t *testing.T) *harness {
	h := newHarness(t)
	h.ok(cRegisterModels("wa", "A"), cRegisterModels("wb", "B"), cRegisterModels("wab", "B", "A", "B"),
		cRegister("wany"), cRegisterModels("wc", "C"))
	for i, n := range []string{"1", "2", "3"} {
		h.ok(cSubmit("a", &fsmpb.RunSpec{Model: "A"}, false, ni("a"+n, uint64(i), `{}`)))
		h.ok(cSubmit("b", &fsmpb.RunSpec{Model: "B"}, false, ni("b"+n, uint64(i), `{}`)))
		h.ok(cSubmit("n", nil, false, ni("n"+n, uint64(i), `{}`)))
	}
	checkInvariants(t, h.l)
	return h
}

// TestClaimByModel: a worker receives only items of runs whose model it
// serves, and of runs that name none; one that named no model, or several,
// receives the oldest claimable items across them, in the global FIFO
// order.
func TestClaimByModel(t *testing.T) {
	h := modelsLedger(t)
	for _, tc := range []struct {
		worker string
		n      int
		models []string
	}{
		{"wa", 6, []string{"A"}},
		{"wb", 6, []string{"B"}},
		{"wab", 9, []string{"A", "B"}},
		{"wany", 9, nil},
		{"wc", 3, []string{"C"}},
		{"nobody", 0, nil},
	} {
		require.Equal(t, tc.n, h.l.Claimable(tc.worker, h.now), tc.worker)
		if tc.worker != "nobody" {
			require.Equal(t, tc.models, h.worker(tc.worker).Models, tc.worker)
		}
	}

	require.Equal(t, []string{"a1", "n1", "a2"}, claimedIDs(h.ok(cClaim("wa", 3))[0].Items))
	require.Equal(t, []string{"n2"}, claimedIDs(h.ok(cClaim("wc", 1))[0].Items), "a run naming no model is anyone's")
	require.Equal(t, []string{"b1", "b2", "b3", "n3"}, claimedIDs(h.ok(cClaim("wb", 9))[0].Items))
	require.Equal(t, 1, h.l.Claimable("wa", h.now))
	require.Zero(t, h.l.Claimable("wb", h.now))
	require.Zero(t, h.l.Claimable("wc", h.now))
	require.Empty(t, h.ok(cClaim("wc", 9))[0].Items, "nothing of model C or of no model is left")
	require.Equal(t, []string{"a3"}, claimedIDs(h.ok(cClaim("wab", 9))[0].Items))
	checkInvariants(t, h.l)

	// A nacked item of model B goes back to the queue of its model and is
	// claimable by B's workers only.
	h.ok(cNack("b", "b2", "wb", 1))
	require.Zero(t, h.l.Claimable("wa", h.now))
	require.Empty(t, h.ok(cClaim("wa", 5))[0].Items)
	require.Equal(t, []string{"b2"}, claimedIDs(h.ok(cClaim("wab", 5))[0].Items))
	checkInvariants(t, h.l)
}

// TestClaimByKindAndModel: kinds and models combine; a worker takes an item
// only when it runs the run's kind and serves the run's model.
func TestClaimByKindAndModel(t *testing.T) {
	h := newHarness(t)
	h.ok(&fsmpb.Command{Cmd: &fsmpb.Command_Register{Register: &fsmpb.RegisterWorkerCmd{
		Worker: "w", Kinds: []string{"train"}, Models: []string{"A"}}}})
	h.ok(cSubmit("batchA", &fsmpb.RunSpec{Model: "A"}, false, ni("x", 0, `{}`)))
	h.ok(cSubmit("trainB", &fsmpb.RunSpec{Model: "B", Kind: "train"}, false, ni("y", 0, `{}`)))
	h.ok(cSubmit("trainA", &fsmpb.RunSpec{Model: "A", Kind: "train"}, false, ni("z", 0, `{}`)))
	require.Equal(t, 1, h.l.Claimable("w", h.now))
	require.Equal(t, []string{"z"}, claimedIDs(h.ok(cClaim("w", 9))[0].Items))
	checkInvariants(t, h.l)
}

// TestRegisterReplacesModels: registering again replaces the set; an empty
// set means every model.
func TestRegisterReplacesModels(t *testing.T) {
	h := modelsLedger(t)
	h.ok(cRegisterModels("wa", "B"))
	require.Equal(t, []string{"b1"}, claimedIDs(h.ok(cClaim("wa", 1))[0].Items))
	h.ok(cRegister("wa"))
	require.Nil(t, h.worker("wa").Models)
	require.Equal(t, []string{"a1", "n1", "a2"}, claimedIDs(h.ok(cClaim("wa", 3))[0].Items))
	checkInvariants(t, h.l)
}

// TestRegisterModelsRefused: a bad model set is refused whole, with an
// error naming what is wrong, and changes nothing.
func TestRegisterModelsRefused(t *testing.T) {
	many := make([]string, limits.MaxWorkerModels+1)
	for i := range many {
		many[i] = fmt.Sprintf("m%d", i)
	}
	for _, tc := range []struct {
		name   string
		models []string
		detail string
	}{
		{"too many", many, fmt.Sprintf("register names %d models, limit %d", limits.MaxWorkerModels+1, limits.MaxWorkerModels)},
		{"too long", []string{"A", strings.Repeat("x", limits.MaxModelBytes+1)}, fmt.Sprintf("register model 1 is %d bytes, limit %d", limits.MaxModelBytes+1, limits.MaxModelBytes)},
		{"empty", []string{"A", ""}, "register model 1 is empty"},
		{"non-printable", []string{"Q\x00wen"}, "register model 0 has a non-printable character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := modelsLedger(t)
			before := persist(t, h.l)
			r := h.applyAt(cRegisterModels("wa", tc.models...))[0]
			require.True(t, errors.Is(r.Err, ErrInvalidCommand), "%v", r.Err)
			require.ErrorContains(t, r.Err, tc.detail)
			require.Equal(t, before, persist(t, h.l), "a refused register changed the ledger")
		})
	}
}

// TestStealByModel: a thief steals only items of the models it serves (and
// of runs naming no model), and picks its victim by how many of those it
// holds.
func TestStealByModel(t *testing.T) {
	h := modelsLedger(t)
	h.ok(cRegister("big"), cRegister("small"))
	require.Len(t, h.ok(cClaim("big", 6))[0].Items, 6)   // a1 b1 n1 a2 b2 n2
	require.Len(t, h.ok(cClaim("small", 3))[0].Items, 3) // a3 b3 n3
	// big holds 2 items of model B and 2 of no model; small 1 and 1.
	r := h.ok(cSteal("wb", 0))[0]
	require.Equal(t, "big", r.Victim)
	require.Equal(t, []string{"n2", "b2"}, claimedIDs(r.Items), "half of the 4 items wb takes, newest first")
	r = h.ok(cSteal("wb", 0))[0]
	require.Equal(t, "big", r.Victim, "a tie of 2 goes to the smaller id")
	require.Equal(t, []string{"n1"}, claimedIDs(r.Items))
	r = h.ok(cSteal("wb", 0))[0]
	require.Equal(t, "small", r.Victim)
	require.Equal(t, []string{"n3"}, claimedIDs(r.Items))
	r = h.ok(cSteal("wb", 0))[0]
	require.Equal(t, "big", r.Victim)
	require.Equal(t, []string{"b1"}, claimedIDs(r.Items))
	r = h.ok(cSteal("wb", 0))[0]
	require.Equal(t, "small", r.Victim)
	require.Equal(t, []string{"b3"}, claimedIDs(r.Items))
	// Only items of model A are held by others now: nothing to steal.
	r = h.ok(cSteal("wb", 0))[0]
	require.Empty(t, r.Victim)
	require.Empty(t, r.Items)
	for _, it := range h.l.Workers() {
		if it.ID == "wb" {
			require.Equal(t, uint64(6), it.Running)
		}
	}
	checkInvariants(t, h.l)
}

// TestModelsSnapshotRoundTrip: models, and the global FIFO order across
// the queues of models, survive a snapshot, and the restored ledger claims
// exactly like the original.
func TestModelsSnapshotRoundTrip(t *testing.T) {
	h := modelsLedger(t)
	h.ok(cClaim("wa", 1))
	h.ok(cNack("a", "a1", "wa", 1)) // a1 goes to the back: b1 n1 a2 b2 n2 a3 b3 n3 a1
	b := persist(t, h.l)
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, b))
	checkInvariants(t, l)
	require.Equal(t, dumpLedger(h.l), dumpLedger(l))
	require.Contains(t, dumpLedger(l), " models=[A B]\n")
	require.Equal(t, b, persist(t, l))
	other := &harness{t: t, l: l, term: h.term, now: h.now, index: h.index}
	for _, x := range []*harness{h, other} {
		require.Equal(t, []string{"A", "B"}, x.worker("wab").Models)
		require.Nil(t, x.worker("wany").Models)
		require.Equal(t, []string{"b1", "n1", "b2"}, claimedIDs(x.ok(cClaim("wb", 3))[0].Items))
		require.Equal(t, []string{"a2", "n2", "a3"}, claimedIDs(x.ok(cClaim("wa", 3))[0].Items))
		require.Equal(t, []string{"b3", "n3", "a1"}, claimedIDs(x.ok(cClaim("wany", 9))[0].Items))
	}
	require.Equal(t, dumpLedger(h.l), dumpLedger(l))
}

// TestModelsSnapshotCorrupt: a worker record whose models are not sorted
// without repeats, or not valid, or in a version 3 stream, is refused as a
// corrupt snapshot.
func TestModelsSnapshotCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version uint32
		models  []string
		detail  string
	}{
		{"unsorted", snapshotVersion, []string{"B", "A"}, "not sorted without repeats"},
		{"repeated", snapshotVersion, []string{"A", "A"}, "not sorted without repeats"},
		{"empty name", snapshotVersion, []string{""}, "register model 0 is empty"},
		{"version 3", 3, []string{"A"}, "a field of version 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream := snapshotStream(t, tc.version, &fsmpb.WorkerRecord{Id: "w", Models: tc.models})
			l, err := New(DefaultConfig())
			require.NoError(t, err)
			err = restore(l, stream)
			require.ErrorIs(t, err, ErrCorruptSnapshot)
			require.ErrorContains(t, err, tc.detail)
		})
	}
	// The same stream with sorted models restores.
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, snapshotStream(t, snapshotVersion, &fsmpb.WorkerRecord{Id: "w", Models: []string{"A", "B"}})))
	ws := l.Workers()
	require.Len(t, ws, 1)
	require.Equal(t, []string{"A", "B"}, ws[0].Models)
}

// snapshotStream crafts a stream of format version v holding one worker
// record and nothing else.
func snapshotStream(t *testing.T, v uint32, wr *fsmpb.WorkerRecord) []byte {
	t.Helper()
	return craftVersion(t, v, &fsmpb.SnapshotHeader{Version: v, Workers: 1},
		&fsmpb.SnapshotRecord{Rec: &fsmpb.SnapshotRecord_Worker{Worker: wr}})
}
