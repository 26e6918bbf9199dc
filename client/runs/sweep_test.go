package runs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/client/runs/runstest"
	"github.com/rollout/rollout/store"
)

// spellings are the spellings of the file store in dir that the finding
// named: a trailing slash, "//", "/./", a harmless parameter; the plain
// one first.
func spellings(dir string) []string {
	parent, base := filepath.Dir(dir), filepath.Base(dir)
	return []string{
		"file://" + dir,
		"file://" + dir + "/",
		"file://" + parent + "//" + base,
		"file://" + parent + "/./" + base,
		"file://" + dir + "?x=1",
	}
}

// openURL opens the store raw names.
func openURL(t *testing.T, raw string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), raw, store.DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

// submitTo submits n items as run to st and records the run's store in
// the fake's ledger as recorded (a spelling an older client wrote).
func submitTo(t *testing.T, fake *runstest.Coordinator, st *store.Store, run string, n int, recorded string) {
	t.Helper()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store = run, []string{writeInput(t, n)}, st
	_, err := runs.Submit(context.Background(), fake, cfg)
	require.NoError(t, err)
	fake.Mu.Lock()
	fake.Runs[run].Spec.Store = recorded
	fake.Mu.Unlock()
}

// keys lists every key under prefix.
func keys(t *testing.T, st *store.Store, prefix string) []string {
	t.Helper()
	var out []string
	require.NoError(t, st.List(context.Background(), prefix, func(o store.Object) error { out = append(out, o.Key); return nil }))
	return out
}

func exists(t *testing.T, st *store.Store, key string) bool {
	t.Helper()
	ok, err := st.Exists(context.Background(), key)
	require.NoError(t, err)
	return ok
}

// TestSweepEverySpellingKeepsLiveRuns: runs recorded with two spellings
// of one store (a finished one and an active one) are both live to a
// sweep with any spelling of it: their inputs and referenced results stay,
// and the real garbage (an unreferenced result, an orphaned prefix) goes.
// Comparing URLs as strings removed both runs' everything.
func TestSweepEverySpellingKeepsLiveRuns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	sp := spellings(dir)
	st := openURL(t, sp[0])
	fake := runstest.New()
	submitTo(t, fake, st, "done", 8, sp[1])
	fake.Finish("done", 0, 8, "")
	submitTo(t, fake, st, "active", 8, sp[2])
	fake.Finish("active", 0, 3, "")
	live := append(keys(t, st, store.RunPrefix("done")), keys(t, st, store.RunPrefix("active"))...)
	require.NotEmpty(t, keys(t, st, store.InputPrefix("active")))
	require.NotEmpty(t, keys(t, st, store.ResultPrefix("done")))

	later := time.Now().Add(2 * time.Hour)
	for _, spelling := range sp {
		garbage := store.ResultPrefix("done") + "lost-to-a-steal"
		orphan := store.InputPrefix("deleted-by-retention") + "chunk"
		require.NoError(t, st.Put(ctx, garbage, []byte("x")))
		require.NoError(t, st.Put(ctx, orphan, []byte("y")))

		res, err := runs.Sweep(ctx, fake, openURL(t, spelling), runs.SweepConfig{Grace: time.Hour, Now: later})
		require.NoError(t, err, spelling)
		require.Equal(t, 2, res.Runs, "gc --store %s sees both runs as live", spelling)
		require.Equal(t, 1, res.Orphans, spelling)
		require.Equal(t, 2, res.Removed, spelling)
		require.False(t, exists(t, st, garbage), spelling)
		require.False(t, exists(t, st, orphan), spelling)
		for _, k := range live {
			require.True(t, exists(t, st, k), "gc --store %s removed %s of a live run", spelling, k)
		}
	}
	// The finished run reads back whole; the active one finishes from its
	// inputs, all of them still there.
	out := filepath.Join(t.TempDir(), "out.jsonl")
	sum, err := runs.WriteFile(ctx, fake, "done", out, runs.ResultsConfig{Store: st})
	require.NoError(t, err)
	require.Equal(t, uint64(8), sum.Done)
	require.Zero(t, sum.Dead)
	fake.Finish("active", 3, 8, "")
	sum, err = runs.WriteFile(ctx, fake, "active", out, runs.ResultsConfig{Store: st})
	require.NoError(t, err)
	require.Equal(t, uint64(8), sum.Done)
	require.Zero(t, sum.Dead)
}

