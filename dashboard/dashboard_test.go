package dashboard

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/mtls"
)

// fakeReader answers RunStatus and Events from fields a test sets.
type fakeReader struct {
	mu        sync.Mutex
	status    *rolloutv1.RunStatusResponse
	statusErr error
	events    []*rolloutv1.Event
	eventsErr error
	calls     int
}

func (f *fakeReader) RunStatus(_ context.Context, _ *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.statusErr != nil {
		return nil, f.statusErr
	}
	return f.status, nil
}

func (f *fakeReader) Events(_ context.Context, req *rolloutv1.EventsRequest) (*rolloutv1.EventsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.eventsErr != nil {
		return nil, f.eventsErr
	}
	resp := &rolloutv1.EventsResponse{Header: f.status.GetHeader()}
	if n := len(f.events); n > 0 {
		resp.FirstSeq, resp.LastSeq = f.events[0].GetSeq(), f.events[n-1].GetSeq()
	}
	for _, e := range f.events {
		if e.GetSeq() > req.GetAfterSeq() && (req.GetLimit() == 0 || len(resp.Events) < int(req.GetLimit())) {
			resp.Events = append(resp.Events, e)
		}
	}
	return resp, nil
}

func (f *fakeReader) set(fn func(f *fakeReader)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// localView is a replica's own Cluster answer: id, its state and the
// leader it knows.
func localView(id string, state rolloutv1.ReplicaState, leader string, term uint64) *rolloutv1.ClusterResponse {
	c := &rolloutv1.ClusterResponse{
		Header: &rolloutv1.ReplyHeader{Term: term, LeaderId: leader, LeaderAddr: "127.0.0.1:700" + leader[1:], ReplicaId: id},
		State:  state, CommitIndex: 40, AppliedIndex: 39, LedgerEpoch: term,
	}
	for _, m := range []string{"c3", "c1", "c2"} {
		c.Members = append(c.Members, &rolloutv1.Member{Id: m, RaftAddr: "127.0.0.1:600" + m[1:], GrpcAddr: "127.0.0.1:700" + m[1:],
			Leader: m == leader, Suffrage: rolloutv1.Suffrage_SUFFRAGE_VOTER})
	}
	return c
}

func statusAt(leader string, term uint64, nowMs int64, done uint64) *rolloutv1.RunStatusResponse {
	return &rolloutv1.RunStatusResponse{
		Header:    &rolloutv1.ReplyHeader{Term: term, LeaderId: leader, ReplicaId: leader},
		NowUnixMs: nowMs,
		Runs: []*rolloutv1.RunCounters{
			{Name: "zeta", Total: 100, ExpectedTotal: 100, Pending: 100 - done - 10, Running: 10, Done: done, RunningLong: 2, OwnerLost: 1, Failures: 3},
			{Name: "alpha", Total: 4, ExpectedTotal: 4, Done: 3, Dead: 1, CreatedUnixMs: 1000, FinishedUnixMs: 5000, Kind: "train"},
		},
		Workers: []*rolloutv1.WorkerStatus{
			{Id: "w2", Running: 4, Backlog: 2, ItemsPerSec: 12.5, LastHeartbeatUnixMs: nowMs - 300, Completed: 40, RunningLong: 2},
			{Id: "w1", Running: 6, Backlog: 0, ItemsPerSec: 3, LastHeartbeatUnixMs: nowMs - 9000, Completed: 20, OwnerLost: 1, Lost: true},
		},
	}
}

type fixture struct {
	d      *Dashboard
	reader *fakeReader
	local  *rolloutv1.ClusterResponse
	mu     sync.Mutex
	srv    *httptest.Server
}

func newFixture(t *testing.T, mutate func(*Config)) *fixture {
	t.Helper()
	f := &fixture{reader: &fakeReader{}}
	cfg := DefaultConfig()
	cfg.Reader = f.reader
	cfg.Local = func(context.Context) (*rolloutv1.ClusterResponse, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.local, nil
	}
	if mutate != nil {
		mutate(&cfg)
	}
	d, err := New(cfg)
	require.NoError(t, err)
	f.d = d
	f.srv = httptest.NewServer(d.Handler(true))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) setLocal(c *rolloutv1.ClusterResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.local = c
}

func getJSON[T any](t *testing.T, url string) (T, *http.Response) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var v T
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	return v, resp
}

