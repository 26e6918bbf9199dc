package server

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/store/storeurl"
)

// resultPrefix is where run's result objects live: under its recorded
// data prefix (fsm.RunDataPrefix), or "runs/NAME/results/" for a run the
// local ledger does not hold (the ledger refuses the report anyway).
func (s *Server) resultPrefix(run string) string {
	p, ok := s.ledger.RunDataPrefix(run)
	if !ok {
		return storeurl.ResultPrefix(run)
	}
	return p + "results/"
}

// inputPrefix is where the payloads of a submit to run must live: under
// the run's recorded data prefix when the local ledger holds it, else
// under the one spec names for the new run (runs/NAME/ when none).
func (s *Server) inputPrefix(run string, spec *fsmpb.RunSpec) string {
	p, ok := s.ledger.RunDataPrefix(run)
	if !ok {
		p = fsm.RunDataPrefix(run, spec.GetDataPrefix())
	}
	return p + "inputs/"
}

// checkPayloadObjects refuses, with INVALID_ARGUMENT naming the key and
// the expected prefix, a submit whose payload references name an object
// outside the run's input prefix: a client cannot make workers read, or
// results name, another run's (or another cluster's) objects.
func (s *Server) checkPayloadObjects(method, run string, spec *fsmpb.RunSpec, objects []string) error {
	want := s.inputPrefix(run, spec)
	for _, o := range objects {
		if !strings.HasPrefix(o, want) {
			return status.Error(codes.InvalidArgument, fmt.Sprintf(
				"%s refused, nothing was changed: payload_ref object %q is not under run %q's input prefix %q", method, o, run, want))
		}
	}
	return nil
}
