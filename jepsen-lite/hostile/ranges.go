package hostile

import (
	"context"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/limits"
	"github.com/rollout/rollout/store"
)

// Range attacks: SubmitRanges and ReportRange (a range run's records
// stand for [index, index+count) of an input chunk) sent malformed, with
// the wrong role, or for ranges the sender does not hold. A malformed
// request must be refused at the edge (InvalidArgument naming the field)
// and change nothing; a report for another's range must miss.

// rangeSubmit sends a SubmitRanges the edge must refuse into a new hostile
// run (or, for RangeSubmitWorker, a well-formed one with a worker's
// certificate), then checks that the run was not created.
func (n *Nemesis) rangeSubmit(ctx context.Context, a Attack) result {
	run := fmt.Sprintf("hostile-ranges-%d", n.next())
	chunk := func(index, count uint64) *rolloutv1.InputRange {
		sum := store.Hash([]byte(run))
		return &rolloutv1.InputRange{Index: index, Count: count,
			PayloadRef: &rolloutv1.DataRef{Object: store.InputPrefix(run) + hex.EncodeToString(sum[:]), Length: 64}}
	}
	req := &rolloutv1.SubmitRangesRequest{Run: run, Spec: &rolloutv1.RunSpec{Store: "file:///hostile", MaxFailures: 3}}
	identity := n.cfg.Client
	var what string
	switch {
	case a == RangeSubmitWorker:
		identity = n.pick(n.cfg.Workers)
		req.Ranges = []*rolloutv1.InputRange{chunk(0, 10)}
		what = "a well-formed chunk"
	default:
		switch n.variant(a, 7) {
		case 0:
			req.Ranges = []*rolloutv1.InputRange{chunk(0, 10), chunk(5, 10)}
			what = "chunks [0, 10) and [5, 15) overlap"
		case 1:
			req.Ranges = []*rolloutv1.InputRange{chunk(0, 10), chunk(10, 0)}
			what = "a chunk of count 0"
		case 2:
			req.Ranges = []*rolloutv1.InputRange{chunk(math.MaxUint64-1, 3)}
			what = "a chunk at index 2^64-2 of count 3 (index+count overflows)"
		case 3:
			req.Ranges = []*rolloutv1.InputRange{chunk(0, limits.MaxRangeCount+1)}
			what = fmt.Sprintf("a chunk of %d lines", uint64(limits.MaxRangeCount+1))
		case 4:
			req.Ranges = []*rolloutv1.InputRange{chunk(0, 10)}
			req.Ranges[0].PayloadRef.Object = "secret/keys"
			what = "a payload_ref outside the run's input prefix (secret/keys)"
		case 5:
			req.Ranges = []*rolloutv1.InputRange{chunk(0, 10)}
			req.Ranges[0].PayloadRef.Object = store.InputPrefix(run+"-other") + "chunk"
			what = "a payload_ref under another run's input prefix"
		default:
			req.Spec.Store = ""
			req.Ranges = []*rolloutv1.InputRange{chunk(0, 10)}
			what = "a spec without a store"
		}
	}
	// A worker's certificate may have been revoked (the certs nemesis): a
	// TLS refusal is then no answer to the request, as for the forged
	// reports.
	cf := whenServing
	if identity != n.cfg.Client {
		cf = transient
	}
	var created uint64
	r := n.retry(ctx, cf, func(cctx context.Context, rep Replica) (string, error) {
		c, err := n.conn(identity, rep.GRPCAddr)
		if err != nil {
			return "", err
		}
		resp, err := c.SubmitRanges(cctx, req)
		if err != nil {
			return "", err
		}
		created = resp.GetCreated() + resp.GetCreatedDead()
		return "OK", nil
	})
	r.as = identity
	r.describe("%s's certificate: SubmitRanges into the new run %s: %s", identity, run, what)
	var changes []string
	if created > 0 {
		changes = append(changes, fmt.Sprintf("%d hostile indexes created in run %s", created, run))
	}
	if total, ok := n.runTotal(ctx, run); ok {
		changes = append(changes, fmt.Sprintf("run %s exists with %d indexes", run, total))
	}
	r.changed = strings.Join(changes, "; ")
	return r
}

// runTotal reads run's total with the client identity; ok is false when
// the run does not exist (or cannot be read).
func (n *Nemesis) runTotal(ctx context.Context, run string) (uint64, bool) {
	deadline := time.Now().Add(n.cfg.Window / 2)
	for {
		if rep, _, err := n.leader(ctx); err == nil {
			if c, err := n.conn(n.cfg.Client, rep.GRPCAddr); err == nil {
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				resp, err := c.RunStatus(cctx, &rolloutv1.RunStatusRequest{Run: run})
				cancel()
				switch {
				case status.Code(err) == codes.NotFound:
					return 0, false
				case err == nil:
					for _, rc := range resp.GetRuns() {
						if rc.GetName() == run {
							return rc.GetTotal(), true
						}
					}
					return 0, false
				}
			}
		}
		if time.Now().After(deadline) || !sleepUntil(ctx, time.Now().Add(300*time.Millisecond)) {
			return 0, false
		}
	}
}

