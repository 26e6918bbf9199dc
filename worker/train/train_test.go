package train_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	btrain "github.com/rollout/rollout/batch/train"
	"github.com/rollout/rollout/gpu"
	"github.com/rollout/rollout/gpu/mlp"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/train"
)

// digits loads the repository's digits (`make data`); without them the
// test is skipped, except under CI=true where it fails.
func digits(t *testing.T) *btrain.Digits {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test's directory")
		dir = parent
	}
	d, err := btrain.LoadDigits(filepath.Join(dir, btrain.DefaultDataDir))
	if errors.Is(err, btrain.ErrNoData) && os.Getenv("CI") != "true" {
		t.Skipf("environment: %v (with CI=true this fails)", err)
	}
	require.NoError(t, err)
	return d
}

func config(t *testing.T, name string, hidden, shards, batch, steps, interval int, lr float64) *btrain.Config {
	t.Helper()
	text := fmt.Sprintf("name = %q\n[model]\nhidden = [%d]\nactivation = \"relu\"\n[data]\nset = \"digits\"\n"+
		"[train]\nshards = %d\nbatch_size = %d\nsteps = %d\nlearning_rate = %v\nseed = 3\ncheckpoint_interval = %d\n",
		name, hidden, shards, batch, steps, lr, interval)
	c, err := btrain.ParseConfig([]byte(text), "train.toml")
	require.NoError(t, err)
	return c
}

// ledger stands in for the coordinator: it runs a plan's items in index
// order, handing each its dependencies' results as the ledger does.
type ledger struct {
	plan    *btrain.Plan
	results map[string][]byte
	term    uint64
}

func newLedger(t *testing.T, c *btrain.Config, d *btrain.Digits) *ledger {
	p, err := btrain.NewPlan(c, d)
	require.NoError(t, err)
	return &ledger{plan: p, results: map[string][]byte{}, term: 1}
}

// item returns plan item i as a worker receives it.
func (l *ledger) item(t *testing.T, i int) worker.Item {
	it, err := l.plan.Item(i)
	require.NoError(t, err)
	wi := worker.Item{Run: l.plan.Config().Name, ID: it.ID, Index: it.Index, Payload: it.Payload, Attempt: 1,
		Kind: btrain.Kind, Term: l.term}
	for _, d := range it.DependsOn {
		r, ok := l.results[string(d)]
		require.True(t, ok, "item %d: dependency %x not done", i, d)
		wi.Deps = append(wi.Deps, worker.Dependency{ID: d, Result: r})
	}
	return wi
}

// run executes items [from, to) on b.
func (l *ledger) run(t *testing.T, b *train.Backend, from, to int) {
	for i := from; i < to; i++ {
		wi := l.item(t, i)
		res, err := b.Run(context.Background(), wi)
		require.NoError(t, err, "item %d", i)
		l.results[string(wi.ID)] = res
	}
}

func (l *ledger) all() [][]byte {
	var out [][]byte
	for i := range l.plan.Len() {
		it, _ := l.plan.Item(i)
		out = append(out, l.results[string(it.ID)])
	}
	return out
}

func newBackend(t *testing.T, dev gpu.Device, newest func() uint64) *train.Backend {
	b, err := train.NewBackend(dev, newest)
	require.NoError(t, err)
	return b
}

// TestTrainsDigitsThroughItems: a whole run, item by item as the ledger
// hands them out, reaches 95% held-out accuracy; the per-step metrics
// decode with StepsFromResults.
func TestTrainsDigitsThroughItems(t *testing.T) {
	d := digits(t)
	c := config(t, "digits-e2e", 64, 4, 200, 200, 50, 1.0)
	l := newLedger(t, c, d)
	dev := gpu.NewCPU()
	defer dev.Close()
	l.run(t, newBackend(t, dev, func() uint64 { return 1 }), 0, l.plan.Len())

	steps, err := btrain.StepsFromResults(l.all())
	require.NoError(t, err)
	require.Len(t, steps, 200)
	var evals []btrain.Metrics
	for i, s := range steps {
		require.Equal(t, i+1, s.Step)
		require.Equal(t, 200, s.Train.Count)
		if s.Eval != nil {
			evals = append(evals, *s.Eval)
		}
	}
	require.Len(t, evals, 4)
	last := evals[len(evals)-1]
	t.Logf("first step train loss %.3f; held-out at checkpoints: %+v", steps[0].Train.Loss, evals)
	require.Equal(t, 359, last.Count)
	require.GreaterOrEqual(t, last.Accuracy, 0.95)
	require.Less(t, steps[len(steps)-1].Train.Loss, steps[0].Train.Loss)
}