// TestOverviewOnLeader checks the overview's shape and numbers on the
// leader: runs sorted with live rate and ETA, the worker grid with
// on-time/long/owner-lost and heartbeat ages, members, terms from events
// and the events newest first.
func TestOverviewOnLeader(t *testing.T) {
	f := newFixture(t, nil)
	f.setLocal(localView("c1", rolloutv1.ReplicaState_REPLICA_STATE_LEADER, "c1", 3))
	f.reader.set(func(r *fakeReader) {
		r.status = statusAt("c1", 3, 50_000, 20)
		r.events = []*rolloutv1.Event{
			{Seq: 1, UnixMs: 100, Term: 2, Kind: rolloutv1.EventKind_EVENT_KIND_LEADER_ELECTED, Member: "c2"},
			{Seq: 2, UnixMs: 200, Term: 3, Kind: rolloutv1.EventKind_EVENT_KIND_LEADER_ELECTED, Member: "c1"},
			{Seq: 3, UnixMs: 300, Term: 3, Kind: rolloutv1.EventKind_EVENT_KIND_ITEMS_STOLEN, Worker: "w2", Detail: "w1", Count: 4, Run: "zeta"},
		}
	})
	t0 := time.UnixMilli(1_000_000)
	f.d.Sample(context.Background(), t0)
	f.reader.set(func(r *fakeReader) { r.status = statusAt("c1", 3, 52_000, 40) })
	f.d.Sample(context.Background(), t0.Add(2*time.Second))

	ov, resp := getJSON[Overview](t, f.srv.URL+"/api/overview")
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	require.Equal(t, "c1", ov.Replica.ID)
	require.Equal(t, "leader", ov.Replica.State)
	require.Equal(t, []string{"c1", "c2", "c3"}, memberIDs(ov.Replica.Members))
	require.True(t, ov.Replica.Members[0].Leader)
	require.Equal(t, "voter", ov.Replica.Members[0].Suffrage)
	require.True(t, ov.Read.OK, ov.Read.Error)
	require.Equal(t, "c1", ov.Read.ServedBy)
	require.Equal(t, uint64(3), ov.Read.Term)

	require.Len(t, ov.Runs, 2)
	alpha, zeta := ov.Runs[0], ov.Runs[1]
	require.Equal(t, "alpha", alpha.Name)
	require.True(t, alpha.Finished)
	require.Equal(t, "train", alpha.Kind)
	require.Equal(t, float64(0), alpha.ETASeconds)
	require.Equal(t, "zeta", zeta.Name)
	require.Equal(t, "batch", zeta.Kind)
	require.False(t, zeta.Finished)
	require.Equal(t, uint64(40), zeta.Done)
	require.Equal(t, uint64(100), zeta.Total)
	require.InDelta(t, 10.0, zeta.RatePerSec, 1e-9, "20 items in 2 s")
	require.InDelta(t, 6.0, zeta.ETASeconds, 1e-9, "60 left at 10/s")
	require.Equal(t, uint64(2), zeta.RunningLong)
	require.Equal(t, uint64(1), zeta.OwnerLost)

	require.Len(t, ov.Workers, 2)
	require.Equal(t, "w1", ov.Workers[0].ID)
	require.True(t, ov.Workers[0].Lost)
	require.Equal(t, int64(9000), ov.Workers[0].HeartbeatAgeMs)
	require.Equal(t, uint64(5), ov.Workers[0].OnTime)
	require.Equal(t, uint64(2), ov.Workers[1].OnTime)
	require.Equal(t, int64(300), ov.Workers[1].HeartbeatAgeMs)

	require.Equal(t, []TermChange{
		{Term: 2, Leader: "c2", UnixMs: 100, Source: "event"},
		{Term: 3, Leader: "c1", UnixMs: 200, Source: "event"},
	}, ov.Terms)
	require.Len(t, ov.Events, 3)
	require.Equal(t, uint64(3), ov.Events[0].Seq, "newest first")
	require.Equal(t, "items_stolen", ov.Events[0].Kind)
	require.Equal(t, uint64(4), ov.Events[0].Count)
	require.Empty(t, ov.EventsError)

	// The raw JSON uses the documented field names.
	raw, _ := getJSON[map[string]any](t, f.srv.URL+"/api/overview")
	for _, k := range []string{"now_unix_ms", "replica", "read", "runs", "workers", "terms", "events"} {
		require.Contains(t, raw, k)
	}
	run0 := raw["runs"].([]any)[1].(map[string]any)
	for _, k := range []string{"name", "kind", "total", "done", "dead", "pending", "running", "running_long", "owner_lost", "rate_per_sec", "eta_seconds", "finished"} {
		require.Contains(t, run0, k)
	}
	w0 := raw["workers"].([]any)[0].(map[string]any)
	for _, k := range []string{"id", "running", "on_time", "running_long", "owner_lost", "backlog", "items_per_sec", "completed", "last_heartbeat_unix_ms", "heartbeat_age_ms", "lost"} {
		require.Contains(t, w0, k)
	}

	// Only new events are asked for on the next sample.
	f.reader.set(func(r *fakeReader) {
		r.events = append(r.events, &rolloutv1.Event{Seq: 4, UnixMs: 400, Term: 3, Kind: rolloutv1.EventKind_EVENT_KIND_RUN_FINISHED, Run: "alpha"})
	})
	f.d.Sample(context.Background(), t0.Add(3*time.Second))
	ov = f.d.Overview(time.Now())
	require.Len(t, ov.Events, 4)
	require.Equal(t, "run_finished", ov.Events[0].Kind)

	// The flood events (issue 21) come through with their kinds and detail.
	f.reader.set(func(r *fakeReader) {
		r.events = append(r.events,
			&rolloutv1.Event{Seq: 5, UnixMs: 500, Term: 3, Kind: rolloutv1.EventKind_EVENT_KIND_CONNS_REFUSED, Member: "c1", Count: 900,
				Detail: "listener grpc refused 900 connections (per_ip 900); most from 127.0.0.2 (900)"},
			&rolloutv1.Event{Seq: 6, UnixMs: 600, Term: 3, Kind: rolloutv1.EventKind_EVENT_KIND_LEADER_STEPPED_ASIDE, Member: "c1",
				Detail: "the gRPC port has refused every new connection for 5s; handing leadership to c2"})
	})
	f.d.Sample(context.Background(), t0.Add(4*time.Second))
	ov = f.d.Overview(time.Now())
	require.Len(t, ov.Events, 6)
	require.Equal(t, "leader_stepped_aside", ov.Events[0].Kind)
	require.Contains(t, ov.Events[0].Detail, "to c2")
	require.Equal(t, "conns_refused", ov.Events[1].Kind)
	require.Equal(t, uint64(900), ov.Events[1].Count)
	require.Equal(t, "c1", ov.Events[1].Member)
}

