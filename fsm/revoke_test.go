package fsm

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// TestRevokeEvictsWorker: revoking a registered worker (by name, or by a
// serial whose holder is the worker) re-pends its Running items at once,
// removes it, records an eviction event, and its late reports miss.
func TestRevokeEvictsWorker(t *testing.T) {
	h := newHarness(t)
	h.ok(cEpoch("c1", "g1"))
	h.ok(cRegisterAll("w1", "w2")...)
	h.ok(cSubmit("r", nil, false, ni("a", 0, "pa"), ni("b", 1, "pb"), ni("c", 2, "pc")))
	h.ok(cClaim("w1", 2))
	h.ok(cClaim("w2", 1))

	res := h.ok(cRevoke("", "w1", "", "worker", "root", "ab"))
	require.Equal(t, 2, res[0].Repended)
	require.Equal(t, uint64(2), h.run("r").Pending)
	for _, w := range h.l.Workers() {
		require.NotEqual(t, "w1", w.ID, "the revoked worker is no longer registered")
	}
	r := h.one(cComplete("r", "a", "w1", 1, "late"))
	require.Error(t, r.Err, "a late report of the revoked worker is refused")
	evs, _, _ := h.l.Events(0, 0, "")
	require.Equal(t, EventWorkerEvicted, evs[len(evs)-1].Kind)
	require.Contains(t, evs[len(evs)-1].Detail, "certificate revoked (name w1) by root")

	// By serial, with the holder the server saw: w2 is evicted too.
	res = h.ok(cRevoke("3f", "", "w2", "worker", "root", "ab"))
	require.Equal(t, 1, res[0].Repended)
	require.Equal(t, uint64(3), h.run("r").Pending)

	got := h.l.Revocations()
	require.Len(t, got, 2)
	require.Equal(t, "w1", got[0].Name)
	require.Equal(t, "3f", got[1].Serial)
	require.Equal(t, "w2", got[1].Holder)
	require.Equal(t, h.now.UTC(), got[1].At)
	require.Equal(t, map[string]string{"root": "ab"}, h.l.KnownAdmins())
	checkInvariants(t, h.l)
}

// TestRevokeRefusals: a repeated entry is ErrAlreadyRevoked, malformed
// commands are ErrInvalidCommand; none changes the list.
func TestRevokeRefusals(t *testing.T) {
	h := newHarness(t)
	h.ok(cRevoke("3f", "", "", "", "root", "ab"))
	h.ok(cRevoke("", "gw", "", "client", "root", "ab"))
	require.ErrorIs(t, h.one(cRevoke("3f", "", "", "", "root", "ab")).Err, ErrAlreadyRevoked)
	require.ErrorIs(t, h.one(cRevoke("", "gw", "", "", "root", "ab")).Err, ErrAlreadyRevoked)
	for _, c := range []*fsmpb.Command{
		cRevoke("", "", "", "", "root", "ab"),      // neither
		cRevoke("3e", "x", "", "", "root", "ab"),   // both
		cRevoke("3G", "", "", "", "root", "ab"),    // not lowercase hex
		cRevoke("03e", "", "", "", "root", "ab"),   // leading zero
		cRevoke("3e", "", "", "", "", "ab"),        // no admin
		cRevoke("", "bad\nname", "", "", "r", "1"), // unprintable
	} {
		require.ErrorIs(t, h.one(c).Err, ErrInvalidCommand, "%v", c)
	}
	require.Len(t, h.l.Revocations(), 2)
}

// TestRevokeLastAdmin: an admin may not revoke its own certificate (by
// serial or name) while it is the only known admin; once another admin is
// known (it revoked something), it may, and then the other may not.
func TestRevokeLastAdmin(t *testing.T) {
	h := newHarness(t)
	require.ErrorIs(t, h.one(cRevoke("ab", "", "", "admin", "root", "ab")).Err, ErrLastAdmin)
	require.ErrorIs(t, h.one(cRevoke("", "root", "", "admin", "root", "ab")).Err, ErrLastAdmin)
	require.Empty(t, h.l.Revocations())
	require.Empty(t, h.l.KnownAdmins(), "a refused command changes nothing")

	// Another admin, ops, becomes known by revoking a certificate.
	h.ok(cRevoke("99", "", "", "", "ops", "cd"))
	h.ok(cRevoke("ab", "", "", "admin", "root", "ab"))
	// ops is now the last valid known admin: root's entry covers root.
	require.ErrorIs(t, h.one(cRevoke("", "ops", "", "admin", "ops", "cd")).Err, ErrLastAdmin)
	// Revoking another admin's certificate is not refused.
	h.ok(cRevoke("", "root", "", "admin", "ops", "cd"))
	require.Len(t, h.l.Revocations(), 3)
}

// TestRevokeSnapshotRoundTrip: the list and the known admins survive
// Persist and Restore, and the restored ledger refuses the same repeats.
func TestRevokeSnapshotRoundTrip(t *testing.T) {
	h := newHarness(t)
	h.ok(cRevoke("3f", "", "w9", "worker", "root", "ab"))
	h.ok(cRevoke("", "c3", "", "replica", "ops", "cd"))
	b := persist(t, h.l)
	l, err := New(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, restore(l, b))
	require.Equal(t, h.l.Revocations(), l.Revocations())
	require.Equal(t, h.l.KnownAdmins(), l.KnownAdmins())
	require.Equal(t, b, persist(t, l))
	other := &harness{t: t, l: l, term: h.term, now: h.now, index: h.index}
	require.ErrorIs(t, other.one(cRevoke("3f", "", "", "", "root", "ab")).Err, ErrAlreadyRevoked)
}

// TestRevokedCannotRegister: a worker whose name, or whose certificate
// serial, is on the list may not register again (even through a replica
// whose own revocation set lags the commit); others may.
func TestRevokedCannotRegister(t *testing.T) {
	h := newHarness(t)
	reg := func(worker, serial string) *fsmpb.Command {
		return &fsmpb.Command{Cmd: &fsmpb.Command_Register{Register: &fsmpb.RegisterWorkerCmd{Worker: worker, CertSerial: serial}}}
	}
	h.ok(reg("w1", "a1"), reg("w2", "a2"))
	h.ok(cRevoke("", "w1", "", "worker", "root", "ab"))
	h.ok(cRevoke("a2", "", "w2", "worker", "root", "ab"))
	require.ErrorIs(t, h.one(reg("w1", "a9")).Err, ErrCertRevoked, "the name is revoked whatever the serial")
	require.ErrorIs(t, h.one(reg("w2", "a2")).Err, ErrCertRevoked, "the serial is revoked")
	h.ok(reg("w2", "a3")) // w2 with a new certificate
	h.ok(reg("w3", ""))   // no TLS
	require.ErrorIs(t, h.one(reg("w4", "XY")).Err, ErrInvalidCommand)
}
