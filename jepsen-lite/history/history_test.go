package history_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/worker"
)

func TestWriterRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	w, err := history.Create(path, "w1/42")
	require.NoError(t, err)
	require.Equal(t, uint64(1), w.NextCall())
	require.Equal(t, uint64(2), w.NextCall())
	before := history.Now()
	w.Write(history.Event{Type: history.TypeInvoke, Op: "Claim", Call: 2, Worker: "w1"})
	w.Write(history.Event{Type: history.TypeOK, Op: "Claim", Call: 2, Worker: "w1", Term: 3,
		Items: []history.Item{{Run: "r", ID: "ab", Index: 7, Attempt: 2}}})
	w.Write(history.Event{Process: "other", Time: 5, Type: history.TypeInfo, Op: "start"})
	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "Close is idempotent")
	w.Write(history.Event{Type: history.TypeInfo}) // dropped after Close

	// A restarted process appends to the same file.
	w2, err := history.Create(path, "w1/43")
	require.NoError(t, err)
	w2.Write(history.Event{Type: history.TypeInfo, Op: "start"})
	require.NoError(t, w2.Close())

	evs, err := history.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, evs, 4)
	require.Equal(t, "w1/42", evs[0].Process)
	require.GreaterOrEqual(t, evs[0].Time, before)
	require.LessOrEqual(t, evs[0].Time, evs[1].Time)
	require.Equal(t, uint64(3), evs[1].Term)
	require.Equal(t, []history.Item{{Run: "r", ID: "ab", Index: 7, Attempt: 2}}, evs[1].Items)
	require.Equal(t, history.Key{Run: "r", ID: "ab"}, evs[1].Items[0].Key())
	require.Equal(t, "other", evs[2].Process)
	require.Equal(t, int64(5), evs[2].Time)
	require.Equal(t, "w1/43", evs[3].Process)
}

func TestCreateErrors(t *testing.T) {
	_, err := history.Create(filepath.Join(t.TempDir(), "h.jsonl"), "")
	require.ErrorIs(t, err, history.ErrBadEvent)
	_, err = history.Create(filepath.Join(t.TempDir(), "missing", "h.jsonl"), "p")
	require.Error(t, err)
	require.True(t, errors.Is(err, os.ErrNotExist))
}

func TestReadTornAndBadLines(t *testing.T) {
	good := `{"t":1,"p":"a","type":"info"}` + "\n"
	tests := []struct {
		name    string
		in      string
		n       int
		wantErr string
	}{
		{"empty", "", 0, ""},
		{"blank lines", "\n\n" + good + "\n", 1, ""},
		{"torn last line dropped", good + `{"t":2,"p":"a","ty`, 1, ""},
		{"complete last line without newline", good + `{"t":2,"p":"a","type":"info"}`, 2, ""},
		{"bad line in the middle", good + "not json\n" + good, 0, "line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := history.Read(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				require.ErrorIs(t, err, history.ErrBadEvent)
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Len(t, evs, tt.n)
		})
	}
}

func TestMergeAndReadDir(t *testing.T) {
	dir := t.TempDir()
	a := []history.Event{{Time: 1, Process: "a"}, {Time: 5, Process: "a", Op: "first"}, {Time: 5, Process: "a", Op: "second"}}
	b := []history.Event{{Time: 2, Process: "b"}, {Time: 9, Process: "b"}}
	require.NoError(t, history.WriteFile(filepath.Join(dir, "a.jsonl"), a))
	require.NoError(t, history.WriteFile(filepath.Join(dir, "b.jsonl"), b))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ignored.txt"), []byte("x"), 0o644))
	evs, err := history.ReadDir(dir)
	require.NoError(t, err)
	var times []int64
	for _, e := range evs {
		times = append(times, e.Time)
	}
	require.Equal(t, []int64{1, 2, 5, 5, 9}, times)
	require.Equal(t, "first", evs[2].Op, "equal times keep their order")
	require.Equal(t, "second", evs[3].Op)
}

