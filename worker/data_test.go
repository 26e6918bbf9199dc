package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/coordtest"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/worker"
)

// countingStore wraps a store, counting ranged reads per object and
// failing writes while failPut is set.
type countingStore struct {
	worker.ObjectStore
	mu      sync.Mutex
	reads   map[string]int
	puts    int
	failPut error
}

func (c *countingStore) ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	c.mu.Lock()
	c.reads[key]++
	c.mu.Unlock()
	return c.ObjectStore.ReadRange(ctx, key, off, n)
}

func (c *countingStore) PutContent(ctx context.Context, prefix string, data []byte) (string, store.Sum, bool, error) {
	c.mu.Lock()
	c.puts++
	err := c.failPut
	c.mu.Unlock()
	if err != nil {
		return "", store.Sum{}, false, err
	}
	return c.ObjectStore.PutContent(ctx, prefix, data)
}

func (c *countingStore) Reads() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.reads))
	for k, v := range c.reads {
		out[k] = v
	}
	return out
}

// storeEnv is a file:// store in a temp dir, opened for the worker through
// a countingStore.
type storeEnv struct {
	url, dir string
	st       *store.Store
	counting *countingStore
	opens    int
}

func newStoreEnv(t *testing.T) *storeEnv {
	t.Helper()
	dir := t.TempDir()
	url := "file://" + filepath.ToSlash(dir)
	st, err := store.Open(context.Background(), url, store.DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return &storeEnv{url: url, dir: dir, st: st, counting: &countingStore{ObjectStore: st, reads: map[string]int{}}}
}

func (e *storeEnv) opener(t *testing.T) worker.StoreOpener {
	return func(_ context.Context, url string) (worker.ObjectStore, error) {
		if url != e.url {
			return nil, fmt.Errorf("unexpected store URL %q", url)
		}
		e.opens++
		return e.counting, nil
	}
}

var sampling = batch.SamplingParams{Temperature: 0.5, TopP: 1, MaxTokens: 16, Seed: 3}

const model = "m"

// chunk uploads lines as one input chunk of run and returns its key and
// the items referencing each line, with their sample ids (indexes from
// first).
func (e *storeEnv) chunk(t *testing.T, lines []string, first int) (string, []*rolloutv1.SubmitItem) {
	t.Helper()
	return e.chunkOf(t, run, lines, first)
}

// chunkOf is chunk for the named run.
func (e *storeEnv) chunkOf(t *testing.T, run string, lines []string, first int) (string, []*rolloutv1.SubmitItem) {
	t.Helper()
	var data []byte
	var items []*rolloutv1.SubmitItem
	for i, l := range lines {
		off := len(data)
		data = append(data, l...)
		idx := uint64(first + i)
		id := batch.SampleIDOfLine(model, []byte(l), sampling, idx)
		items = append(items, &rolloutv1.SubmitItem{Id: id[:], Index: idx,
			PayloadRef: &rolloutv1.DataRef{Offset: uint64(off), Length: uint64(len(l))}})
		data = append(data, '\n')
	}
	key, _, _, err := e.st.PutContent(context.Background(), store.InputPrefix(run), data)
	require.NoError(t, err)
	for _, it := range items {
		it.PayloadRef.Object = key
	}
	return key, items
}

func prompts(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`{"prompt":"prompt %d"}`, from+i)
	}
	return out
}

func storeSpec(e *storeEnv) *rolloutv1.RunSpec {
	return &rolloutv1.RunSpec{Model: model, Sampling: sampling.JSON(), Store: e.url}
}

// echo returns the payload it was given inside a JSON object.
func echo(_ context.Context, it worker.Item) ([]byte, error) {
	return fmt.Appendf(nil, `{"echo":%q,"deps":%d}`, it.Payload, len(it.Deps)), nil
}