// TestResumeIsBitIdentical: a run executed straight through and one whose
// items run on fresh backends (a worker restarted) after step 5, with
// some items executed twice (a worker killed before reporting), end with
// the same weights bytes.
func TestResumeIsBitIdentical(t *testing.T) {
	d := digits(t)
	c := config(t, "digits-resume", 16, 3, 48, 10, 5, 0.5)
	newest := func() uint64 { return 1 }

	straight := newLedger(t, c, d)
	dev := gpu.NewCPU()
	defer dev.Close()
	straight.run(t, newBackend(t, dev, newest), 0, straight.plan.Len())

	resumed := newLedger(t, c, d)
	dev1 := gpu.NewCPU()
	half := 1 + 5*(c.Shards+1)
	resumed.run(t, newBackend(t, dev1, newest), 0, half)
	require.NoError(t, dev1.Close())
	dev2 := gpu.NewCPU()
	defer dev2.Close()
	b2 := newBackend(t, dev2, newest)
	// Run step 6's first shard twice: the repeat gives the same bytes.
	wi := resumed.item(t, half)
	r1, err := b2.Run(context.Background(), wi)
	require.NoError(t, err)
	r2, err := b2.Run(context.Background(), wi)
	require.NoError(t, err)
	require.True(t, bytes.Equal(r1, r2))
	resumed.run(t, b2, half, resumed.plan.Len())

	a, b := straight.all(), resumed.all()
	require.Equal(t, len(a), len(b))
	for i := range a {
		require.True(t, bytes.Equal(a[i], b[i]), "result %d differs", i)
	}
	final, err := btrain.DecodeResult(a[len(a)-1])
	require.NoError(t, err)
	require.Equal(t, 10, final.Weights.Step)
	require.NotNil(t, final.Weights.Eval)
}

// counting is a real device whose kernel launches are counted (the cpu
// device has no launch counter of its own).
type counting struct {
	gpu.Device
	launches atomic.Int64
}

func (c *counting) Gemm(ta, tb bool, m, n, k int, al float32, a, b gpu.Buffer, be float32, cc gpu.Buffer) error {
	c.launches.Add(1)
	return c.Device.Gemm(ta, tb, m, n, k, al, a, b, be, cc)
}
func (c *counting) BiasAct(act gpu.Activation, m, n int, x, bias gpu.Buffer) error {
	c.launches.Add(1)
	return c.Device.BiasAct(act, m, n, x, bias)
}
func (c *counting) ActGrad(act gpu.Activation, n int, y, dy gpu.Buffer) error {
	c.launches.Add(1)
	return c.Device.ActGrad(act, n, y, dy)
}
func (c *counting) SoftmaxXent(m, n int, lg, lb, loss, g gpu.Buffer) error {
	c.launches.Add(1)
	return c.Device.SoftmaxXent(m, n, lg, lb, loss, g)
}
func (c *counting) ColSum(m, n int, x, out gpu.Buffer) error {
	c.launches.Add(1)
	return c.Device.ColSum(m, n, x, out)
}
func (c *counting) SGD(n int, lr float32, w, g gpu.Buffer) error {
	c.launches.Add(1)
	return c.Device.SGD(n, lr, w, g)
}

// TestStaleItemNeverLaunches: an item delivered in a term older than the
// newest seen launches nothing and is refused with worker.ErrStaleItem; the
// same item from the newest term launches.
func TestStaleItemNeverLaunches(t *testing.T) {
	c := config(t, "stale", 8, 2, 8, 2, 1, 0.1)
	l := newLedger(t, c, digits(t))
	dev := &counting{Device: gpu.NewCPU()}
	defer dev.Close()
	var newest atomic.Uint64
	newest.Store(1)
	b := newBackend(t, dev, newest.Load)
	l.run(t, b, 0, 1) // init: no kernels
	require.Zero(t, dev.launches.Load())

	newest.Store(7) // a newer leader was seen
	for _, i := range []int{0, 1, 2} {
		wi := l.item(t, i)
		wi.Term = 6
		_, err := b.Run(context.Background(), wi)
		require.ErrorIs(t, err, worker.ErrStaleItem, "item %d", i)
		require.ErrorContains(t, err, "term 6, the newest term seen is 7")
	}
	require.Zero(t, dev.launches.Load(), "a stale item launched a kernel")

	wi := l.item(t, 1)
	wi.Term = 7
	_, err := b.Run(context.Background(), wi)
	require.NoError(t, err)
	require.Positive(t, dev.launches.Load())
}