func TestResultHash(t *testing.T) {
	require.Equal(t, "", history.ResultHash(nil))
	require.Len(t, history.ResultHash([]byte(`{"a":1}`)), 16)
	require.Equal(t, history.ResultHash([]byte("x")), history.ResultHash([]byte("x")))
	require.NotEqual(t, history.ResultHash([]byte("x")), history.ResultHash([]byte("y")))
	require.Equal(t, "0aff", history.IDString([]byte{0x0a, 0xff}))
}

// TestResultsByReference: a result that lives in a run's object store is
// fingerprinted by its reference's blake3, in reports and reads alike, so
// the same bytes in two objects are one result and other bytes another.
func TestResultsByReference(t *testing.T) {
	sum := func(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }
	ref := func(obj string, b byte) *rolloutv1.DataRef {
		return &rolloutv1.DataRef{Object: obj, Offset: 3, Length: 5, Blake3: sum(b)}
	}
	require.Equal(t, "", history.RefHash(nil))
	require.Equal(t, "b3:0101010101010101", history.RefHash(sum(1)))

	reports := history.FromReports([]*rolloutv1.ItemReport{
		{Run: "r", Id: []byte{1}, Attempt: 2, Outcome: rolloutv1.Outcome_OUTCOME_DONE, ResultRef: ref("runs/r/results/a", 1)},
		{Run: "r", Id: []byte{2}, Attempt: 2, Outcome: rolloutv1.Outcome_OUTCOME_DONE, ResultRef: ref("runs/r/results/b", 1)},
		{Run: "r", Id: []byte{3}, Attempt: 2, Outcome: rolloutv1.Outcome_OUTCOME_DONE, ResultRef: ref("runs/r/results/a", 2)},
		{Run: "r", Id: []byte{4}, Attempt: 2, Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: []byte("x")},
	})
	require.Equal(t, reports[0].Result, reports[1].Result, "the same bytes in another object are the same result")
	require.NotEqual(t, reports[0].Result, reports[2].Result, "other bytes in the same object are another result")
	require.Equal(t, history.ResultHash([]byte("x")), reports[3].Result, "inline results keep their fingerprint")

	reads := history.FromResults("r", []*rolloutv1.ResultItem{
		{Id: []byte{1}, Index: 0, State: rolloutv1.ItemState_ITEM_STATE_DONE, Owner: "w1", Attempt: 2, ResultRef: ref("runs/r/results/a", 1)},
	})
	require.Equal(t, reports[0].Result, reads[0].Result, "a read and the report it recorded agree")
}

