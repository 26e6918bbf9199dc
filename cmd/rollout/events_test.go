package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/internal/testbin"
)

// eventsFake is a coordinator fake over TCP holding a small history.
func eventsFake(t *testing.T) *coordtest.Server {
	srv := coordtest.Start(t, "c1")
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli()
	for _, e := range []*rolloutv1.Event{
		{Kind: rolloutv1.EventKind_EVENT_KIND_LEADER_ELECTED, Member: "c1", UnixMs: at},
		{Kind: rolloutv1.EventKind_EVENT_KIND_RUN_CREATED, Run: "r", Detail: "model m, total 2", UnixMs: at + 1},
		{Kind: rolloutv1.EventKind_EVENT_KIND_ITEMS_STOLEN, Worker: "w2", Detail: "w1", Count: 3, UnixMs: at + 2},
		{Kind: rolloutv1.EventKind_EVENT_KIND_WORKER_DEREGISTERED, Worker: "w1", Detail: "drain: aws: spot; finished 3, nacked 2", Count: 2, UnixMs: at + 3},
		{Kind: rolloutv1.EventKind_EVENT_KIND_RUN_FINISHED, Run: "r", Detail: "2 done, 0 dead", Count: 2, UnixMs: at + 4},
	} {
		srv.AddEvent(e)
	}
	return srv
}

func TestEventsTable(t *testing.T) {
	srv := eventsFake(t)
	res := runCLI(t, nil, "events", "--coord", srv.Addr())
	require.Equal(t, 0, res.code, res.stderr)
	require.Empty(t, res.stderr)
	want := "" +
		"SEQ     TIME (UTC)              TERM  KIND                 SUBJECT                DETAIL\n" +
		"1       2030-01-02 03:04:05.000 1     leader-elected       member c1              -\n" +
		"2       2030-01-02 03:04:05.001 1     run-created          run r                  model m, total 2\n" +
		"3       2030-01-02 03:04:05.002 1     items-stolen         worker w2              stole 3 items from w1\n" +
		"4       2030-01-02 03:04:05.003 1     worker-deregistered  worker w1              drain: aws: spot; finished 3, nacked 2; 2 items re-pended\n" +
		"5       2030-01-02 03:04:05.004 1     run-finished         run r                  2 items; 2 done, 0 dead\n"
	require.Equal(t, want, res.stdout)

	res = runCLI(t, nil, "events", "--coord", srv.Addr(), "--run", "r", "--after", "2")
	require.Equal(t, 0, res.code, res.stderr)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[1], "run-finished")

	res = runCLI(t, nil, "events", "--coord", srv.Addr(), "--after", "5")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, "no events\n", res.stdout)

	res = runCLI(t, nil, "events", "--coord", srv.Addr(), "--json", "--after", "3")
	require.Equal(t, 0, res.code, res.stderr)
	lines = strings.Split(strings.TrimSpace(res.stdout), "\n")
	require.Len(t, lines, 2)
	var e map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &e))
	require.Equal(t, "EVENT_KIND_WORKER_DEREGISTERED", e["kind"])
	require.Equal(t, "4", e["seq"])
	require.Equal(t, "drain: aws: spot; finished 3, nacked 2", e["detail"])

	// Events dropped by the bound are named on stderr.
	srv.DropEventsBefore(4)
	res = runCLI(t, nil, "events", "--coord", srv.Addr(), "--after", "1")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stderr, "events 2 to 3 were dropped")
	require.Contains(t, res.stdout, "worker-deregistered")

	// The flood events of issue 21.
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli()
	srv.AddEvent(&rolloutv1.Event{Kind: rolloutv1.EventKind_EVENT_KIND_CONNS_REFUSED, Member: "c1", Count: 23900, UnixMs: at + 5,
		Detail: "listener grpc refused 23900 connections (per_ip 23900); most from 127.0.0.2 (23900)"})
	srv.AddEvent(&rolloutv1.Event{Kind: rolloutv1.EventKind_EVENT_KIND_LEADER_STEPPED_ASIDE, Member: "c1", UnixMs: at + 6,
		Detail: "the gRPC port has refused every new connection for 5s (at --max-conns, or out of files); handing leadership to c2"})
	res = runCLI(t, nil, "events", "--coord", srv.Addr(), "--after", "5")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, ""+
		"SEQ     TIME (UTC)              TERM  KIND                 SUBJECT                DETAIL\n"+
		"6       2030-01-02 03:04:05.005 1     conns-refused        member c1              listener grpc refused 23900 connections (per_ip 23900); most from 127.0.0.2 (23900)\n"+
		"7       2030-01-02 03:04:05.006 1     leader-stepped-aside member c1              the gRPC port has refused every new connection for 5s (at --max-conns, or out of files); handing leadership to c2\n",
		res.stdout)

	// A stalled run and its resumption name the input object.
	srv.AddEvent(&rolloutv1.Event{Kind: rolloutv1.EventKind_EVENT_KIND_RUN_STALLED, Run: "r", Worker: "w1", Count: 4, UnixMs: at + 7,
		Detail: "input object runs/r/inputs/c0: object not found"})
	srv.AddEvent(&rolloutv1.Event{Kind: rolloutv1.EventKind_EVENT_KIND_RUN_RESUMED, Run: "r", Count: 4, UnixMs: at + 8,
		Detail: "input object runs/r/inputs/c0: the run was submitted again"})
	res = runCLI(t, nil, "events", "--coord", srv.Addr(), "--after", "7")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "run-stalled")
	require.Contains(t, res.stdout, "input object runs/r/inputs/c0: object not found; 4 items waiting")
	require.Contains(t, res.stdout, "run-resumed")
	require.Contains(t, res.stdout, "the run was submitted again; 4 items back in the queue")

	// Usage.
	res = runCLI(t, nil, "events", "--coord", srv.Addr(), "--run", "")
	require.Equal(t, exitUsage, res.code)
	res = runCLI(t, nil, "events")
	require.Equal(t, exitUsage, res.code)
}

// TestEventsFollow: --follow prints the history, then an event recorded
// after it started, and exits 0 when
// interrupted.
func TestEventsFollow(t *testing.T) {
	srv := eventsFake(t)
	var out, errOut testbin.Output
	a := newApp(&out, &errOut, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- a.execute(ctx, []string{"--insecure", "events", "--coord", srv.Addr(), "--follow"}) }()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "run-finished") }, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return srv.Calls("Events") >= 2 }, 30*time.Second, 10*time.Millisecond, "a long-poll is waiting")

	srv.AddEvent(&rolloutv1.Event{Kind: rolloutv1.EventKind_EVENT_KIND_WORKER_EVICTED, Worker: "w3", Detail: "evicted by ops (role admin)"})
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "worker-evicted") }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, strings.Count(out.String(), "SEQ "), "one header")
	require.Equal(t, 1, strings.Count(out.String(), "run-finished"), "nothing printed twice")

	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code, errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("--follow did not end when interrupted")
	}
}
