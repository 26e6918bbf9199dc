package coordtest

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store/storeurl"
)

// SetClusterID sets the identity Cluster announces (Start: ClusterID). A
// new run's data_prefix must name it, as the ledger checks.
func (s *Server) SetClusterID(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clusterID = id
}

// checkSpecLocked refuses (INVALID_ARGUMENT, nothing changed), as the
// ledger does, a submit whose spec names for an existing run another store
// or another data_prefix than the run's, or for a new run a data_prefix
// that is not of this cluster and run (storeurl.CheckDataPrefix). The
// range rules name the request "submit_ranges", the item ones "submit".
func (s *Server) checkSpecLocked(what, run string, spec *rolloutv1.RunSpec) error {
	if spec == nil {
		return nil
	}
	old, exists := s.specs[run]
	if exists && len(s.recordsLocked(run)) == 0 {
		exists = false // a spec set ahead of the run (SetSpec)
	}
	p := spec.GetDataPrefix()
	switch {
	case exists && spec.GetStore() != old.GetStore():
		return status.Errorf(codes.InvalidArgument, "invalid command: %s names store %q for run %q, whose store is %q", what, spec.GetStore(), run, old.GetStore())
	case exists && p != "" && p != old.GetDataPrefix():
		return status.Errorf(codes.InvalidArgument, "invalid command: %s names data_prefix %q for run %q, whose data_prefix is %q", what, p, run, old.GetDataPrefix())
	case !exists && p != "":
		if err := storeurl.CheckDataPrefix(p, s.clusterID, run); err != nil {
			return status.Errorf(codes.InvalidArgument, "invalid command: %v", err)
		}
	}
	return nil
}
