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
	"github.com/rollout/rollout/store/storeurl"
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

// runData is the key prefix of run's objects as the fake's ledger
// recorded it.
func runData(fake *runstest.Coordinator, run string) string {
	fake.Mu.Lock()
	defer fake.Mu.Unlock()
	return store.RunData(run, fake.Runs[run].Spec.GetDataPrefix())
}

// ownOrphan is a prefix of this cluster (the fake's) for a run its ledger
// does not hold.
func ownOrphan(run string) string {
	return storeurl.DataPrefix(runstest.TestClusterID, run, "0000000000000000000000000000dead")
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
	done, active := runData(fake, "done"), runData(fake, "active")
	require.True(t, strings.HasPrefix(done, "clusters/"+runstest.TestClusterID+"/runs/done/"), done)
	live := append(keys(t, st, done), keys(t, st, active)...)
	require.NotEmpty(t, keys(t, st, active+"inputs/"))
	require.NotEmpty(t, keys(t, st, done+"results/"))

	later := time.Now().Add(2 * time.Hour)
	for _, spelling := range sp {
		garbage := done + "results/lost-to-a-steal"
		orphan := ownOrphan("deleted-by-retention") + "inputs/chunk"
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
	inner := keys(t, child, runData(fake, "inner"))
	require.NotEmpty(t, inner)
	// The child's objects are under the parent's runs/ prefix: as the
	// parent's, they look like a run "sub" written before identities.
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

	// The operator says the child is another store: the sweep goes on.
	// The child's objects, under the parent's runs/sub/, cannot be told
	// to be this cluster's: foreign, left alone; outer (fake2's run, the
	// same cluster identity, not in fake's ledger) is an orphan.
	res, err := runs.Sweep(ctx, fake, parent, runs.SweepConfig{Grace: time.Hour, Now: later, DryRun: true,
		Distinct: []string{"file://" + dir + "/runs//sub"}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Orphans, "outer (fake2's run)")
	require.Equal(t, 1, res.Foreign, "sub (the child)")
	require.Equal(t, len(keys(t, parent, "clusters/")), res.Removed)

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
	shared := "datasets/data.jsonl"
	other := ownOrphan("old") + "inputs/other"
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
	require.Equal(t, 1, res.Removed)
	require.Equal(t, []string{other + ": " + runs.WhyOrphan}, removing)
	// A live run's reference under an orphaned prefix stays.
	fake.Mu.Lock()
	fake.Runs["p"].Items[0].PayloadRef.Object = ownOrphan("old") + "inputs/kept"
	fake.Mu.Unlock()
	require.NoError(t, st.Put(ctx, ownOrphan("old")+"inputs/kept", []byte("k")))
	res, err = runs.Sweep(ctx, fake, st, runs.SweepConfig{Grace: time.Hour, Now: time.Now().Add(2 * time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 1, res.Referenced)
	require.True(t, exists(t, st, ownOrphan("old")+"inputs/kept"))
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
	n := len(keys(t, st, runData(fake, "gone")))
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

// TestSweepLeavesForeignPrefixes: two clusters (two ledgers of other
// identities) on one store, each with a run of the same name: a sweep of
// either, with --yes, removes nothing of the other's and lists it as
// foreign; a runs/NAME/ prefix no run of the ledger owns (written before
// identities) is foreign too; RemoveForeign removes a named foreign prefix
// (after the grace period), and refuses a live run's own prefix or a
// prefix that is not a whole run prefix.
func TestSweepLeavesForeignPrefixes(t *testing.T) {
	ctx := context.Background()
	st := openURL(t, "file://"+t.TempDir())
	a, b := runstest.New(), runstest.New()
	b.ClusterID = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	submitTo(t, a, st, "same", 5, st.URL())
	submitTo(t, b, st, "same", 5, st.URL())
	a.Finish("same", 0, 5, "")
	b.Finish("same", 0, 5, "")
	pa, pb := runData(a, "same"), runData(b, "same")
	require.NotEqual(t, pa, pb)
	legacy := "runs/before-identities/results/r1"
	require.NoError(t, st.Put(ctx, legacy, []byte("old")))
	aKeys := keys(t, st, pa)
	require.NotEmpty(t, aKeys)

	later := time.Now().Add(2 * time.Hour)
	var foreign []string
	res, err := runs.Sweep(ctx, b, st, runs.SweepConfig{Grace: time.Hour, Now: later,
		Foreign: func(p, why string, n int, _ int64) { foreign = append(foreign, p+": "+why) }})
	require.NoError(t, err)
	require.Equal(t, b.ClusterID, res.Cluster)
	require.Equal(t, 1, res.Runs)
	require.Zero(t, res.Orphans)
	require.Zero(t, res.Removed)
	require.Equal(t, 2, res.Foreign)
	require.Equal(t, []string{pa + ": " + runs.ForeignCluster, "runs/before-identities/: " + runs.ForeignLegacy}, foreign)
	for _, k := range aKeys {
		require.True(t, exists(t, st, k), "b's gc removed a's %s", k)
	}
	out := filepath.Join(t.TempDir(), "out.jsonl")
	sum, err := runs.WriteFile(ctx, a, "same", out, runs.ResultsConfig{Store: st})
	require.NoError(t, err)
	require.Equal(t, uint64(5), sum.Done)

	// The override: only whole run prefixes, never a live run's own.
	_, err = runs.Sweep(ctx, b, st, runs.SweepConfig{Grace: time.Hour, Now: later, RemoveForeign: []string{"runs/"}})
	require.ErrorIs(t, err, runs.ErrInvalidConfig)
	_, err = runs.Sweep(ctx, b, st, runs.SweepConfig{Grace: time.Hour, Now: later, RemoveForeign: []string{pb}})
	require.ErrorIs(t, err, runs.ErrInvalidConfig)
	require.ErrorContains(t, err, "own prefix")
	res, err = runs.Sweep(ctx, b, st, runs.SweepConfig{Grace: time.Hour, RemoveForeign: []string{"runs/before-identities/"}})
	require.NoError(t, err)
	require.Zero(t, res.Removed, "the grace period still applies")
	res, err = runs.Sweep(ctx, b, st, runs.SweepConfig{Grace: time.Hour, Now: later, RemoveForeign: []string{"runs/before-identities/"}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Removed)
	require.False(t, exists(t, st, legacy))
	for _, k := range aKeys {
		require.True(t, exists(t, st, k), k)
	}
}
