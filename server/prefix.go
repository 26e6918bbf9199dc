package server

import (
	"fmt"

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

// dataPrefix is the data prefix of a submit to run: the run's recorded
// one when the local ledger holds it, else the one spec names for the new
// run ("" for runs/NAME/).
func (s *Server) dataPrefix(run string, spec *fsmpb.RunSpec) string {
	if p, ok := s.ledger.RunDataPrefix(run); ok {
		return p
	}
	if h, err := s.ledger.Handle(run); err == nil && h.Spec.GetStore() != "" {
		return fsm.RunDataPrefix(run, h.Spec.GetDataPrefix()) // a run handed to a peer keeps its prefix
	}
	return spec.GetDataPrefix()
}

// checkPayloadObjects refuses, with INVALID_ARGUMENT naming the key and
// the expected prefix, a submit whose payload references name an object
// outside the run's input prefix (storeurl.CheckPayloadKey; inPlace for a
// submit of items, which may reference an input in place outside every
// run's and gateway's objects): a client cannot make workers read, or
// results name, another run's (or another cluster's) objects.
func (s *Server) checkPayloadObjects(method, run string, spec *fsmpb.RunSpec, objects []string, inPlace bool) error {
	p := s.dataPrefix(run, spec)
	for _, o := range objects {
		if err := storeurl.CheckPayloadKey(o, run, p, inPlace); err != nil {
			return status.Error(codes.InvalidArgument, fmt.Sprintf("%s refused, nothing was changed: %v", method, err))
		}
	}
	return nil
}
