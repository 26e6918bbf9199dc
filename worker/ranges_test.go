package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/raftnode"
	"github.com/rollout/rollout/server"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/worker"
)

// appliedRange is one RangeReport the ledger applied (not a duplicate).
type appliedRange struct {
	worker string
	rep    *rolloutv1.RangeReport
	res    *rolloutv1.RangeReportResult
}

// rangeReplica is one real coordinator replica (Raft on bolt files in a
// temp dir, the ledger, the gRPC service on loopback) that records the
// range reports it applied.
type rangeReplica struct {
	addr    string
	mu      sync.Mutex
	applied []appliedRange
	misses  int
	// loseAnswers, while positive, drops that many answers of applied
	// ReportRange calls (the caller sees Unavailable): a leader killed
	// after it committed, before it answered.
	loseAnswers int
}

func startRangeReplica(t *testing.T) *rangeReplica {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	rr := &rangeReplica{addr: lis.Addr().String()}
	log := hclog.New(&hclog.LoggerOptions{Name: "c1", Level: hclog.Warn})
	ledger, err := fsm.New(fsm.DefaultConfig())
	require.NoError(t, err)
	rc := raftnode.DefaultConfig()
	rc.ID, rc.DataDir, rc.RaftAddr = "c1", t.TempDir(), "127.0.0.1:0"
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 300*time.Millisecond, 300*time.Millisecond, 200*time.Millisecond
	rc.Logger = log
	rc.EncodeBatch = fsm.EncodeEntry
	rc.EpochCommand = func(uint64) ([]byte, error) {
		return fsm.EpochCommand("c1", rr.addr)
	}
	node, err := raftnode.New(rc, ledger)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = node.Shutdown(ctx)
	})
	sc := server.DefaultConfig()
	sc.ReplicaID, sc.GRPCAddr, sc.Insecure, sc.Logger = "c1", rr.addr, true, log
	sc.ScanInterval = 100 * time.Millisecond
	srv, err := server.New(sc, node, ledger)
	require.NoError(t, err)
	record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if info.FullMethod == rolloutv1.Coordinator_ReportRange_FullMethodName && err == nil {
			q, p := req.(*rolloutv1.ReportRangeRequest), resp.(*rolloutv1.ReportRangeResponse)
			rr.mu.Lock()
			for i, r := range p.GetResults() {
				switch {
				case r.GetStatus() == rolloutv1.ReportStatus_REPORT_STATUS_APPLIED && !r.GetDuplicate():
					rr.applied = append(rr.applied, appliedRange{worker: q.GetWorkerId(), rep: q.GetReports()[i], res: r})
				case r.GetStatus() == rolloutv1.ReportStatus_REPORT_STATUS_CAS_MISS:
					rr.misses++
				}
			}
			lose := rr.loseAnswers > 0 && len(p.GetResults()) > 0
			if lose {
				rr.loseAnswers--
			}
			rr.mu.Unlock()
			if lose {
				return nil, status.Error(codes.Unavailable, "test: the answer was lost after the report was applied")
			}
		}
		return resp, err
	}
	g := grpc.NewServer(append(append(server.NewAuthz(true).ServerOptions(), srv.GRPCOptions()...), grpc.ChainUnaryInterceptor(record))...)
	srv.RegisterOn(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go srv.RunFailureScan(ctx)
	require.NoError(t, node.Bootstrap())
	require.Eventually(t, func() bool { _, ok := node.ServingTerm(); return ok }, 30*time.Second, 10*time.Millisecond, "no serving leader")
	return rr
}