// TestOverviewUnservedModel: a run whose model no live worker serves is in
// the overview (JSON: model, unserved_model) as not finished, and the
// workers carry the models they serve.
func TestOverviewUnservedModel(t *testing.T) {
	f := newFixture(t, nil)
	f.setLocal(localView("c1", rolloutv1.ReplicaState_REPLICA_STATE_LEADER, "c1", 3))
	f.reader.set(func(r *fakeReader) {
		r.status = &rolloutv1.RunStatusResponse{
			Header: &rolloutv1.ReplyHeader{Term: 3, LeaderId: "c1", ReplicaId: "c1"}, NowUnixMs: 50_000,
			Runs: []*rolloutv1.RunCounters{
				{Name: "a", Total: 4, ExpectedTotal: 4, Pending: 4, Model: "A"},
				{Name: "b", Total: 4, ExpectedTotal: 4, Pending: 4, Model: "B", UnservedModel: true},
			},
			Workers: []*rolloutv1.WorkerStatus{{Id: "wa", Models: []string{"A"}, LastHeartbeatUnixMs: 49_900}, {Id: "wany", LastHeartbeatUnixMs: 49_900}},
		}
	})
	f.d.Sample(context.Background(), time.UnixMilli(1_000_000))
	ov, _ := getJSON[Overview](t, f.srv.URL+"/api/overview")
	require.Len(t, ov.Runs, 2)
	require.Equal(t, "A", ov.Runs[0].Model)
	require.False(t, ov.Runs[0].UnservedModel)
	require.Equal(t, "B", ov.Runs[1].Model)
	require.True(t, ov.Runs[1].UnservedModel)
	require.False(t, ov.Runs[1].Finished)
	require.Equal(t, []string{"A"}, ov.Workers[0].Models)
	require.Nil(t, ov.Workers[1].Models)

	raw, _ := getJSON[map[string]any](t, f.srv.URL+"/api/overview")
	b := raw["runs"].([]any)[1].(map[string]any)
	require.Equal(t, "B", b["model"])
	require.Equal(t, true, b["unserved_model"])
	require.Equal(t, []any{"A"}, raw["workers"].([]any)[0].(map[string]any)["models"])

	// The page renders it: the script names the field and the message.
	resp, err := http.Get(f.srv.URL + "/static/app.js")
	require.NoError(t, err)
	defer resp.Body.Close()
	js, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(js), "r.unserved_model")
	require.Contains(t, string(js), "waiting: no live worker serves model ")
}