// TestWorkerRecorder checks the conversion of a worker's events.
func TestWorkerRecorder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.jsonl")
	w, err := history.Create(path, "w1/1")
	require.NoError(t, err)
	rec := history.NewWorkerRecorder(w, "w1")
	report := &rolloutv1.ReportRequest{WorkerId: "w1", Reports: []*rolloutv1.ItemReport{
		{Run: "r", Id: []byte{1}, Attempt: 2, Outcome: rolloutv1.Outcome_OUTCOME_DONE, Result: []byte(`{"x":1}`)},
		{Run: "r", Id: []byte{2}, Attempt: 1, Outcome: rolloutv1.Outcome_OUTCOME_NACK},
	}}
	rec.Record(worker.Event{Kind: worker.EventInvoke, Op: "Report", Call: 1, Req: report})
	rec.Record(worker.Event{Kind: worker.EventGuard, Op: "Report", Guard: coordclient.GuardEvent{Method: "Report", Addr: "h:1", Term: 3, Highest: 4, Rejected: true}})
	rec.Record(worker.Event{Kind: worker.EventOK, Op: "Report", Call: 1, Req: report, Resp: &rolloutv1.ReportResponse{
		Header: &rolloutv1.ReplyHeader{Term: 4},
		Results: []*rolloutv1.ReportResult{
			{Id: []byte{2}, Status: rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS},
			{Id: []byte{1}, Status: rolloutv1.ReportStatus_REPORT_STATUS_APPLIED},
		},
	}})
	claim := &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 2}
	rec.Record(worker.Event{Kind: worker.EventInvoke, Op: "Claim", Call: 2, Req: claim})
	rec.Record(worker.Event{Kind: worker.EventOK, Op: "Claim", Call: 2, Req: claim, Resp: &rolloutv1.ClaimResponse{
		Header: &rolloutv1.ReplyHeader{Term: 4}, Items: []*rolloutv1.Item{{Run: "r", Id: []byte{3}, Index: 9, Attempt: 5}},
	}})
	rec.Record(worker.Event{Kind: worker.EventInvoke, Op: "Steal", Call: 3, Req: &rolloutv1.StealRequest{WorkerId: "w1"}})
	rec.Record(worker.Event{Kind: worker.EventFail, Op: "Steal", Call: 3, Err: status.Error(codes.FailedPrecondition, "busy")})
	require.NoError(t, w.Close())

	evs, err := history.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, evs, 7)
	for _, e := range evs {
		require.Equal(t, "w1", e.Worker)
		require.Equal(t, "w1/1", e.Process)
	}
	require.Equal(t, history.TypeInvoke, evs[0].Type)
	require.Equal(t, []history.Item{
		{Run: "r", ID: "01", Attempt: 2, Outcome: "DONE", Result: history.ResultHash([]byte(`{"x":1}`))},
		{Run: "r", ID: "02", Attempt: 1, Outcome: "NACK"},
	}, evs[0].Items)
	g := evs[1]
	require.Equal(t, history.TypeGuard, g.Type)
	require.Equal(t, uint64(3), g.Term)
	require.Equal(t, uint64(4), g.Highest)
	require.True(t, g.Rejected)
	require.Equal(t, "h:1", g.Addr)
	ok := evs[2]
	require.Equal(t, history.TypeOK, ok.Type)
	require.Equal(t, uint64(4), ok.Term)
	require.Equal(t, []history.Item{
		{Run: "r", ID: "02", Attempt: 1, Outcome: "NACK", Status: "CAS_MISS"},
		{Run: "r", ID: "01", Attempt: 2, Outcome: "DONE", Status: "APPLIED", Result: history.ResultHash([]byte(`{"x":1}`))},
	}, ok.Items)
	require.Equal(t, []history.Item{{Run: "r", ID: "03", Index: 9, Attempt: 5}}, evs[4].Items)
	require.Equal(t, history.TypeFail, evs[6].Type)
	require.Contains(t, evs[6].Err, "busy")
}

func TestFromResultsAndSubmit(t *testing.T) {
	items := history.FromResults("r", []*rolloutv1.ResultItem{
		{Id: []byte{1}, Index: 4, State: rolloutv1.ItemState_ITEM_STATE_DONE, Owner: "w2", Attempt: 3, Result: []byte("x")},
		{Id: []byte{2}, Index: 5, State: rolloutv1.ItemState_ITEM_STATE_PENDING, Attempt: 1},
	})
	require.Equal(t, []history.Item{
		{Run: "r", ID: "01", Index: 4, State: "DONE", Owner: "w2", Attempt: 3, Result: history.ResultHash([]byte("x"))},
		{Run: "r", ID: "02", Index: 5, State: "PENDING", Attempt: 1},
	}, items)
	sub := history.FromSubmit(&rolloutv1.SubmitItemsRequest{Run: "r", Items: []*rolloutv1.SubmitItem{{Id: []byte{9}, Index: 2}}})
	require.Equal(t, []history.Item{{Run: "r", ID: "09", Index: 2}}, sub)
}