// checkReportsStored makes srv verify, when a report arrives, that every
// result reference names stored bytes that hash to the reported blake3.
func checkReportsStored(t *testing.T, srv *coordtest.Server, e *storeEnv) func() []error {
	var mu sync.Mutex
	problems := new([]error)
	srv.Intercept("Report", func(_ context.Context, req any) (any, error) {
		for _, r := range req.(*rolloutv1.ReportRequest).GetReports() {
			ref := r.GetResultRef()
			if ref == nil {
				continue
			}
			b, err := e.st.ReadChecked(context.Background(), ref.GetObject(), int64(ref.GetOffset()), int64(ref.GetLength()), store.Sum(ref.GetBlake3()))
			if err == nil && len(r.GetResult()) != 0 {
				err = errors.New("a report has both a reference and an inline result")
			}
			if err == nil && !bytes.HasPrefix(b, []byte(`{"echo":`)) {
				err = fmt.Errorf("stored result %q is not the backend's", b)
			}
			if err != nil {
				mu.Lock()
				*problems = append(*problems, err)
				mu.Unlock()
			}
		}
		return nil, nil
	})
	return func() []error {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(*problems)
	}
}

// TestStorePayloadsAndResults: the items a worker adopts in one delivery
// are read with one ranged read per input object they share; each is
// checked against its sample id; the backend gets the line's bytes; the
// results of a flush are stored as one object per run before the report
// names them (checked when the report arrives); the ledger records
// references and no inline bytes.
func TestStorePayloadsAndResults(t *testing.T) {
	for _, how := range []string{"adopted", "claimed"} {
		t.Run(how, func(t *testing.T) { testStorePayloadsAndResults(t, how) })
	}
}

func testStorePayloadsAndResults(t *testing.T, how string) {
	e := newStoreEnv(t)
	srv := coordtest.Start(t, "a")
	srv.SetSpec(run, storeSpec(e))
	k1, items1 := e.chunk(t, prompts(0, 5), 0)
	k2, items2 := e.chunk(t, prompts(5, 3), 5)
	all := append(items1, items2...)
	if how == "adopted" {
		// Owned before the worker starts: one OwnedItems delivery.
		srv.AddWorker(wid)
		srv.Assign(wid, 1, run, all...)
	} else {
		// Pending before the worker starts: its first claim asks for up
		// to Backlog (16) items and gets all 8.
		srv.Add(run, all...)
	}
	problems := checkReportsStored(t, srv, e)

	rec := newRecorder(echo)
	cfg := testConfig()
	cfg.OpenStore = e.opener(t)
	cfg.Backlog = 16
	r := start(t, cfg, rec, srv.Addr())
	eventually(t, func() bool { return srv.Count(coordtest.Done) == len(all) }, "all items done")

	require.Empty(t, problems())
	st := r.w.Stats()
	require.Equal(t, uint64(len(all)), st.Claimed+st.Adopted, "every item delivered once")
	require.Equal(t, map[string]int{k1: 1, k2: 1}, e.counting.Reads(), "one ranged read per shared object")
	require.Equal(t, uint64(2), st.StoreReads)
	require.NotZero(t, st.StoreWrites)
	require.Equal(t, 1, e.opens, "the store is opened once")
	lines := append(prompts(0, 5), prompts(5, 3)...)
	for i, it := range all {
		v, ok := srv.Item(run, it.GetId())
		require.True(t, ok)
		require.Empty(t, v.Result, "no inline result")
		require.NotNil(t, v.ResultRef)
		require.True(t, strings.HasPrefix(v.ResultRef.GetObject(), store.ResultPrefix(run)), v.ResultRef.GetObject())
		b, err := e.st.ReadChecked(context.Background(), v.ResultRef.GetObject(), int64(v.ResultRef.GetOffset()),
			int64(v.ResultRef.GetLength()), store.Sum(v.ResultRef.GetBlake3()))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf(`{"echo":%q,"deps":0}`, lines[i]), string(b))
	}
}