// TestSweepRefusesRelatedStores: a run on a directory inside the swept one,
// or around it, makes Sweep remove nothing and name the run; naming its
// store as distinct lets the sweep go on.
func TestSweepRefusesRelatedStores(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	parent := openURL(t, "file://"+dir)
	child := openURL(t, "file://"+dir+"/runs/sub")
	fake := runstest.New()
	submitTo(t, fake, child, "inner", 3, child.URL()+"/")
	fake.Finish("inner", 0, 3, "")
	inner := keys(t, child, store.RunPrefix("inner"))
	require.NotEmpty(t, inner)
	// The child's objects are under the parent's runs/ prefix: as the
	// parent's, they look like an orphaned run "sub".
	require.NotEmpty(t, keys(t, parent, "runs/sub/"))
	later := time.Now().Add(2 * time.Hour)

	_, err := runs.Sweep(ctx, fake, parent, runs.SweepConfig{Grace: time.Hour, Now: later})
	require.ErrorIs(t, err, runs.ErrAmbiguousStore)
	require.ErrorContains(t, err, `run "inner" on file://`+dir+`/runs/sub/ (a directory inside the swept one)`)
	require.ErrorContains(t, err, "nothing was removed")
	for _, k := range inner {
		require.True(t, exists(t, child, k), k)
	}
	_, err = runs.Sweep(ctx, fake, parent, runs.SweepConfig{Grace: time.Hour, Now: later, DryRun: true})
	require.ErrorIs(t, err, runs.ErrAmbiguousStore, "a dry run refuses as well")

	// The other way round: a run on the parent, a sweep of the child.
	fake2 := runstest.New()
	submitTo(t, fake2, parent, "outer", 2, parent.URL())
	_, err = runs.Sweep(ctx, fake2, child, runs.SweepConfig{Grace: time.Hour, Now: later})
	require.ErrorIs(t, err, runs.ErrAmbiguousStore)
	require.ErrorContains(t, err, "a directory that holds the swept one")

	// The operator says the child is another store: the sweep goes on
	// (and, as told, treats the child's objects as the parent's garbage).
	res, err := runs.Sweep(ctx, fake, parent, runs.SweepConfig{Grace: time.Hour, Now: later, DryRun: true,
		Distinct: []string{"file://" + dir + "/runs//sub"}})
	require.NoError(t, err)
	require.Equal(t, 2, res.Orphans, "sub (the child) and outer (fake2's run)")
	require.Equal(t, len(keys(t, parent, "runs/")), res.Removed)

	_, err = runs.Sweep(ctx, fake, parent, runs.SweepConfig{Grace: time.Hour, Distinct: []string{"http://x"}})
	require.ErrorIs(t, err, runs.ErrInvalidConfig)
	_, err = runs.Sweep(ctx, fake, parent, runs.SweepConfig{Grace: time.Hour, Distinct: []string{"file://" + dir + "/"}})
	require.ErrorIs(t, err, runs.ErrInvalidConfig, "the swept store is not distinct from itself")
}

// TestSweepKeepsWhatLiveRunsReference: an object a live run references
// stays even under the prefix of a run the ledger no longer holds; the
// rest of that prefix goes.
func TestSweepKeepsWhatLiveRunsReference(t *testing.T) {
	ctx := context.Background()
	st := openURL(t, "file://"+t.TempDir())
	data, err := os.ReadFile(writeInput(t, 4))
	require.NoError(t, err)
	shared := store.InputPrefix("old") + "data.jsonl"
	other := store.InputPrefix("old") + "other"
	require.NoError(t, st.Put(ctx, shared, data))
	require.NoError(t, st.Put(ctx, other, []byte("z")))
	fake := runstest.New()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store, cfg.InPlace = "p", []string{shared}, st, true
	_, err = runs.Submit(ctx, fake, cfg)
	require.NoError(t, err)

	var removing []string
	res, err := runs.Sweep(ctx, fake, st, runs.SweepConfig{Grace: time.Hour, Now: time.Now().Add(2 * time.Hour),
		Removing: func(o store.Object, why string) { removing = append(removing, o.Key+": "+why) }})
	require.NoError(t, err)
	require.Equal(t, 1, res.Orphans)
	require.Equal(t, 1, res.Referenced)
	require.Equal(t, 1, res.Removed)
	require.Equal(t, []string{other + ": " + runs.WhyOrphan}, removing)
	require.True(t, exists(t, st, shared))
	require.False(t, exists(t, st, other))
	require.True(t, strings.Contains(res.String(), "1 left as referenced"), res.String())
}

