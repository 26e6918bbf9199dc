package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/worker"
)

// events is a worker.Recorder keeping what it is given.
type events struct {
	mu  sync.Mutex
	evs []worker.Event
}

func (e *events) Record(ev worker.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

func (e *events) all() []worker.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]worker.Event(nil), e.evs...)
}

var _ worker.Recorder = (*events)(nil)

// TestRecorderHistory checks that every call is recorded as an invocation
// and one completion with the same call id, and that every term check of the
// epoch guard is recorded, including a rejected stale reply.
func TestRecorderHistory(t *testing.T) {
	srv := coordtest.Start(t, "a")
	srv.SetTerm(5)
	var once sync.Once
	srv.Intercept("Claim", func(context.Context, any) (any, error) {
		var resp any
		once.Do(func() { resp = &rolloutv1.ClaimResponse{Header: &rolloutv1.ReplyHeader{Term: 4}} })
		return resp, nil
	})
	srv.Add(run, subs(3)...)
	rec := &events{}
	cfg := testConfig()
	cfg.Recorder = rec
	r := start(t, cfg, newRecorder(mockFn(t)), srv.Addr())
	eventually(t, func() bool { return srv.Count(coordtest.Done) == 3 }, "items done")
	eventually(t, func() bool { return srv.Heartbeats(wid) > 0 }, "a heartbeat")
	r.stop(t)

	evs := rec.all()
	open := map[uint64]worker.Event{}
	completions := map[string]int{}
	applied := 0
	var guards []worker.Event
	for _, ev := range evs {
		switch ev.Kind {
		case worker.EventInvoke:
			require.NotZero(t, ev.Call)
			require.NotContains(t, open, ev.Call, "call id reused")
			require.NotNil(t, ev.Req)
			open[ev.Call] = ev
		case worker.EventOK, worker.EventFail, worker.EventUnknown:
			inv, ok := open[ev.Call]
			require.True(t, ok, "completion of call %d without an invocation", ev.Call)
			require.Equal(t, inv.Op, ev.Op)
			delete(open, ev.Call)
			completions[ev.Op]++
			if ev.Kind == worker.EventOK {
				require.NotNil(t, ev.Resp)
			}
			if rep, ok := ev.Resp.(*rolloutv1.ReportResponse); ok {
				for _, res := range rep.GetResults() {
					if res.GetStatus() == rolloutv1.ReportStatus_REPORT_STATUS_APPLIED {
						applied++
					}
				}
			}
		case worker.EventGuard:
			require.Zero(t, ev.Call)
			require.Equal(t, ev.Op, ev.Guard.Method)
			guards = append(guards, ev)
		default:
			t.Fatalf("unexpected kind %v", ev.Kind)
		}
	}
	require.Empty(t, open, "every call completed")
	for _, op := range []string{"Register", "Heartbeat", "OwnedItems", "Claim", "Report", "Deregister"} {
		require.Positive(t, completions[op], "no completed %s", op)
	}
	require.Equal(t, 3, applied)
	rejected := 0
	for _, g := range guards {
		require.Equal(t, srv.Addr(), g.Guard.Addr)
		if g.Guard.Rejected {
			rejected++
			require.Equal(t, "Claim", g.Op)
			require.Equal(t, uint64(4), g.Guard.Term)
			require.Equal(t, uint64(5), g.Guard.Highest)
		} else {
			require.Equal(t, uint64(5), g.Guard.Term)
		}
	}
	require.Equal(t, 1, rejected)
	require.Equal(t, uint64(1), r.w.Stats().StaleRepliesRejected)
}

func TestOutcome(t *testing.T) {
	tests := []struct {
		err  error
		want worker.EventKind
	}{
		{status.Error(codes.InvalidArgument, "bad"), worker.EventFail},
		{fmt.Errorf("wrapped: %w", status.Error(codes.NotFound, "no")), worker.EventFail},
		{status.Error(codes.FailedPrecondition, "not idle"), worker.EventFail},
		{fmt.Errorf("x: %w", coordclient.ErrNilRequest), worker.EventFail},
		{status.Error(codes.Unavailable, "down"), worker.EventUnknown},
		{status.Error(codes.DeadlineExceeded, "slow"), worker.EventUnknown},
		{context.Canceled, worker.EventUnknown},
		{errors.New("anything else"), worker.EventUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			require.Equal(t, tt.want, worker.Outcome(tt.err))
		})
	}
	require.Equal(t, "invoke", worker.EventInvoke.String())
	require.Equal(t, "guard", worker.EventGuard.String())
	require.Equal(t, "invalid", worker.EventKind(0).String())
}