// TestStoreHoldsMissingInput: a payload whose bytes are not the item's
// (the object was overwritten, the object is short or gone, its bytes do
// not match their hash) is reported held at once, naming the object: no
// failure is counted, the run is stalled on the object, and the backend
// never runs.
func TestStoreHoldsMissingInput(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(t *testing.T, e *storeEnv, key string, it *rolloutv1.SubmitItem)
		reason string
	}{
		{"changed object", func(t *testing.T, e *storeEnv, key string, _ *rolloutv1.SubmitItem) {
			path := filepath.Join(e.dir, filepath.FromSlash(key))
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, bytes.Replace(b, []byte("prompt 0"), []byte("prompt X"), 1), 0o644))
		}, "are not item 0's input"},
		{"short object", func(_ *testing.T, _ *storeEnv, _ string, it *rolloutv1.SubmitItem) {
			it.PayloadRef.Offset += 1 << 20
		}, "shorter than the range"},
		{"missing object", func(t *testing.T, e *storeEnv, key string, _ *rolloutv1.SubmitItem) {
			require.NoError(t, os.Remove(filepath.Join(e.dir, filepath.FromSlash(key))))
		}, "not found"},
		{"hash mismatch", func(_ *testing.T, _ *storeEnv, _ string, it *rolloutv1.SubmitItem) {
			it.PayloadRef.Blake3 = make([]byte, 32)
		}, "do not match their recorded blake3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newStoreEnv(t)
			srv := coordtest.Start(t, "a")
			srv.SetStallProbe(time.Hour) // no probe: the first report is the one checked
			srv.SetSpec(run, storeSpec(e))
			key, items := e.chunk(t, prompts(0, 1), 0)
			tt.tamper(t, e, key, items[0])
			srv.Add(run, items...)
			rec := newRecorder(echo)
			cfg := testConfig()
			cfg.OpenStore = e.opener(t)
			// A held report is not spaced out by the per-object backoff.
			cfg.DataFaultBackoff, cfg.DataFaultMaxBackoff = time.Hour, time.Hour
			r := start(t, cfg, rec, srv.Addr())
			eventually(t, func() bool { return srv.Stall(run) != nil }, "the run stalls")
			reps := srv.Reports()
			require.Len(t, reps, 1)
			require.Equal(t, rolloutv1.Outcome_OUTCOME_HELD, reps[0].GetOutcome())
			require.Equal(t, key, reps[0].GetHeldObject(), "the report names the object")
			require.Contains(t, reps[0].GetReason(), tt.reason)
			st := srv.Stall(run)
			require.Equal(t, key, st.GetObject())
			v, _ := srv.Item(run, items[0].GetId())
			require.Equal(t, coordtest.Pending, v.State)
			require.Zero(t, v.Failures, "no failure counted")
			require.Zero(t, rec.Started(string(items[0].GetId())), "the backend never ran")
			eventually(t, func() bool { return r.w.Stats().InputsHeld == 1 }, "the worker counts the held report")
		})
	}
}

// TestStoreWriteFailureHoldsResults: when the store refuses the results'
// write with a fault that may go away (a full disk), more times than
// max_failures, no attempt fails and nothing is reported: the results are
// held and written again after the store's backoff, and the items finish
// once the store works again.
func TestStoreWriteFailureHoldsResults(t *testing.T) {
	e := newStoreEnv(t)
	e.counting.failPut = fmt.Errorf("%w: writing: no space left on device", store.ErrUnavailable)
	srv := coordtest.Start(t, "a")
	srv.SetSpec(run, storeSpec(e))
	_, items := e.chunk(t, prompts(0, 2), 0)
	srv.Add(run, items...)
	problems := checkReportsStored(t, srv, e)
	cfg := testConfig()
	cfg.OpenStore = e.opener(t)
	// Backoffs 5 ms doubling: 7 writes within about 0.3 s, far inside the
	// hold limit (4 s) after which the items would be nacked.
	cfg.DataFaultBackoff, cfg.DataFaultMaxBackoff = 5*time.Millisecond, time.Second
	r := start(t, cfg, newRecorder(echo), srv.Addr())
	eventually(t, func() bool {
		e.counting.mu.Lock()
		defer e.counting.mu.Unlock()
		return e.counting.puts > 2*coordtest.MaxFailures
	}, "the write is tried more times than max_failures")
	require.Zero(t, srv.Count(coordtest.Dead), "no item went dead")
	require.Empty(t, srv.Reports(), "nothing reported while the results are not stored")
	for _, it := range items {
		v, _ := srv.Item(run, it.GetId())
		require.Equal(t, coordtest.Running, v.State, "the worker keeps the item")
		require.Zero(t, v.Failures)
	}
	require.NotZero(t, r.w.Stats().ResultWritesDeferred)
	e.counting.mu.Lock()
	e.counting.failPut = nil
	e.counting.mu.Unlock()
	eventually(t, func() bool { return srv.Count(coordtest.Done) == 2 }, "both items finish once the store works")
	for _, it := range items {
		v, _ := srv.Item(run, it.GetId())
		require.Zero(t, v.Failures)
		require.NotNil(t, v.ResultRef)
	}
	require.Empty(t, problems())
}