// TestOverviewStalledRun: a run stalled on a missing input object carries
// the stall (object, reason, since) in the overview, and the page's script
// renders it.
func TestOverviewStalledRun(t *testing.T) {
	f := newFixture(t, nil)
	f.setLocal(localView("c1", rolloutv1.ReplicaState_REPLICA_STATE_LEADER, "c1", 3))
	f.reader.set(func(r *fakeReader) {
		r.status = &rolloutv1.RunStatusResponse{
			Header: &rolloutv1.ReplyHeader{Term: 3, LeaderId: "c1", ReplicaId: "c1"}, NowUnixMs: 50_000,
			Runs: []*rolloutv1.RunCounters{
				{Name: "a", Total: 4, ExpectedTotal: 4, Pending: 4},
				{Name: "s", Total: 4, ExpectedTotal: 4, Pending: 4,
					Stall: &rolloutv1.RunStall{Object: "runs/s/inputs/c0", Reason: "object not found", SinceUnixMs: 40_000}},
			},
		}
	})
	f.d.Sample(context.Background(), time.UnixMilli(1_000_000))
	ov, _ := getJSON[Overview](t, f.srv.URL+"/api/overview")
	require.Len(t, ov.Runs, 2)
	require.Nil(t, ov.Runs[0].Stall)
	require.Equal(t, &StallView{Object: "runs/s/inputs/c0", Reason: "object not found", SinceUnixMs: 40_000}, ov.Runs[1].Stall)
	raw, _ := getJSON[map[string]any](t, f.srv.URL+"/api/overview")
	require.NotContains(t, raw["runs"].([]any)[0].(map[string]any), "stall")

	resp, err := http.Get(f.srv.URL + "/static/app.js")
	require.NoError(t, err)
	defer resp.Body.Close()
	js, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(js), "r.stall")
	require.Contains(t, string(js), "stalled: input object ")
}

func memberIDs(ms []MemberView) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

// TestFollowerReadsThroughLeader: on a follower the data comes from the
// leader's answer (the Reader follows the leader), and the overview says
// which replica answered and that this one is a follower.
func TestFollowerReadsThroughLeader(t *testing.T) {
	f := newFixture(t, nil)
	f.setLocal(localView("c2", rolloutv1.ReplicaState_REPLICA_STATE_FOLLOWER, "c1", 5))
	f.reader.set(func(r *fakeReader) { r.status = statusAt("c1", 5, 10_000, 30) })
	f.d.Sample(context.Background(), time.UnixMilli(10_000))

	ov, _ := getJSON[Overview](t, f.srv.URL+"/api/overview")
	require.Equal(t, "c2", ov.Replica.ID)
	require.Equal(t, "follower", ov.Replica.State)
	require.Equal(t, "c1", ov.Replica.LeaderID)
	require.Equal(t, "127.0.0.1:7001", ov.Replica.LeaderAddr)
	require.True(t, ov.Read.OK)
	require.Equal(t, "c1", ov.Read.ServedBy, "a follower's data is the leader's answer")
	require.Equal(t, "c1", ov.Read.Leader)
	require.Equal(t, uint64(30), ov.Runs[1].Done)
	require.Equal(t, []TermChange{{Term: 5, Leader: "c1", UnixMs: 10_000, Source: "observed"}}, ov.Terms)
}

