package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/store/storeurl"
)

// TestRunDataPrefix drives a run with a data prefix through the API on one
// real replica: the cluster announces its identity; a range run created
// with its prefix takes chunks under its input prefix only (a payload_ref
// elsewhere, another run's or secret/keys, is INVALID_ARGUMENT naming the
// key and the prefix, and changes nothing); a prefix of another cluster is
// refused; RunStatus and claims carry the prefix; a result under the
// legacy runs/NAME/results/ is an invalid report, one under the run's own
// result prefix applies; an item submit may reference an input in place
// outside every run's objects, never under another run's.
func TestRunDataPrefix(t *testing.T) {
	c := newTestCluster(t, 1, clusterOpts{server: func(sc *Config) { sc.FailureTimeout = time.Hour }})
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var id string
	require.Eventually(t, func() bool {
		resp, err := cl.Cluster(ctx, "")
		id = resp.GetClusterId()
		return err == nil && id != ""
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, storeurl.CheckID("cluster id", id))

	prefix := storeurl.DataPrefix(id, "pp", "0123456789abcdef0123456789abcdef")
	spec := &rolloutv1.RunSpec{Store: "file:///srv/store", Total: 20, MaxFailures: 3, DataPrefix: prefix}
	chunk := func(obj string, index uint64) *rolloutv1.InputRange {
		return &rolloutv1.InputRange{Index: index, Count: 10, PayloadRef: &rolloutv1.DataRef{Object: obj, Length: 160}}
	}
	for _, obj := range []string{"secret/keys", storeurl.InputPrefix("pp") + "a", storeurl.InputPrefix("other") + "a", prefix + "results/a"} {
		_, err := cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "pp", Spec: spec, Ranges: []*rolloutv1.InputRange{chunk(obj, 0)}})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", obj, err)
		require.Contains(t, status.Convert(err).Message(), obj)
		require.Contains(t, status.Convert(err).Message(), prefix+"inputs/")
		_, err = c.runStatus("pp")
		require.Equal(t, codes.NotFound, status.Code(err), "a refused submit creates nothing")
	}
	other := storeurl.DataPrefix("fedcba9876543210fedcba9876543210", "pp", "0123456789abcdef0123456789abcdef")
	_, err := cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "pp",
		Spec:   &rolloutv1.RunSpec{Store: "file:///srv/store", Total: 20, MaxFailures: 3, DataPrefix: other},
		Ranges: []*rolloutv1.InputRange{chunk(other+"inputs/a", 0)}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "another cluster's prefix: %v", err)
	require.Contains(t, err.Error(), "this cluster is")

	_, err = cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "pp", Spec: spec, Ranges: []*rolloutv1.InputRange{chunk(prefix+"inputs/a", 0)}})
	require.NoError(t, err)
	// A later submit without a spec: the recorded prefix is the rule.
	_, err = cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "pp", Ranges: []*rolloutv1.InputRange{chunk(storeurl.InputPrefix("pp")+"b", 10)}})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	_, err = cl.SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: "pp", Ranges: []*rolloutv1.InputRange{chunk(prefix+"inputs/b", 10)}})
	require.NoError(t, err)
	rc, err := c.runStatus("pp")
	require.NoError(t, err)
	require.Equal(t, prefix, rc.GetDataPrefix())
	require.EqualValues(t, 20, rc.GetTotal())

	_, err = cl.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "w1"})
	require.NoError(t, err)
	claim, err := cl.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 1, MaxIndexes: 4})
	require.NoError(t, err)
	require.Len(t, claim.GetItems(), 1)
	a := claim.GetItems()[0]
	require.Equal(t, prefix, a.GetDataPrefix(), "a claim tells the worker where results go")
	sum := make([]byte, 32)
	report := func(obj string) *rolloutv1.RangeReportResult {
		resp, err := cl.ReportRange(ctx, &rolloutv1.ReportRangeRequest{WorkerId: "w1", Reports: []*rolloutv1.RangeReport{{
			Run: "pp", Id: a.GetId(), Attempt: a.GetAttempt(), Lo: 0, DoneTo: 2, ResultRef: &rolloutv1.DataRef{Object: obj, Length: 64, Blake3: sum}}}})
		require.NoError(t, err)
		return resp.GetResults()[0]
	}
	bad := report(storeurl.ResultPrefix("pp") + "r")
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_INVALID, bad.GetStatus())
	require.Contains(t, bad.GetMessage(), prefix+"results/")
	good := report(prefix + "results/r")
	require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, good.GetStatus(), good.GetMessage())

	// Items: in place outside every run's objects is allowed; under
	// another run's (or this run's results) is not.
	item := func(obj string) *rolloutv1.SubmitItemsRequest {
		iid := make([]byte, 32)
		iid[0] = byte(len(obj))
		return &rolloutv1.SubmitItemsRequest{Run: "pi", Spec: &rolloutv1.RunSpec{Store: "file:///srv/store", Total: 1},
			Items: []*rolloutv1.SubmitItem{{Id: iid, Index: 0, PayloadRef: &rolloutv1.DataRef{Object: obj, Length: 10}}}}
	}
	for _, obj := range []string{prefix + "inputs/a", "gateway/files/f/content", "runs/pp/inputs/a"} {
		_, err = cl.SubmitItems(ctx, item(obj))
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", obj, err)
		require.True(t, strings.Contains(err.Error(), obj), err.Error())
	}
	_, err = cl.SubmitItems(ctx, item("datasets/prompts.jsonl"))
	require.NoError(t, err, "an input referenced in place")
}