// TestStoreWriteRefusedFailsAttempts: a write the store refuses for good
// (the object is over its size limit) fails the attempts naming the store
// error; no report names a result reference.
func TestStoreWriteRefusedFailsAttempts(t *testing.T) {
	e := newStoreEnv(t)
	e.counting.failPut = fmt.Errorf("writing: %w: 2 GiB over the limit", store.ErrTooLarge)
	srv := coordtest.Start(t, "a")
	srv.SetSpec(run, storeSpec(e))
	_, items := e.chunk(t, prompts(0, 2), 0)
	srv.Add(run, items...)
	cfg := testConfig()
	cfg.OpenStore = e.opener(t)
	start(t, cfg, newRecorder(echo), srv.Addr())
	eventually(t, func() bool { return srv.Count(coordtest.Dead) == 2 }, "both items go dead after their attempts fail")
	for _, it := range items {
		v, _ := srv.Item(run, it.GetId())
		require.Contains(t, v.Reason, "over the limit")
		require.Contains(t, v.Reason, "store")
		require.Nil(t, v.ResultRef)
	}
	for _, r := range srv.Reports() {
		require.NotEqual(t, rolloutv1.Outcome_OUTCOME_DONE, r.GetOutcome(), "nothing reported done")
		require.Nil(t, r.GetResultRef())
	}
}

// TestStoreDependencies: an item whose dependency's result is in the store
// gets those bytes as the dependency's Result, checked against its hash.
func TestStoreDependencies(t *testing.T) {
	e := newStoreEnv(t)
	srv := coordtest.Start(t, "a")
	srv.SetSpec(run, storeSpec(e))
	_, items := e.chunk(t, prompts(0, 2), 0)
	items[1].DependsOn = [][]byte{items[0].GetId()}
	srv.Add(run, items...)
	var mu sync.Mutex
	var got []byte
	b := newRecorder(func(ctx context.Context, it worker.Item) ([]byte, error) {
		if len(it.Deps) == 1 {
			mu.Lock()
			got = bytes.Clone(it.Deps[0].Result)
			mu.Unlock()
		}
		return echo(ctx, it)
	})
	cfg := testConfig()
	cfg.OpenStore = e.opener(t)
	start(t, cfg, b, srv.Addr())
	eventually(t, func() bool { return srv.Count(coordtest.Done) == 2 }, "both items done")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, fmt.Sprintf(`{"echo":%q,"deps":0}`, prompts(0, 1)[0]), string(got))
}

// summarizing is a backend with a Summarizer.
type summarizing struct {
	*recorder
	size int
}

func (s summarizing) Summary(it worker.Item, res []byte) []byte {
	return bytes.Repeat([]byte("s"), s.size)
}

// TestSummaries: a Summarizer's output is reported with the result (inline
// runs too); one over MaxSummaryBytes is dropped, not the result.
func TestSummaries(t *testing.T) {
	for _, size := range []int{10, worker.MaxSummaryBytes + 1} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			srv := coordtest.Start(t, "a")
			srv.Add(run, sub("x", 0))
			start(t, testConfig(), summarizing{newRecorder(echo), size}, srv.Addr())
			eventually(t, func() bool { return srv.Count(coordtest.Done) == 1 }, "done")
			v, _ := srv.Item(run, []byte("x"))
			if size <= worker.MaxSummaryBytes {
				require.Equal(t, bytes.Repeat([]byte("s"), size), v.Summary)
			} else {
				require.Empty(t, v.Summary)
			}
			require.NotEmpty(t, v.Result, "an inline run keeps its inline result")
		})
	}
}

