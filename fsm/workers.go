package fsm

import (
	"fmt"
	"math"
	"time"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// applyRegister registers a worker, or refreshes a registered one: its
// heartbeat becomes now and Lost is cleared; the items it owns stay its. Its
// kinds and models become the command's (replacing earlier ones); a refused
// kind or model set refuses the whole command and changes nothing.
func (l *Ledger) applyRegister(c *fsmpb.RegisterWorkerCmd) Result {
	if err := checkName("register worker", c.GetWorker(), limits.MaxWorkerIDBytes); err != nil {
		return fail(err)
	}
	kinds, err := checkKinds(c.GetKinds())
	if err != nil {
		return fail(err)
	}
	models, err := checkModels(c.GetModels())
	if err != nil {
		return fail(err)
	}
	if err := checkSerialHex("register cert_serial", c.GetCertSerial()); err != nil {
		return fail(err)
	}
	for _, r := range l.st.revoked {
		if r.covers(c.GetWorker(), c.GetCertSerial()) {
			return fail(fmt.Errorf("%w: worker %q (certificate serial %q) may not register", ErrCertRevoked, c.GetWorker(), c.GetCertSerial()))
		}
	}
	w := l.st.register(c.GetWorker())
	w.kinds = kinds
	w.models = models
	return Result{}
}

// retentionNano is how long a Lost worker stays after its last heartbeat:
// factor × timeout, saturating instead of overflowing.
func retentionNano(timeout int64, factor uint32) int64 {
	if timeout > math.MaxInt64/int64(factor) {
		return math.MaxInt64
	}
	return timeout * int64(factor)
}

// ExpiryDue reports whether an ExpireWorkers command with this timeout,
// stamped at now, would change the ledger: a live worker silent for longer
// than timeout (it would be marked Lost), or a Lost worker holding nothing
// and silent for longer than Config.LostWorkerRetention × timeout (it would
// be removed). The leader's failure scan uses it to decide when to propose
// one; the command itself decides from the stamped time.
func (l *Ledger) ExpiryDue(now time.Time, timeout time.Duration) bool {
	if timeout <= 0 {
		return false
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	t := now.UnixNano()
	retention := retentionNano(int64(timeout), l.cfg.LostWorkerRetention)
	for _, w := range l.st.workers {
		silent := t - w.lastHeartbeat
		if !w.lost && silent > int64(timeout) {
			return true
		}
		if w.lost && w.owned.len == 0 && silent > retention {
			return true
		}
	}
	return false
}