func (rr *rangeReplica) client(t *testing.T) *coordclient.Client {
	t.Helper()
	cc := coordclient.DefaultConfig()
	cc.Addrs = []string{rr.addr}
	cc.CallTimeout = 5 * time.Second
	cl, err := coordclient.New(cc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func (rr *rangeReplica) reports() []appliedRange {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return append([]appliedRange(nil), rr.applied...)
}

func (rr *rangeReplica) counters(t *testing.T, run string) *rolloutv1.RunCounters {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rr.client(t).RunStatus(ctx, &rolloutv1.RunStatusRequest{Run: run})
	require.NoError(t, err)
	return resp.GetRuns()[0]
}

// waitRun waits until every index of run is done or dead.
func (rr *rangeReplica) waitRun(t *testing.T, run string, total uint64, d time.Duration) *rolloutv1.RunCounters {
	t.Helper()
	var c *rolloutv1.RunCounters
	deadline := time.Now().Add(d)
	for {
		c = rr.counters(t, run)
		if c.GetDone()+c.GetDead() == total {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s did not finish: %v", run, c)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rangeInput is a range run's input: its lines by index.
type rangeInput struct {
	run   string
	lines map[uint64][]byte
	total uint64
}

// submitRanges uploads chunks of the given sizes (range chunks, PutContent)
// and submits them as one range run.
func submitRanges(t *testing.T, rr *rangeReplica, e *storeEnv, run string, maxFailures uint32, sizes ...int) *rangeInput {
	t.Helper()
	in := &rangeInput{run: run, lines: map[uint64][]byte{}}
	var ranges []*rolloutv1.InputRange
	idx := uint64(0)
	for _, n := range sizes {
		var c store.RangeChunk
		first := idx
		for i := 0; i < n; i++ {
			l := fmt.Appendf(nil, `{"prompt":"prompt %d of %s"}`, idx, run)
			c.Add(l)
			in.lines[idx] = l
			idx++
		}
		key, _, _, err := e.st.PutContent(context.Background(), store.InputPrefix(run), c.Bytes())
		require.NoError(t, err)
		ranges = append(ranges, &rolloutv1.InputRange{Index: first, Count: uint64(n),
			PayloadRef: &rolloutv1.DataRef{Object: key, Length: uint64(c.DataLen())}})
	}
	in.total = idx
	spec := storeSpec(e)
	spec.Total, spec.MaxFailures = idx, maxFailures
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rr.client(t).SubmitRanges(ctx, &rolloutv1.SubmitRangesRequest{Run: run, Spec: spec, Ranges: ranges})
	require.NoError(t, err)
	require.EqualValues(t, idx, resp.GetCreated())
	return in
}

// checkRangeResults checks the applied reports of in's run: each index is
// done at most once (exactly once when every index is done), each result
// object is stored, matches its blake3, decodes and holds exactly the
// report's done indexes with the sample ids of their lines and results the
// backend would give. It returns the done and failed reports per index.
func checkRangeResults(t *testing.T, rr *rangeReplica, e *storeEnv, in *rangeInput) (done map[uint64]string, failed map[uint64]int) {
	t.Helper()
	done, failed = map[uint64]string{}, map[uint64]int{}
	for _, a := range rr.reports() {
		r := a.rep
		if r.GetRun() != in.run {
			continue
		}
		isFailed := map[uint64]bool{}
		for _, f := range r.GetFailed() {
			isFailed[f.GetIndex()] = true
			failed[f.GetIndex()]++
		}
		var want []uint64
		for idx := r.GetLo(); idx < r.GetDoneTo(); idx++ {
			if isFailed[idx] {
				continue
			}
			prev, twice := done[idx]
			require.False(t, twice, "index %d done twice: by %s and by %s", idx, prev, a.worker)
			done[idx] = a.worker
			want = append(want, idx)
		}
		if len(want) == 0 {
			require.Nil(t, r.GetResultRef())
			continue
		}
		ref := r.GetResultRef()
		require.NotNil(t, ref)
		require.Zero(t, ref.GetOffset())
		b, err := e.st.ReadChecked(context.Background(), ref.GetObject(), 0, int64(ref.GetLength()), store.Sum(ref.GetBlake3()))
		require.NoError(t, err, "the result object of [%d, %d) is stored with its blake3", r.GetLo(), r.GetDoneTo())
		rs, err := store.DecodeRangeResults(b)
		require.NoError(t, err)
		require.Len(t, rs, len(want))
		for i, res := range rs {
			require.Equal(t, want[i], res.Index)
			line := in.lines[res.Index]
			require.Equal(t, batch.SampleIDOfLine(model, line, sampling, res.Index), res.SampleID, "sample id of index %d", res.Index)
			require.Equal(t, string(rangeEcho(res.Index, line)), string(res.Result))
		}
	}
	return done, failed
}

// rangeOpener opens e's store for any number of workers (none of which
// closes it when its Run returns).
func (e *storeEnv) rangeOpener() worker.StoreOpener {
	return func(context.Context, string) (worker.ObjectStore, error) {
		return struct{ worker.ObjectStore }{e.st}, nil
	}
}

// rangeEcho is what rangeBackend returns for an index.
func rangeEcho(idx uint64, line []byte) []byte {
	return fmt.Appendf(nil, `{"index":%d,"echo":%q}`, idx, line)
}

// rangeBackend echoes each sub-item, checking that it is the batch item
// the backend would see for that line; fail, when set, decides failures.
type rangeBackend struct {
	t     *testing.T
	delay time.Duration
	fail  func(it worker.Item, n int) error
	mu    sync.Mutex
	runs  map[uint64]int
}

func (b *rangeBackend) Run(ctx context.Context, it worker.Item) ([]byte, error) {
	b.mu.Lock()
	if b.runs == nil {
		b.runs = map[uint64]int{}
	}
	b.runs[it.Index]++
	n := b.runs[it.Index]
	b.mu.Unlock()
	id := batch.SampleIDOfLine(model, it.Payload, sampling, it.Index)
	if !bytes.Equal(id[:], it.ID) || it.Model != model || it.Kind != "" || it.Run == "" || it.Attempt == 0 || it.Term == 0 {
		b.t.Errorf("index %d: not the batch item of its line: %+v", it.Index, it)
	}
	if b.delay > 0 {
		select {
		case <-time.After(b.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if b.fail != nil {
		if err := b.fail(it, n); err != nil {
			return nil, err
		}
	}
	return rangeEcho(it.Index, it.Payload), nil
}

func rangeConfig(id string) worker.Config {
	cfg := testConfig()
	cfg.ID = id
	cfg.RangeReportIndexes = 16
	cfg.RangeReportInterval = 100 * time.Millisecond
	cfg.ReconcileInterval = time.Second
	return cfg
}

// TestRangeRunToTheEnd: a range run of 300 lines in 3 chunks is run to
// the end by one worker and by two, each index done exactly once, each
// result object holding the right sample ids and results.
func TestRangeRunToTheEnd(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d workers", n), func(t *testing.T) {
			rr := startRangeReplica(t)
			e := newStoreEnv(t)
			in := submitRanges(t, rr, e, "rr", 3, 120, 100, 80)
			var ws []*running
			for i := range n {
				ws = append(ws, start(t, func() worker.Config {
					cfg := rangeConfig(fmt.Sprintf("w%d", i+1))
					cfg.OpenStore = e.rangeOpener()
					return cfg
				}(), &rangeBackend{t: t, delay: time.Millisecond}, rr.addr))
			}
			c := rr.waitRun(t, "rr", in.total, 60*time.Second)
			require.EqualValues(t, in.total, c.GetDone())
			done, failed := checkRangeResults(t, rr, e, in)
			require.Len(t, done, int(in.total))
			require.Empty(t, failed)
			var completed uint64
			for _, w := range ws {
				eventually(t, func() bool { return w.w.Stats().Held == 0 }, "the worker holds nothing at the end")
				st := w.w.Stats()
				completed += st.Completed
			}
			require.Equal(t, in.total, completed, "the workers count every index done once")
		})
	}
}

// TestRangeLostAnswersCounted: the answers of applied range reports are
// lost; the worker sends them again, the ledger answers duplicate, and the
// worker counts each index done exactly once all the same.
func TestRangeLostAnswersCounted(t *testing.T) {
	rr := startRangeReplica(t)
	rr.mu.Lock()
	rr.loseAnswers = 3
	rr.mu.Unlock()
	e := newStoreEnv(t)
	in := submitRanges(t, rr, e, "lost", 3, 120, 100, 80)
	cfg := rangeConfig("w1")
	cfg.OpenStore = e.rangeOpener()
	w := start(t, cfg, &rangeBackend{t: t, delay: time.Millisecond}, rr.addr)
	c := rr.waitRun(t, "lost", in.total, 60*time.Second)
	require.EqualValues(t, in.total, c.GetDone())
	rr.mu.Lock()
	require.Zero(t, rr.loseAnswers, "every lost answer was used")
	rr.mu.Unlock()
	eventually(t, func() bool { return w.w.Stats().Held == 0 }, "the worker holds nothing at the end")
	require.Equal(t, in.total, w.w.Stats().Completed, "indexes whose answer was lost are counted once")
}

// TestRangeFailedIndex: a backend failure on one index becomes a failed
// index, retried as a one-index range and then done; a permanent failure
// goes dead at once; the other indexes are done.
func TestRangeFailedIndex(t *testing.T) {
	rr := startRangeReplica(t)
	e := newStoreEnv(t)
	in := submitRanges(t, rr, e, "rf", 3, 60, 40)
	b := &rangeBackend{t: t, fail: func(it worker.Item, n int) error {
		switch {
		case it.Index == 17 && n == 1:
			return errors.New("transient backend error")
		case it.Index == 71:
			return fmt.Errorf("bad request: %w", worker.ErrPermanent)
		}
		return nil
	}}
	cfg := rangeConfig("w1")
	cfg.OpenStore = e.rangeOpener()
	w := start(t, cfg, b, rr.addr)
	c := rr.waitRun(t, "rf", in.total, 60*time.Second)
	require.EqualValues(t, in.total-1, c.GetDone())
	require.EqualValues(t, 1, c.GetDead())
	done, failed := checkRangeResults(t, rr, e, in)
	require.Len(t, done, int(in.total-1))
	require.Equal(t, map[uint64]int{17: 1, 71: 1}, failed)
	require.Contains(t, done, uint64(17), "the failed index was retried and done")
	require.NotContains(t, done, uint64(71))
	for _, a := range rr.reports() {
		for _, f := range a.rep.GetFailed() {
			if f.GetIndex() == 71 {
				require.True(t, f.GetPermanent())
				require.Contains(t, f.GetReason(), "bad request")
			}
			if f.GetIndex() == 17 {
				require.False(t, f.GetPermanent())
				require.Contains(t, f.GetReason(), "transient backend error")
			}
		}
	}
	eventually(t, func() bool { return w.w.Stats().Held == 0 }, "the worker holds nothing at the end")
}

// TestRangeStolenTail: a slow worker holding a long range has its tail
// stolen by an idle second worker; the victim stops at the cut and both
// finish the run, each index done once.
func TestRangeStolenTail(t *testing.T) {
	rr := startRangeReplica(t)
	e := newStoreEnv(t)
	in := submitRanges(t, rr, e, "rs", 3, 200)
	cfg := rangeConfig("w1")
	cfg.OpenStore = e.rangeOpener()
	cfg.Concurrency, cfg.Backlog = 2, 4
	cfg.ClaimHorizon = time.Minute // holds the whole run once measured
	w1 := start(t, cfg, &rangeBackend{t: t, delay: 20 * time.Millisecond}, rr.addr)
	eventually(t, func() bool { return rr.counters(t, "rs").GetPending() == 0 }, "w1 claims the whole run")
	cfg2 := rangeConfig("w2")
	cfg2.OpenStore = e.rangeOpener()
	w2 := start(t, cfg2, &rangeBackend{t: t, delay: time.Millisecond}, rr.addr)
	c := rr.waitRun(t, "rs", in.total, 60*time.Second)
	require.EqualValues(t, in.total, c.GetDone())
	done, _ := checkRangeResults(t, rr, e, in)
	require.Len(t, done, int(in.total))
	byWorker := map[string]int{}
	for _, w := range done {
		byWorker[w]++
	}
	require.Positive(t, byWorker["w1"])
	require.Positive(t, byWorker["w2"], "w2 finished a stolen tail")
	require.Positive(t, w2.w.Stats().Stolen)
	for _, w := range []*running{w1, w2} {
		eventually(t, func() bool { return w.w.Stats().Held == 0 }, "the worker holds nothing at the end")
	}
}

// TestRangeDrain: a drain gives the unstarted tail of a range back at once
// (release_from), reports the finished prefix and gives back what is left
// (nack_rest); another worker finishes the run.
func TestRangeDrain(t *testing.T) {
	rr := startRangeReplica(t)
	e := newStoreEnv(t)
	in := submitRanges(t, rr, e, "rd", 3, 150)
	cfg := rangeConfig("w1")
	cfg.OpenStore = e.rangeOpener()
	cfg.Concurrency, cfg.Backlog = 2, 4
	cfg.ClaimHorizon = time.Minute
	cfg.RangeReportInterval = time.Hour // only the drain reports
	cfg.RangeReportIndexes = 1 << 20
	w1 := start(t, cfg, &rangeBackend{t: t, delay: 10 * time.Millisecond}, rr.addr)
	eventually(t, func() bool { return rr.counters(t, "rd").GetPending() == 0 && w1.w.Stats().Executing > 0 }, "w1 runs the whole run")
	eventually(t, func() bool { return w1.w.Stats().ItemsPerSec > 0 }, "w1 made progress")
	time.Sleep(100 * time.Millisecond)
	w1.stop(t)
	rep, ok := w1.w.Drained()
	require.True(t, ok)
	require.Positive(t, rep.Unstarted, "the drain found unstarted indexes")
	var nacked uint64
	for _, n := range rep.Nacked {
		nacked += n.Count
	}
	require.Positive(t, nacked, "the drain gave back the rest of a range: %v", worker.FormatItemRefs(rep.Nacked, 8))
	var doneByW1, repended, released uint64
	for _, a := range rr.reports() {
		if a.worker == "w1" && (a.rep.GetNackRest() || a.rep.GetReleaseFrom() > 0) {
			repended += a.res.GetRepended()
		}
		if a.worker == "w1" && a.rep.GetReleaseFrom() > 0 {
			released += a.res.GetRepended()
		}
		if a.worker == "w1" {
			doneByW1 += a.rep.GetDoneTo() - a.rep.GetLo() - uint64(len(a.rep.GetFailed()))
		}
	}
	require.Positive(t, repended, "nack_rest gave indexes back")
	require.Positive(t, released, "the drain gave the unstarted tail back at once (release_from), before the started indexes finished")
	require.Positive(t, doneByW1, "the drain reported the finished prefix")
	c := rr.counters(t, "rd")
	require.Equal(t, doneByW1, c.GetDone())
	require.Equal(t, in.total-doneByW1, c.GetPending())

	cfg2 := rangeConfig("w2")
	cfg2.OpenStore = e.rangeOpener()
	start(t, cfg2, &rangeBackend{t: t}, rr.addr)
	c = rr.waitRun(t, "rd", in.total, 60*time.Second)
	require.EqualValues(t, in.total, c.GetDone())
	done, _ := checkRangeResults(t, rr, e, in)
	var missing []uint64
	for i := range in.total {
		if _, ok := done[i]; !ok {
			missing = append(missing, i)
		}
	}
	require.Empty(t, missing, "indexes never reported done")
}
