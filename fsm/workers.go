package fsm

import (
	"fmt"
	"math"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// registerCommand: RegisterWorkerCmd registers or refreshes a worker.
func registerCommand() commandSpec {
	return commandSpec{
		oneof: (*fsmpb.Command_Register)(nil), label: "register",
		apply: func(l *Ledger, _ uint64, c *fsmpb.Command) Result { return l.applyRegister(c.GetRegister()) },
		before: func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore {
			if w := l.st.workers[c.GetRegister().GetWorker()]; w != nil {
				b.existed, b.lost = true, w.lost
			}
			return b
		},
		events: func(l *Ledger, c *fsmpb.Command, b eventsBefore, _ Result) {
			switch {
			case !b.existed:
				l.record(EventWorkerRegistered, "", c.GetRegister().GetWorker(), "", "", 0)
			case b.lost:
				l.record(EventWorkerRegistered, "", c.GetRegister().GetWorker(), "", "registered again after it was lost", 0)
			}
		},
		kinds:    []EventKind{EventWorkerRegistered},
		snapshot: partWorkers | partEvents,
	}
}

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