// flakyReads fails every ranged read with a store fault that may go away
// while failing is set.
type flakyReads struct {
	*countingStore
	mu      sync.Mutex
	failing bool
	fails   int
	// only, when set, limits the failures to keys with this prefix.
	only string
	// refuse makes the failures refusals (store.ErrRefused: access
	// denied) rather than 503s.
	refuse bool
}

func (f *flakyReads) ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	f.mu.Lock()
	failing := f.failing && strings.HasPrefix(key, f.only)
	if failing {
		f.fails++
	}
	f.mu.Unlock()
	if failing && f.refuse {
		return nil, fmt.Errorf("reading %s: %w: %w: 403 AccessDenied", key, store.ErrUnavailable, store.ErrRefused)
	}
	if failing {
		return nil, fmt.Errorf("reading %s: %w: 503 Slow Down", key, store.ErrUnavailable)
	}
	return f.countingStore.ReadRange(ctx, key, off, n)
}

func (f *flakyReads) set(failing bool) {
	f.mu.Lock()
	f.failing = failing
	f.mu.Unlock()
}

func (f *flakyReads) failures() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fails
}

// TestStoreReadFaultNacks: a store whose reads fail for a while with a
// fault that may go away (unreachable, 5xx) does not use up the item's
// failures: the worker gives the item back after the object's backoff
// (held with store_unavailable, which isolates the run of a fleet of one
// worker; it was a nack before isolation existed), more times than
// max_failures, and the item finishes once reads work again, the run
// resuming by itself.
func TestStoreReadFaultNacks(t *testing.T) {
	e := newStoreEnv(t)
	srv := coordtest.Start(t, "a")
	srv.SetSpec(run, storeSpec(e))
	_, items := e.chunk(t, prompts(0, 1), 0)
	flaky := &flakyReads{countingStore: e.counting, failing: true}
	srv.Add(run, items...)
	cfg := testConfig()
	cfg.OpenStore = func(context.Context, string) (worker.ObjectStore, error) { return flaky, nil }
	start(t, cfg, newRecorder(echo), srv.Addr())
	eventually(t, func() bool { return flaky.failures() > 2*coordtest.MaxFailures }, "reads fail more times than max_failures")
	require.Zero(t, srv.Count(coordtest.Dead))
	v, _ := srv.Item(run, items[0].GetId())
	require.Zero(t, v.Failures, "a store fault counts no failure")
	st := srv.Stall(run)
	require.NotNil(t, st, "the only worker's report isolates the run")
	require.True(t, st.GetStoreUnreachable())
	require.Contains(t, st.GetReason(), "503 Slow Down")
	flaky.set(false)
	eventually(t, func() bool { return srv.Count(coordtest.Done) == 1 }, "the item finishes once reads work")
	require.Nil(t, srv.Stall(run), "the probe read its input: the run resumed")
	for _, r := range srv.Reports() {
		require.NotEqual(t, rolloutv1.Outcome_OUTCOME_FAILED, r.GetOutcome())
		if r.GetOutcome() == rolloutv1.Outcome_OUTCOME_HELD {
			require.True(t, r.GetStoreUnavailable(), "a store fault is held as the store unreachable, not as a missing input")
		}
	}
}

// TestStoreRefusalFailsItems: a store that answers with a refusal that
// retrying cannot change (access denied) is not an outage: the items fail
// (and go Dead after max_failures) naming the refusal, and the run is not
// isolated.
func TestStoreRefusalFailsItems(t *testing.T) {
	e := newStoreEnv(t)
	srv := coordtest.Start(t, "a")
	srv.SetSpec(run, storeSpec(e))
	_, items := e.chunk(t, prompts(0, 2), 0)
	flaky := &flakyReads{countingStore: e.counting, failing: true, refuse: true}
	srv.Add(run, items...)
	cfg := testConfig()
	cfg.OpenStore = func(context.Context, string) (worker.ObjectStore, error) { return flaky, nil }
	start(t, cfg, newRecorder(echo), srv.Addr())
	eventually(t, func() bool { return srv.Count(coordtest.Dead) == len(items) }, "refused items go Dead after max_failures")
	require.Nil(t, srv.Stall(run), "a refusal does not isolate the run")
	v, _ := srv.Item(run, items[0].GetId())
	require.Contains(t, v.Reason, "AccessDenied")
	for _, r := range srv.Reports() {
		require.NotEqual(t, rolloutv1.Outcome_OUTCOME_HELD, r.GetOutcome())
	}
}