// TestNoLeaderKeepsStaleData: when the read fails (an election, a
// partition) the overview says why and where the leader was, keeps the
// last data, and the throughput history has a gap.
func TestNoLeaderKeepsStaleData(t *testing.T) {
	f := newFixture(t, nil)
	f.setLocal(localView("c2", rolloutv1.ReplicaState_REPLICA_STATE_FOLLOWER, "c1", 5))
	f.reader.set(func(r *fakeReader) { r.status = statusAt("c1", 5, 10_000, 30) })
	t0 := time.UnixMilli(10_000)
	f.d.Sample(context.Background(), t0)

	f.setLocal(localView("c2", rolloutv1.ReplicaState_REPLICA_STATE_CANDIDATE, "c1", 6))
	f.reader.set(func(r *fakeReader) { r.statusErr = status.Error(codes.Unavailable, "no leader") })
	f.d.Sample(context.Background(), t0.Add(time.Second))

	ov, _ := getJSON[Overview](t, f.srv.URL+"/api/overview")
	require.False(t, ov.Read.OK)
	require.Contains(t, ov.Read.Error, "no leader")
	require.Equal(t, int64(10_000), ov.Read.AtUnixMs, "the time of the data still shown")
	require.Equal(t, uint64(30), ov.Runs[1].Done, "the last data is kept")
	require.Equal(t, "candidate", ov.Replica.State)
	require.Equal(t, "c1", ov.Replica.LeaderID)

	tp, _ := getJSON[Throughput](t, f.srv.URL+"/api/throughput")
	require.Len(t, tp.Points, 2)
	require.True(t, tp.Points[0].OK)
	require.False(t, tp.Points[1].OK, "a failed read is a gap")
	require.Equal(t, int64(1000), tp.IntervalMs)
}

// TestEventsUnavailable: a cluster that does not serve Events still gets
// its dashboard, with the reason shown.
func TestEventsUnavailable(t *testing.T) {
	f := newFixture(t, nil)
	f.setLocal(localView("c1", rolloutv1.ReplicaState_REPLICA_STATE_LEADER, "c1", 2))
	f.reader.set(func(r *fakeReader) {
		r.status = statusAt("c1", 2, 1, 1)
		r.eventsErr = status.Error(codes.Unimplemented, "unknown method Events")
	})
	f.d.Sample(context.Background(), time.UnixMilli(1))
	ov := f.d.Overview(time.Now())
	require.True(t, ov.Read.OK)
	require.Empty(t, ov.Events)
	require.Contains(t, ov.EventsError, "not served by this cluster's version")
}

// TestThroughputBoundedAndSince: the ring keeps History samples, rates
// are per second between samples, and since= returns only newer ones.
func TestThroughputBoundedAndSince(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.History = 5 })
	f.setLocal(localView("c1", rolloutv1.ReplicaState_REPLICA_STATE_LEADER, "c1", 2))
	t0 := time.UnixMilli(100_000)
	for i := range 10 {
		f.reader.set(func(r *fakeReader) { r.status = statusAt("c1", 2, 1, uint64(5*i)) })
		f.d.Sample(context.Background(), t0.Add(time.Duration(i)*time.Second))
	}
	tp, _ := getJSON[Throughput](t, f.srv.URL+"/api/throughput")
	require.Len(t, tp.Points, 5)
	require.Equal(t, t0.Add(5*time.Second).UnixMilli(), tp.Points[0].UnixMs)
	for _, p := range tp.Points {
		require.True(t, p.OK)
		require.InDelta(t, 5.0, p.Rate, 1e-9)
		require.Equal(t, "c1", p.Leader)
	}
	since := tp.Points[2].UnixMs
	tp, _ = getJSON[Throughput](t, f.srv.URL+"/api/throughput?since="+itoa(since))
	require.Len(t, tp.Points, 2)

	resp, err := http.Get(f.srv.URL + "/api/throughput?since=yesterday")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(body), "since must be a time in unix milliseconds")
}

func itoa(v int64) string { b, _ := json.Marshal(v); return string(b) }

