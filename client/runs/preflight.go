package runs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/store/storeurl"
)

// errStopWalk ends a results walk early; it is never returned.
var errStopWalk = errors.New("stop")

// preflight asks the cluster, before Submit uploads a byte to the store,
// whether it would take the submit: what the cluster would refuse only after
// the upload (a certificate that may not submit, a cancelled run, another
// store, other items at the input's indexes) is refused first, with
// ErrSubmitRefused, and nothing is uploaded.
type preflight struct {
	c       Coordinator
	run     string
	timeout time.Duration
	// overlap is set while the run may hold items at the indexes of the
	// chunks still to come (it existed before this submit, and the last
	// check found items at or after the chunk's first index).
	overlap bool
	// first is the run's first record when it existed before this submit
	// (what it is: items or ranges).
	first *rolloutv1.ResultItem
	// rc is the run's status when it existed before this submit (nil: a
	// new run).
	rc *rolloutv1.RunCounters
}

// newPreflight reads the run's status and checks the caller's right to
// submit (a Results call: the cluster grants it to exactly the roles that
// may submit), then the run against spec and as (the tenant the submit by
// the certificate id acts as, see submitter): a run of another tenant, a cancelled run, or
// one whose store is not spec's, is refused. A run whose store is spec's
// spelled otherwise (storeurl.SameStore) is not: spec.Store becomes the
// run's spelling, the one string the ledger takes for it.
func newPreflight(ctx context.Context, c Coordinator, run string, spec *rolloutv1.RunSpec, id mtls.Identity, as string, timeout time.Duration) (*preflight, error) {
	p := &preflight{c: c, run: run, timeout: timeout}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	resp, err := c.Results(cctx, &rolloutv1.ResultsRequest{Run: run, Limit: 1})
	cancel()
	if len(resp.GetItems()) > 0 {
		p.first = resp.GetItems()[0]
	}
	switch {
	case status.Code(err) == codes.PermissionDenied:
		return nil, fmt.Errorf("%w: the cluster does not let this certificate submit (%v); nothing was uploaded", ErrSubmitRefused, grpcMessage(err))
	case isNotFound(err):
		return p, nil // a new run: nothing to conflict with
	case err != nil:
		return nil, callError("asking the cluster whether it takes the submit (nothing was uploaded)", timeout, err)
	}
	_, rc, err := Status(ctx, c, run, timeout)
	if errors.Is(err, ErrRunNotFound) {
		return p, nil // a new run: nothing to conflict with
	}
	if err != nil {
		return nil, err
	}
	if err := checkRunOwner(run, id, as, rc); err != nil {
		return nil, err
	}
	switch {
	case rc.GetCancelled():
		return nil, fmt.Errorf("%w: run %q was cancelled; it takes no new items (delete it to reuse the name); nothing was uploaded", ErrSubmitRefused, run)
	case rc.GetStore() != spec.GetStore() && storeurl.SameStore(rc.GetStore(), spec.GetStore()):
		// The run's store spelled otherwise (recorded before store URLs
		// were normalised): resume it with its own spelling.
		spec.Store = rc.GetStore()
	case rc.GetStore() != spec.GetStore(): // the ledger compares the strings
		return nil, fmt.Errorf("%w: run %q keeps its data in store %q, this submit names store %q; nothing was uploaded",
			ErrSubmitRefused, run, storeurl.Redact(rc.GetStore()), storeurl.Redact(spec.GetStore()))
	}
	p.overlap, p.rc = true, rc
	return p, nil
}

// dataPrefix sets spec.DataPrefix for the submit p checked: the run's own
// when it existed, else a fresh incarnation on the cluster (whose identity
// it waits for up to p's timeout).
func (p *preflight) dataPrefix(ctx context.Context, spec *rolloutv1.RunSpec) error {
	var id string
	if p.rc == nil {
		var err error
		if id, err = ClusterID(ctx, p.c, p.timeout); err != nil {
			return err
		}
	}
	prefix, err := specDataPrefix(p.run, p.rc, id)
	if err != nil {
		return err
	}
	spec.DataPrefix = prefix
	return nil
}

// grpcMessage is the message of the gRPC status err carries (without the
// wrapping of the client), else err's text.
func grpcMessage(err error) string {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Message()
	}
	return err.Error()
}

// check refuses items (ascending indexes) when the run holds another item
// (another id) at one of their indexes, as the ledger would. It reads only
// the run's items in the items' index range, and nothing once a check found
// that the run holds no item at or after a chunk's first index.
func (p *preflight) check(ctx context.Context, items []*rolloutv1.SubmitItem) error {
	if p == nil || !p.overlap || len(items) == 0 {
		return nil
	}
	first, last := items[0].GetIndex(), items[len(items)-1].GetIndex()
	ids := make(map[uint64][]byte, len(items))
	for _, it := range items {
		ids[it.GetIndex()] = it.GetId()
	}
	seen := false
	err := resultsFrom(ctx, p.c, p.run, first, ResultsConfig{PageSize: uint32(min(len(items), DefaultPageSize)), Timeout: p.timeout},
		func(it *rolloutv1.ResultItem) error {
			seen = true
			if it.GetIndex() > last {
				return errStopWalk
			}
			if id, ok := ids[it.GetIndex()]; ok && !bytes.Equal(id, it.GetId()) {
				return fmt.Errorf("%w: run %q holds another item at index %d (id %x; this input's is %x): the input, model or sampling "+
					"differ from the run's (submit it under another run name); items %d..%d were not uploaded",
					ErrSubmitRefused, p.run, it.GetIndex(), it.GetId(), id, first, last)
			}
			return nil
		})
	switch {
	case errors.Is(err, errStopWalk), err == nil:
	case errors.Is(err, ErrRunNotFound):
		p.overlap = false // deleted meanwhile: the ledger decides
		return nil
	case status.Code(err) == codes.PermissionDenied:
		return fmt.Errorf("%w: the cluster does not let this certificate submit (%v); items %d..%d were not uploaded", ErrSubmitRefused, grpcMessage(err), first, last)
	default:
		return err
	}
	if !seen {
		p.overlap = false
	}
	return nil
}