// TestStoreUnreachableIsolatesRun: two workers, two runs; one run's
// inputs cannot be read (the store answers 503) while the other's can.
// Both workers report the first run's items held with store_unavailable
// (never failed), the run is isolated (its stall says the store is
// unreachable), the other run finishes meanwhile, and once reads work the
// isolated run resumes by itself and finishes, every item exactly once.
func TestStoreUnreachableIsolatesRun(t *testing.T) {
	e := newStoreEnv(t)
	srv := coordtest.Start(t, "a")
	srv.SetStallProbe(100 * time.Millisecond)
	const other = "other-run"
	srv.SetSpec(run, storeSpec(e))
	srv.SetSpec(other, storeSpec(e))
	_, dark := e.chunkOf(t, run, prompts(0, 6), 0)
	_, lit := e.chunkOf(t, other, prompts(100, 20), 0)
	flaky := &flakyReads{countingStore: e.counting, failing: true, only: store.InputPrefix(run)}
	cfg := testConfig()
	cfg.OpenStore = func(context.Context, string) (worker.ObjectStore, error) { return flaky, nil }
	srv.Add(run, dark...)
	srv.Add(other, lit...)
	a := start(t, cfg, newRecorder(echo), srv.Addr())
	cfg.ID = "worker-b"
	b := start(t, cfg, newRecorder(echo), srv.Addr())
	eventually(t, func() bool { st := srv.Stall(run); return st != nil && st.GetStoreUnreachable() },
		"the run whose store is unreachable is isolated")
	eventually(t, func() bool {
		for _, it := range lit {
			if v, _ := srv.Item(other, it.GetId()); v.State != coordtest.Done {
				return false
			}
		}
		return true
	}, "the other run finishes while the first is isolated")
	require.NotNil(t, srv.Stall(run), "still isolated: its store still fails")
	events := srv.EventsOf(rolloutv1.EventKind_EVENT_KIND_RUN_STALLED)
	require.Len(t, events, 1)
	require.Contains(t, events[0].GetDetail(), "store unreachable")

	flaky.set(false)
	eventually(t, func() bool { return srv.Count(coordtest.Done) == len(dark)+len(lit) }, "every item finishes once the store answers")
	require.Nil(t, srv.Stall(run))
	resumed := srv.EventsOf(rolloutv1.EventKind_EVENT_KIND_RUN_RESUMED)
	require.Len(t, resumed, 1)
	require.Contains(t, resumed[0].GetDetail(), "store reachable again")
	require.Zero(t, srv.Count(coordtest.Dead))
	for _, it := range dark {
		v, _ := srv.Item(run, it.GetId())
		require.Zero(t, v.Failures, "an unreachable store counts no failure")
	}
	for _, r := range srv.Reports() {
		require.NotEqual(t, rolloutv1.Outcome_OUTCOME_FAILED, r.GetOutcome())
	}
	require.NotZero(t, a.w.Stats().StoreHeld+b.w.Stats().StoreHeld)
	require.Zero(t, a.w.Stats().InputsHeld+b.w.Stats().InputsHeld, "nothing was held as a missing input")
}