// TestReadOnly: every method but GET and HEAD is refused on every path,
// before anything is read; the Reader the dashboard gets has only reads.
func TestReadOnly(t *testing.T) {
	f := newFixture(t, nil)
	for _, path := range []string{"/", "/api/overview", "/api/throughput", "/static/app.js", "/api/anything"} {
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions, "EVICT"} {
			req, err := http.NewRequest(m, f.srv.URL+path, strings.NewReader(`{"worker_id":"w1"}`))
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "%s %s", m, path)
			require.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))
		}
	}
	require.Zero(t, f.reader.calls, "a refused request read nothing")

	var methods []string
	rt := reflect.TypeFor[Reader]()
	for i := range rt.NumMethod() {
		methods = append(methods, rt.Method(i).Name)
	}
	require.Equal(t, []string{"Events", "RunStatus"}, methods, "the dashboard can only read")
}

// TestPageAndAssets: the page and its assets are served with their content
// types and the security headers, and the page loads nothing from another
// origin and has no inline script or style.
func TestPageAndAssets(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct{ path, ctype, contains string }{
		{"/", "text/html; charset=utf-8", `<script src="static/app.js" defer></script>`},
		{"/static/app.js", "text/javascript; charset=utf-8", "api/overview"},
		{"/static/style.css", "text/css; charset=utf-8", ".chart"},
	} {
		resp, err := http.Get(f.srv.URL + tc.path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, tc.path)
		require.Equal(t, tc.ctype, resp.Header.Get("Content-Type"), tc.path)
		require.Contains(t, string(body), tc.contains, tc.path)
		csp := resp.Header.Get("Content-Security-Policy")
		require.Contains(t, csp, "default-src 'none'")
		require.Contains(t, csp, "script-src 'self'")
		require.NotContains(t, csp, "unsafe-inline")
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
		require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
	}
	resp, err := http.Get(f.srv.URL + "/nothing-here")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	page, err := static.ReadFile("static/index.html")
	require.NoError(t, err)
	for _, bad := range []string{"http://", "https://", "style=", "<script>", "onclick", "onload"} {
		require.NotContains(t, string(page), bad)
	}
	js, err := static.ReadFile("static/app.js")
	require.NoError(t, err)
	require.NotContains(t, string(js), "innerHTML", "cluster text must go through textContent")
	require.NotContains(t, string(js), "https://")
}

// TestPlainHTTPHost: a plain-HTTP dashboard answers only requests for an
// IP address or localhost (no DNS rebinding); over HTTPS the certificate
// binds the name instead.
func TestPlainHTTPHost(t *testing.T) {
	f := newFixture(t, nil)
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+"/api/overview", nil)
	require.NoError(t, err)
	req.Host = "attacker.example:80"
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode)
	for _, h := range []string{"localhost:1", "127.0.0.1:8080", "[::1]:9", "10.0.0.7"} {
		require.True(t, localHost(h), h)
	}
	require.False(t, localHost("rollout.example.com:443"))
}