// rangeReport sends a ReportRange: malformed ones (refused at the edge)
// as a worker reporting as itself on a workload run; a well-formed one for
// another worker's range (or item) as the owner (a worker's certificate
// naming the owner; the client certificate), and as the forger itself
// (the ledger's compare-and-swap must miss); one for a run that does not
// exist.
func (n *Nemesis) rangeReport(ctx context.Context, a Attack) result {
	forger := n.pick(n.cfg.Workers)
	identity, workerID := forger, forger
	run := n.pick(n.cfg.Runs)
	id := []byte("R\x00\x00\x00\x00\x00\x00\x00\x01")
	sum := store.Hash(fmt.Appendf(nil, "hostile %s #%d", a, n.next()))
	ref := func(run string) *rolloutv1.DataRef {
		return &rolloutv1.DataRef{Object: store.ResultPrefix(run) + hex.EncodeToString(sum[:]), Length: 64, Blake3: sum[:]}
	}
	rep := &rolloutv1.RangeReport{Run: run, Id: id, Attempt: 1, Lo: 100, DoneTo: 110, ResultRef: ref(run)}
	var what string
	switch a {
	case RangeReportMalformed:
		switch n.variant(a, 5) {
		case 0:
			rep.Lo, rep.DoneTo = 110, 100
			what = "done_to below lo"
		case 1:
			rep.Failed = []*rolloutv1.FailedIndex{{Index: 110, Reason: "hostile"}}
			what = "a failed index at done_to"
		case 2:
			rep.Failed = []*rolloutv1.FailedIndex{{Index: 104}, {Index: 104}}
			what = "one failed index twice"
		case 3:
			rep.ReleaseFrom = rep.Lo
			what = "release_from equal to lo"
		default:
			rep.ResultRef = nil
			what = "done indexes without a result_ref"
		}
	case RangeReportManyFailed:
		const many = 1 << 20
		rep.DoneTo = rep.Lo + 2*many
		rep.Failed = make([]*rolloutv1.FailedIndex, many)
		for i := range rep.Failed {
			rep.Failed[i] = &rolloutv1.FailedIndex{Index: rep.Lo + uint64(i)}
		}
		what = fmt.Sprintf("%d failed indexes", many)
	case RangeReportGoneRun:
		rep.Run = fmt.Sprintf("hostile-gone-%d", n.next())
		rep.ResultRef = ref(rep.Run)
		what = "a run that does not exist"
	default:
		v, err := n.victim(ctx)
		if err != nil {
			return result{got: Inconclusive, detail: err.Error()}
		}
		forger = n.pick(n.others(v.owner))
		identity, workerID = forger, v.owner
		switch a {
		case RangeReportCAS:
			workerID = forger
		case RangeReportClient:
			identity = n.cfg.Client
		}
		rep = &rolloutv1.RangeReport{Run: v.run, Id: v.id, Attempt: v.attempt, Lo: v.index, DoneTo: v.index + max(v.count, 1), ResultRef: ref(v.run)}
		what = "progress over all of " + v.String()
	}
	var msgs []string
	timeout := callTimeout
	if a == RangeReportManyFailed {
		timeout = 4 * callTimeout // megabytes to send and decode
	}
	r := n.retryFor(ctx, transient, timeout, func(cctx context.Context, rp Replica) (string, error) {
		c, err := n.conn(identity, rp.GRPCAddr)
		if err != nil {
			return "", err
		}
		resp, err := c.ReportRange(cctx, &rolloutv1.ReportRangeRequest{WorkerId: workerID, Reports: []*rolloutv1.RangeReport{rep}})
		if err != nil {
			return "", err
		}
		var got []string
		msgs = msgs[:0]
		for _, res := range resp.GetResults() {
			got = append(got, shortStatus(res.GetStatus()))
			if m := res.GetMessage(); m != "" {
				msgs = append(msgs, m)
			}
		}
		if len(got) == 0 {
			return "OK", nil
		}
		return strings.Join(got, "+"), nil
	})
	if len(msgs) > 0 {
		r.detail = strings.Join(msgs, "; ")
	}
	r.as = identity
	if strings.Contains(r.got, "APPLIED") {
		r.changed = fmt.Sprintf("the hostile range report (%s) was applied", what)
	}
	r.describe("%s's certificate as worker %s: ReportRange of %s/%x [%d, %d): %s", identity, workerID, rep.GetRun(), rep.GetId(), rep.GetLo(), rep.GetDoneTo(), what)
	return r
}

// variant returns which of k variants attack a sends this time: each in
// turn, from the first.
func (n *Nemesis) variant(a Attack, k int) int {
	v := n.variants[a] % k
	n.variants[a]++
	return v
}