// TestResubmitKeepsTheRecordedSpelling: resuming a run the ledger holds on
// the same store under another spelling (the ledger refuses a resubmit
// naming another store string) sends that spelling back; a new run
// records the normal form; another store stays refused.
func TestResubmitKeepsTheRecordedSpelling(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openURL(t, "file://"+dir+"/")
	require.Equal(t, "file://"+dir, st.URL(), "a store's URL is its normal form")
	fake := runstest.New()
	submitTo(t, fake, st, "old", 4, "file://"+dir+"/.") // an older client's spelling
	fake.Submits = nil
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store = "old", []string{writeInput(t, 4)}, st
	res, err := runs.Submit(ctx, fake, cfg)
	require.NoError(t, err)
	require.Equal(t, uint64(4), res.AlreadyPending)
	require.Len(t, fake.Submits, 1)
	require.Equal(t, "file://"+dir+"/.", fake.Submits[0].GetSpec().GetStore())

	cfg.Run = "new"
	_, err = runs.Submit(ctx, fake, cfg)
	require.NoError(t, err)
	require.Equal(t, "file://"+dir, fake.Submits[len(fake.Submits)-1].GetSpec().GetStore())

	cfg.Run, cfg.Store = "old", openURL(t, "file://"+t.TempDir())
	_, err = runs.Submit(ctx, fake, cfg)
	require.ErrorContains(t, err, "names store", "another store is not the run's: the ledger says so")
}

// TestSweepRunDeletedMidway: a run deleted after the sweep read the runs
// is an orphan's prefix, not an error.
func TestSweepRunDeletedMidway(t *testing.T) {
	ctx := context.Background()
	st := openURL(t, "file://"+t.TempDir())
	fake := runstest.New()
	submitTo(t, fake, st, "gone", 3, st.URL())
	fake.Finish("gone", 0, 3, "")
	n := len(keys(t, st, store.RunPrefix("gone")))
	res, err := runs.Sweep(ctx, deleteAfterStatus{fake, "gone"}, st, runs.SweepConfig{Grace: time.Hour, Now: time.Now().Add(2 * time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 1, res.Orphans)
	require.Equal(t, n, res.Removed)
}

// deleteAfterStatus deletes run from the fake's ledger right after it
// answers a RunStatus.
type deleteAfterStatus struct {
	*runstest.Coordinator
	run string
}

func (d deleteAfterStatus) RunStatus(ctx context.Context, req *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error) {
	resp, err := d.Coordinator.RunStatus(ctx, req)
	d.Mu.Lock()
	delete(d.Runs, d.run)
	d.Mu.Unlock()
	return resp, err
}

// TestSubmitItemsResendsTheRecordedSpelling: a SubmitItems (rollout
// train's) refused because the ledger holds the run under another spelling
// of the same store is sent again with that spelling; another store stays
// refused.
func TestSubmitItemsResendsTheRecordedSpelling(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fake := runstest.New()
	items := steps(1, 1)
	_, err := runs.SubmitItems(ctx, fake, runs.ItemsConfig{Run: "train", Items: items,
		Spec: &rolloutv1.RunSpec{Kind: "train", Store: "file://" + dir + "//"}})
	require.NoError(t, err)
	res, err := runs.SubmitItems(ctx, fake, runs.ItemsConfig{Run: "train", Items: items,
		Spec: &rolloutv1.RunSpec{Kind: "train", Store: "file://" + dir}})
	require.NoError(t, err)
	require.Equal(t, uint64(len(items)), res.AlreadyPending)
	require.Equal(t, "file://"+dir+"//", fake.Submits[len(fake.Submits)-1].GetSpec().GetStore())
	_, err = runs.SubmitItems(ctx, fake, runs.ItemsConfig{Run: "train", Items: items,
		Spec: &rolloutv1.RunSpec{Kind: "train", Store: "file://" + t.TempDir()}})
	require.ErrorContains(t, err, "names store")
}