// TestTermRisesMidItem: when a newer term is seen while an item runs, its
// next launch is refused and no result comes back.
func TestTermRisesMidItem(t *testing.T) {
	c := config(t, "mid", 8, 1, 8, 1, 1, 0.1)
	l := newLedger(t, c, digits(t))
	dev := &counting{Device: gpu.NewCPU()}
	defer dev.Close()
	l.run(t, newBackend(t, dev, func() uint64 { return 1 }), 0, 1)
	var calls atomic.Int64
	// The newest term goes to 2 after the guard's fourth look (the start
	// and three launches).
	b := newBackend(t, dev, func() uint64 {
		if calls.Add(1) > 4 {
			return 2
		}
		return 1
	})
	_, err := b.Run(context.Background(), l.item(t, 1))
	require.ErrorIs(t, err, worker.ErrStaleItem)
	require.Equal(t, int64(3), dev.launches.Load())
}

func TestRefusals(t *testing.T) {
	c := config(t, "refuse", 8, 2, 8, 2, 1, 0.1)
	l := newLedger(t, c, digits(t))
	dev := gpu.NewCPU()
	defer dev.Close()
	b := newBackend(t, dev, func() uint64 { return 1 })
	l.run(t, b, 0, 4) // init, step 1's shards and reduce

	_, err := train.NewBackend(nil, func() uint64 { return 0 })
	require.ErrorIs(t, err, train.ErrInvalidArgument)
	_, err = train.NewBackend(dev, nil)
	require.ErrorIs(t, err, train.ErrInvalidArgument)

	wi := l.item(t, 1)
	wi.Kind = ""
	_, err = b.Run(context.Background(), wi)
	require.ErrorIs(t, err, train.ErrNotTrain)
	require.ErrorContains(t, err, `has kind ""`)

	wi = l.item(t, 1)
	wi.Payload = []byte(`{"prompt":"hi"}`)
	_, err = b.Run(context.Background(), wi)
	require.ErrorIs(t, err, btrain.ErrInvalidPayload)

	// Missing, extra, misnamed and tampered dependencies.
	wi = l.item(t, 1)
	wi.Deps = nil
	_, err = b.Run(context.Background(), wi)
	require.ErrorIs(t, err, train.ErrDependency)
	wi = l.item(t, 0)
	wi.Deps = l.item(t, 1).Deps
	_, err = b.Run(context.Background(), wi)
	require.ErrorIs(t, err, train.ErrDependency)
	wi = l.item(t, 1)
	wi.Deps[0].ID = btrain.ReduceID(c.Name, 1)
	_, err = b.Run(context.Background(), wi)
	require.ErrorIs(t, err, train.ErrDependency)
	wi = l.item(t, 1)
	wi.Deps[0].Result = bytes.Replace(wi.Deps[0].Result, []byte(`"blake3":"`), []byte(`"blake3":"0`), 1)
	_, err = b.Run(context.Background(), wi)
	require.ErrorIs(t, err, train.ErrDependency)

	// Step 2's reduce (index 6) with step 2 shard 1 computed at other
	// weights.
	l.run(t, b, 4, 6)
	wrongW, err := c.Model.Init(99)
	require.NoError(t, err)
	bad, err := (&btrain.ShardResult{Step: 2, Shard: 1, WeightsBlake3: mlp.Hash(wrongW), Grad: mlp.Encode(wrongW), LossSum: 1, Correct: 1, Count: 4}).Encode()
	require.NoError(t, err)
	l.results[string(btrain.ShardID(c.Name, 2, 1))] = bad
	_, err = b.Run(context.Background(), l.item(t, 6))
	require.ErrorIs(t, err, train.ErrDependency)
	require.ErrorContains(t, err, "shard 1 was computed at weights")

	// A cancelled context stops before any launch.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = b.Run(ctx, l.item(t, 1))
	require.ErrorIs(t, err, context.Canceled)
}

// TestConcurrentUse: items run concurrently on one backend give the bytes
// they give one at a time.
func TestConcurrentUse(t *testing.T) {
	c := config(t, "conc", 16, 8, 64, 1, 1, 0.1)
	l := newLedger(t, c, digits(t))
	dev := gpu.NewCPU()
	defer dev.Close()
	b := newBackend(t, dev, func() uint64 { return 1 })
	l.run(t, b, 0, 1)
	want := make([][]byte, 8)
	for s := range 8 {
		r, err := b.Run(context.Background(), l.item(t, 1+s))
		require.NoError(t, err)
		want[s] = r
	}
	got := make([][]byte, 8)
	var wg sync.WaitGroup
	for s := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := b.Run(context.Background(), l.item(t, 1+s))
			if err == nil {
				got[s] = r
			}
		}()
	}
	wg.Wait()
	require.Equal(t, want, got)
}