func TestCheckAddr(t *testing.T) {
	for _, tc := range []struct {
		addr          string
		tls, insecure bool
		err           error
	}{
		{"127.0.0.1:8080", false, false, nil},
		{"localhost:8080", false, false, nil},
		{"[::1]:8080", false, false, nil},
		{"0.0.0.0:8080", false, false, ErrPlaintextAddr},
		{":8080", false, false, ErrPlaintextAddr},
		{"10.1.2.3:8080", false, false, ErrPlaintextAddr},
		{"10.1.2.3:8080", false, true, nil},
		{"0.0.0.0:8080", true, false, nil},
		{"8080", true, false, ErrInvalidConfig},
	} {
		err := CheckAddr(tc.addr, tc.tls, tc.insecure)
		if tc.err == nil {
			require.NoError(t, err, tc.addr)
		} else {
			require.ErrorIs(t, err, tc.err, tc.addr)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	good.Reader, good.Local = &fakeReader{}, func(context.Context) (*rolloutv1.ClusterResponse, error) { return nil, nil }
	require.NoError(t, good.Validate())
	for name, mut := range map[string]func(*Config){
		"no reader":   func(c *Config) { c.Reader = nil },
		"no local":    func(c *Config) { c.Local = nil },
		"interval":    func(c *Config) { c.Interval = 0 },
		"history":     func(c *Config) { c.History = 1 },
		"events":      func(c *Config) { c.Events = 0 },
		"loss every":  func(c *Config) { c.LossEvery = 0 },
		"rate window": func(c *Config) { c.RateWindow = -time.Second },
	} {
		c := good
		mut(&c)
		_, err := New(c)
		require.ErrorIs(t, err, ErrInvalidConfig, name)
	}
}

// TestLoss: training runs get their loss per step from the LossReader;
// other runs are not asked for.
func TestLoss(t *testing.T) {
	var asked []string
	f := newFixture(t, func(c *Config) {
		c.Loss = func(_ context.Context, run string) ([]LossPoint, error) {
			asked = append(asked, run)
			return []LossPoint{{Step: 0, Loss: 2.3, Accuracy: 0.1}, {Step: 1, Loss: 1.1, Accuracy: 0.6}}, nil
		}
	})
	f.setLocal(localView("c1", rolloutv1.ReplicaState_REPLICA_STATE_LEADER, "c1", 2))
	f.reader.set(func(r *fakeReader) { r.status = statusAt("c1", 2, 1, 1) })
	f.d.Sample(context.Background(), time.UnixMilli(1))
	require.Equal(t, []string{"alpha"}, asked)
	ov := f.d.Overview(time.Now())
	require.Len(t, ov.Runs[0].Loss, 2)
	require.Equal(t, 1.1, ov.Runs[0].Loss[1].Loss)
	require.Empty(t, ov.Runs[1].Loss)
}

// TestHTTPS: with the replica's certificate the dashboard serves HTTPS
// that a browser without a client certificate can open, and refuses plain
// HTTP on that port.
func TestHTTPS(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, mtls.GenerateDevCA(dir, []mtls.Cert{{Name: "c1", Role: mtls.RoleReplica}}, time.Hour))
	replicaTLS, err := mtls.FilesFor(dir, "c1").Load()
	require.NoError(t, err)

	f := newFixture(t, nil)
	f.setLocal(localView("c1", rolloutv1.ReplicaState_REPLICA_STATE_LEADER, "c1", 2))
	s, err := Listen(f.d, "127.0.0.1:0", ServerTLS(replicaTLS), false)
	require.NoError(t, err)
	go func() { _ = s.Serve() }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	require.True(t, strings.HasPrefix(s.URL(), "https://127.0.0.1:"), s.URL())

	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get(s.URL())
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))

	// Over HTTPS any Host is answered (the certificate binds the name).
	req, _ := http.NewRequest(http.MethodGet, s.URL()+"api/overview", nil)
	req.Host = "coord1.example"
	resp, err = client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	resp, err = http.Get(strings.Replace(s.URL(), "https://", "http://", 1))
	if err == nil {
		resp.Body.Close()
		require.NotEqual(t, http.StatusOK, resp.StatusCode, "plain HTTP must not be served on the HTTPS port")
	}

	_, err = Listen(f.d, "0.0.0.0:0", nil, false)
	require.ErrorIs(t, err, ErrPlaintextAddr)
}

// TestPeers: with Config.Peer every other member is asked for its own view:
// the overview shows each one's role and term as it reports them, and
// which could not be reached, and why.
func TestPeers(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.Peer = func(_ context.Context, addr string) (*rolloutv1.ClusterResponse, error) {
			switch addr {
			case "127.0.0.1:7002":
				return localView("c2", rolloutv1.ReplicaState_REPLICA_STATE_FOLLOWER, "c1", 4), nil
			default:
				return nil, status.Error(codes.Unavailable, "connection refused")
			}
		}
	})
	f.setLocal(localView("c1", rolloutv1.ReplicaState_REPLICA_STATE_LEADER, "c1", 4))
	f.reader.set(func(r *fakeReader) { r.status = statusAt("c1", 4, 1, 1) })
	f.d.Sample(context.Background(), time.UnixMilli(1))
	ms := f.d.Overview(time.Now()).Replica.Members
	require.Len(t, ms, 3)
	require.Equal(t, MemberView{ID: "c1", RaftAddr: "127.0.0.1:6001", GRPCAddr: "127.0.0.1:7001", Leader: true, Suffrage: "voter",
		Self: true, Reachable: true, State: "leader", Term: 4, AppliedIndex: 39}, ms[0])
	require.True(t, ms[1].Reachable)
	require.Equal(t, "follower", ms[1].State)
	require.False(t, ms[2].Reachable)
	require.Contains(t, ms[2].Error, "connection refused")
}
