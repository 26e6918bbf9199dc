package coordtest

import (
	"bytes"
	"fmt"

	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
)

// Finish ends the item of run at index from the test, as a worker's report
// would without one: with reason "" it becomes Done with result and ref
// (either may be nil) and its dependents that wait on nothing more join the
// queue; else it becomes Dead with reason. It fails, changing nothing, for
// an unknown item or a range record (ranges end through ReportRange).
func (s *Server) Finish(run string, index uint64, result []byte, ref *rolloutv1.DataRef, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var it *item
	for _, r := range s.recordsLocked(run) {
		if r.Index == index {
			it = r
		}
	}
	switch {
	case it == nil:
		return fmt.Errorf("coordtest: run %q has no item at index %d", run, index)
	case it.isRange():
		return fmt.Errorf("coordtest: run %q holds a range at index %d; finish it with ReportRange", run, index)
	}
	it.Owner = ""
	if reason != "" {
		it.State, it.Reason = Dead, reason
		s.notifyLocked()
		return nil
	}
	it.State, it.Result, it.Reason = Done, bytes.Clone(result), ""
	if ref != nil {
		it.ResultRef = proto.Clone(ref).(*rolloutv1.DataRef)
	}
	s.unblockLocked(it)
	s.notifyLocked()
	return nil
}