// TestStoreInputDeletedMidRun: an input chunk of one run deleted while the
// run is under way makes its items held (not failed) and the run stalled;
// another run's items submitted behind it proceed and finish meanwhile;
// putting the chunk back lets the stalled run finish, with no failure
// counted.
func TestStoreInputDeletedMidRun(t *testing.T) {
	e := newStoreEnv(t)
	srv := coordtest.Start(t, "a")
	srv.SetStallProbe(50 * time.Millisecond)
	const other = "other-run"
	srv.SetSpec(run, storeSpec(e))
	srv.SetSpec(other, storeSpec(e))
	_, first := e.chunkOf(t, run, prompts(0, 4), 0)
	gone, second := e.chunkOf(t, run, prompts(4, 4), 4)
	path := filepath.Join(e.dir, filepath.FromSlash(gone))
	saved, err := os.ReadFile(path)
	require.NoError(t, err)

	// The first chunk's items finish; then the second chunk disappears.
	srv.Add(run, first...)
	cfg := testConfig()
	cfg.OpenStore = e.opener(t)
	cfg.DataFaultBackoff, cfg.DataFaultMaxBackoff = time.Hour, time.Hour // a held report must not wait for it
	r := start(t, cfg, newRecorder(echo), srv.Addr())
	eventually(t, func() bool { return srv.Count(coordtest.Done) == 4 }, "the first chunk's items finish")
	require.NoError(t, os.Remove(path))
	srv.Add(run, second...)
	eventually(t, func() bool { return srv.Stall(run) != nil }, "the run stalls on the missing chunk")
	require.Equal(t, gone, srv.Stall(run).GetObject())
	events := srv.EventsOf(rolloutv1.EventKind_EVENT_KIND_RUN_STALLED)
	require.Len(t, events, 1)
	require.Contains(t, events[0].GetDetail(), gone)

	// Another run proceeds while this one is stalled.
	_, others := e.chunkOf(t, other, prompts(100, 6), 0)
	srv.Add(other, others...)
	eventually(t, func() bool {
		for _, it := range others {
			if v, _ := srv.Item(other, it.GetId()); v.State != coordtest.Done {
				return false
			}
		}
		return true
	}, "the other run's items finish while the run is stalled")
	require.NotNil(t, srv.Stall(run), "still stalled: the chunk is still missing")
	for _, it := range second {
		v, _ := srv.Item(run, it.GetId())
		require.NotEqual(t, coordtest.Dead, v.State)
		require.Zero(t, v.Failures, "a missing input counts no failure")
	}

	// The chunk is back: the run resumes and finishes.
	require.NoError(t, os.WriteFile(path, saved, 0o644))
	eventually(t, func() bool { return srv.Count(coordtest.Done) == 14 }, "every item finishes once the chunk is back")
	require.Nil(t, srv.Stall(run))
	require.Len(t, srv.EventsOf(rolloutv1.EventKind_EVENT_KIND_RUN_RESUMED), 1)
	require.Zero(t, srv.Count(coordtest.Dead))
	require.NotZero(t, r.w.Stats().InputsHeld)
	for _, rep := range srv.Reports() {
		require.NotEqual(t, rolloutv1.Outcome_OUTCOME_FAILED, rep.GetOutcome())
	}
}

// TestStoreWriteFailureNacksAfterHoldLimit: results whose write keeps
// failing with a store fault are held for 4·DataFaultMaxBackoff, then
// their items are nacked (no failure counted) so that another worker may
// run them; none goes Dead.
func TestStoreWriteFailureNacksAfterHoldLimit(t *testing.T) {
	e := newStoreEnv(t)
	e.counting.failPut = fmt.Errorf("%w: writing: 403 AccessDenied", store.ErrUnavailable)
	srv := coordtest.Start(t, "a")
	srv.SetSpec(run, storeSpec(e))
	_, items := e.chunk(t, prompts(0, 1), 0)
	srv.Add(run, items...)
	cfg := testConfig()
	cfg.OpenStore = e.opener(t)
	cfg.DataFaultBackoff, cfg.DataFaultMaxBackoff = 50*time.Millisecond, 250*time.Millisecond // hold limit 1s
	began := time.Now()
	start(t, cfg, newRecorder(echo), srv.Addr())
	eventually(t, func() bool {
		for _, r := range srv.Reports() {
			if r.GetOutcome() == rolloutv1.Outcome_OUTCOME_NACK {
				return true
			}
		}
		return false
	}, "the item is nacked after the hold limit")
	require.GreaterOrEqual(t, time.Since(began), time.Second, "nacked before the hold limit")
	require.Zero(t, srv.Count(coordtest.Dead))
	v, _ := srv.Item(run, items[0].GetId())
	require.Zero(t, v.Failures)
	for _, r := range srv.Reports() {
		require.NotEqual(t, rolloutv1.Outcome_OUTCOME_FAILED, r.GetOutcome())
		require.Nil(t, r.GetResultRef())
	}
}