// TestWorkerRecorderRanges checks the conversion of a worker's range
// events: a claimed range's width, a ReportRange's reports and answers,
// and a heartbeat's bounds.
func TestWorkerRecorderRanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.jsonl")
	w, err := history.Create(path, "w1/1")
	require.NoError(t, err)
	rec := history.NewWorkerRecorder(w, "w1")
	claim := &rolloutv1.ClaimRequest{WorkerId: "w1", MaxIndexes: 100}
	rec.Record(worker.Event{Kind: worker.EventInvoke, Op: "Claim", Call: 1, Req: claim})
	rec.Record(worker.Event{Kind: worker.EventOK, Op: "Claim", Call: 1, Req: claim, Resp: &rolloutv1.ClaimResponse{
		Items: []*rolloutv1.Item{{Run: "r", Id: []byte{'R', 7}, Index: 10, Count: 40, Base: 0, Attempt: 1}},
	}})
	sum := make([]byte, 32)
	sum[0] = 0xab
	rr := &rolloutv1.ReportRangeRequest{WorkerId: "w1", Reports: []*rolloutv1.RangeReport{
		{Run: "r", Id: []byte{'R', 7}, Attempt: 1, Lo: 10, DoneTo: 20, ResultRef: &rolloutv1.DataRef{Object: "o", Blake3: sum},
			Failed: []*rolloutv1.FailedIndex{{Index: 12}, {Index: 15}}},
		{Run: "r", Id: []byte{'R', 8}, Attempt: 2, Lo: 5, DoneTo: 5, NackRest: true},
		{Run: "r", Id: []byte{'R', 9}, Attempt: 3, Lo: 50, DoneTo: 50, ReleaseFrom: 60},
	}}
	rec.Record(worker.Event{Kind: worker.EventInvoke, Op: "ReportRange", Call: 2, Req: rr})
	rec.Record(worker.Event{Kind: worker.EventOK, Op: "ReportRange", Call: 2, Req: rr, Resp: &rolloutv1.ReportRangeResponse{
		Results: []*rolloutv1.RangeReportResult{
			{Id: []byte{'R', 7}, Status: rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, Duplicate: true},
			{Id: []byte{'R', 8}, Status: rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS},
		},
	}})
	hb := &rolloutv1.HeartbeatRequest{WorkerId: "w1"}
	rec.Record(worker.Event{Kind: worker.EventInvoke, Op: "Heartbeat", Call: 3, Req: hb})
	rec.Record(worker.Event{Kind: worker.EventOK, Op: "Heartbeat", Call: 3, Req: hb, Resp: &rolloutv1.HeartbeatResponse{
		Bounds: []*rolloutv1.RangeBound{{Run: "r", Id: []byte{'R', 7}, Attempt: 1, Lo: 20, Hi: 30}, {Run: "r", Id: []byte{'R', 9}, Attempt: 3, Lo: 4, Hi: 4}},
	}})
	require.NoError(t, w.Close())

	evs, err := history.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, evs, 6)
	claimed := evs[1].Items
	require.Equal(t, []history.Item{{Run: "r", ID: "5207", Index: 10, Attempt: 1, Count: 40}}, claimed)
	require.True(t, claimed[0].IsRange())
	ref := history.RefHash(sum)
	first := history.Item{Run: "r", ID: "5207", Index: 10, Attempt: 1, DoneTo: 20, Failed: []uint64{12, 15}, Result: ref}
	require.Equal(t, []history.Item{
		first,
		{Run: "r", ID: "5208", Index: 5, Attempt: 2, DoneTo: 5, Nack: true},
		{Run: "r", ID: "5209", Index: 50, Attempt: 3, DoneTo: 50, ReleaseFrom: 60},
	}, evs[2].Items)
	first.Status, first.Dup = "APPLIED", true
	require.Equal(t, []history.Item{first, {Run: "r", ID: "5208", Index: 5, Attempt: 2, DoneTo: 5, Nack: true, Status: "CAS_MISS"}}, evs[3].Items,
		"results[i] answers reports[i]; a report without an answer has none")
	require.Equal(t, []history.Item{{Run: "r", ID: "5207", Index: 20, Attempt: 1, Count: 10}}, evs[5].Items, "an empty bound is left out")
}
