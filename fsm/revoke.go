package fsm

import (
	"fmt"
	"slices"
	"time"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// Revocation is one entry of the ledger's revocation list: a certificate
// revoked by serial number (Serial, lowercase hex) or every certificate of
// a name (Name). Holder is the name the serial's certificate was seen
// with, Role the role of the name or holder when known, By the admin who
// revoked it, At the leader's time of the revocation.
type Revocation struct {
	Serial, Name, Holder, Role, By, Reason string
	At                                     time.Time
}

// revocation is the stored form (a Unix-nanosecond time).
func (r Revocation) covers(name, serial string) bool {
	return (r.Serial != "" && r.Serial == serial) || (r.Name != "" && r.Name == name)
}

// maxSerialBytes bounds a serial number's hex form (RFC 5280: 20 octets;
// some issuers exceed it, so allow twice that).
const maxSerialBytes = 80

// revokedWorker is the worker a revocation evicts (when registered): its
// name, or the holder of its serial, when the role is worker.
func revokedWorker(c *fsmpb.RevokeCmd) string {
	if c.GetRole() != "worker" {
		return ""
	}
	if c.GetName() != "" {
		return c.GetName()
	}
	return c.GetHolder()
}

// revokeDetail is the detail of the eviction event of a revocation.
func revokeDetail(c *fsmpb.RevokeCmd) string {
	what := "name " + c.GetName()
	if c.GetSerial() != "" {
		what = "serial " + c.GetSerial()
	}
	d := fmt.Sprintf("certificate revoked (%s) by %s", what, c.GetByName())
	if c.GetReason() != "" {
		d += ": " + c.GetReason()
	}
	return limits.CleanReason(d)
}

func checkSerialHex(what, s string) error {
	if len(s) > maxSerialBytes {
		return invalidErr("%s is %d bytes, limit %d", what, len(s), maxSerialBytes)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return invalidErr("%s %q is not lowercase hexadecimal", what, s)
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return invalidErr("%s %q has a leading zero", what, s)
	}
	return nil
}

// revokeCommand: RevokeCmd revokes a certificate and evicts its worker.
func revokeCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_Revoke)(nil), label: "revoke",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applyRevoke(c.GetRevoke()) },
		check: func(c *fsmpb.Command) error {
			return checkText("revoke reason", c.GetRevoke().GetReason(), limits.MaxReasonBytes)
		},
		before: func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore {
			if w := revokedWorker(c.GetRevoke()); w != "" {
				_, b.existed = l.st.workers[w]
			}
			return b
		},
		events: func(l *Ledger, c *fsmpb.Command, b eventsBefore, res Result) {
			if b.existed {
				l.record(EventWorkerEvicted, "", revokedWorker(c.GetRevoke()), "", revokeDetail(c.GetRevoke()), uint64(res.Repended))
			}
		},
		kinds:    []EventKind{EventWorkerEvicted},
		snapshot: partHeader | partRevocations | partRuns | partItems | partWorkers | partTenants | partEvents,
	}
}

// applyRevoke adds an entry to the revocation list (see RevokeCmd), evicts
// the revoked worker if it is registered (its Running items go back to
// Pending, as an eviction), and remembers the asking admin.
func (l *Ledger) applyRevoke(c *fsmpb.RevokeCmd) Result {
	if (c.GetSerial() == "") == (c.GetName() == "") {
		return invalid("revoke: exactly one of serial and name must be set")
	}
	if err := checkSerialHex("revoke serial", c.GetSerial()); err != nil {
		return fail(err)
	}
	if c.GetSerial() == "" {
		if err := checkName("revoke name", c.GetName(), limits.MaxWorkerIDBytes); err != nil {
			return fail(err)
		}
	}
	for what, v := range map[string]string{"revoke holder": c.GetHolder(), "revoke role": c.GetRole()} {
		if err := checkText(what, v, limits.MaxWorkerIDBytes); err != nil {
			return fail(err)
		}
	}
	if err := checkName("revoke by_name", c.GetByName(), limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	if err := checkSerialHex("revoke by_serial", c.GetBySerial()); err != nil {
		return fail(err)
	}
	st := l.st
	for _, r := range st.revoked {
		if (c.GetSerial() != "" && r.Serial == c.GetSerial()) || (c.GetName() != "" && r.Name == c.GetName()) {
			return fail(fmt.Errorf("%w: %s", ErrAlreadyRevoked, revokeWhat(c)))
		}
	}
	entry := Revocation{Serial: c.GetSerial(), Name: c.GetName(), Holder: c.GetHolder(), Role: c.GetRole(),
		By: c.GetByName(), Reason: c.GetReason(), At: unixTime(st.now)}
	// The asking admin is known from now on, whatever happens below.
	admins := cloneAdmins(st.admins)
	if c.GetBySerial() != "" {
		admins[c.GetByName()] = c.GetBySerial()
	}
	if entry.covers(c.GetByName(), c.GetBySerial()) {
		// The admin revokes its own certificate: another known admin
		// certificate must stay valid.
		other := false
		for name, serial := range admins {
			if name == c.GetByName() || entry.covers(name, serial) {
				continue
			}
			if !slices.ContainsFunc(st.revoked, func(r Revocation) bool { return r.covers(name, serial) }) {
				other = true
				break
			}
		}
		if !other {
			return fail(fmt.Errorf("%w: %s is the certificate of %s, and no other admin certificate is known to the cluster "+
				"(an admin becomes known by revoking a certificate; issue another admin certificate and use it first)",
				ErrLastAdmin, revokeWhat(c), c.GetByName()))
		}
	}
	st.admins = admins
	st.revoked = append(st.revoked, entry)
	var res Result
	if w := st.workers[revokedWorker(c)]; w != nil {
		n := st.repend(w)
		if n > 0 {
			l.addedPending = true
		}
		delete(st.workers, w.id)
		res.Repended = n
	}
	return res
}

func cloneAdmins(m map[string]string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

func revokeWhat(c *fsmpb.RevokeCmd) string {
	if c.GetSerial() != "" {
		return "serial " + c.GetSerial()
	}
	return "name " + c.GetName()
}

// Revocations returns the revocation list in commit order.
func (l *Ledger) Revocations() []Revocation {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return slices.Clone(l.st.revoked)
}

// RevocationCount returns how many entries the revocation list holds: a
// cheap test for a change (the list only grows, and a restore replaces it
// with a list at least as long as the one it had at that commit).
func (l *Ledger) RevocationCount() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.st.revoked)
}

// KnownAdmins returns the known admin certificates, name to serial (see
// RevokeCmd).
func (l *Ledger) KnownAdmins() map[string]string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return cloneAdmins(l.st.admins)
}
