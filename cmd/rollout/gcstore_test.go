package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/client/runs/runstest"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/storeurl"
)

// submitToStore submits n items as run to the store at storeURL and records
// the run's store in the fake's ledger as recorded; it returns the store.
func submitToStore(t *testing.T, fake *fakeCoord, run, storeURL, recorded string, n int) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), storeURL, store.DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store = run, []string{writeInput(t, n)}, st
	_, err = runs.Submit(context.Background(), fake, cfg)
	require.NoError(t, err)
	fake.Mu.Lock()
	fake.Runs[run].Spec.Store = recorded
	fake.Mu.Unlock()
	return st
}

// dataOf is the key prefix of run's objects as the fake's ledger recorded
// it.
func dataOf(fake *fakeCoord, run string) string {
	fake.Mu.Lock()
	defer fake.Mu.Unlock()
	return store.RunData(run, fake.Runs[run].Spec.GetDataPrefix())
}

// orphanOf is a prefix of the fake's cluster for a run its ledger does
// not hold.
func orphanOf(run string) string {
	return storeurl.DataPrefix(runstest.TestClusterID, run, "0000000000000000000000000000dead")
}

func storeKeys(t *testing.T, st *store.Store, prefix string) []string {
	t.Helper()
	var out []string
	require.NoError(t, st.List(context.Background(), prefix, func(o store.Object) error { out = append(out, o.Key); return nil }))
	return out
}

// TestGCEverySpelling: rollout gc with each spelling of a store the
// finding named (trailing slash, "//", "/./", "?x=1") prints what it would
// remove and removes nothing without --yes; with --yes it removes the real
// garbage and keeps every object of the runs recorded with two other
// spellings, a finished one and an active one.
func TestGCEverySpelling(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	parent, base := filepath.Dir(dir), filepath.Base(dir)
	plain := "file://" + dir
	fake := newFakeCoord()
	st := submitToStore(t, fake, "done", plain, plain+"/", 6)
	fake.Finish("done", 0, 6, "")
	submitToStore(t, fake, "active", plain, "file://"+parent+"//"+base, 6)
	fake.Finish("active", 0, 2, "")
	done := dataOf(fake, "done")
	live := append(storeKeys(t, st, done), storeKeys(t, st, dataOf(fake, "active"))...)

	for _, spelling := range []string{plain + "/", "file://" + parent + "//" + base, "file://" + parent + "/./" + base, plain + "?x=1"} {
		orphan := orphanOf("deleted") + "inputs/chunk"
		garbage := done + "results/stale"
		require.NoError(t, st.Put(ctx, orphan, []byte("y")))
		require.NoError(t, st.Put(ctx, garbage, []byte("x")))
		args := []string{"gc", "--coord", "127.0.0.1:1", "--store", spelling, "--grace", "1ns"}

		res := runCLI(t, fake, args...)
		require.Equal(t, 0, res.code, res.stderr)
		require.Contains(t, res.stdout, "would remove 1 object(s), 1 byte(s), under "+orphanOf("deleted")+": "+runs.WhyOrphan)
		require.Contains(t, res.stdout, "would remove 1 object(s), 1 byte(s), under "+done+": "+runs.WhyUnreferenced)
		require.Contains(t, res.stdout, "nothing removed; --yes removes")
		require.Contains(t, res.stdout, "2 run(s) in the ledger")
		require.Contains(t, res.stdout, "2 object(s) to remove (dry run)")
		for _, k := range []string{orphan, garbage} {
			ok, err := st.Exists(ctx, k)
			require.NoError(t, err)
			require.True(t, ok, "without --yes gc removes nothing: %s", k)
		}

		res = runCLI(t, fake, append(args, "--yes")...)
		require.Equal(t, 0, res.code, res.stderr)
		require.Contains(t, res.stdout, "removed 1 object(s), 1 byte(s), under "+orphanOf("deleted"))
		require.Contains(t, res.stdout, "swept "+plain+": 2 run(s) in the ledger")
		for _, k := range []string{orphan, garbage} {
			ok, err := st.Exists(ctx, k)
			require.NoError(t, err)
			require.False(t, ok, "gc --store %s --yes leaves %s", spelling, k)
		}
		for _, k := range live {
			ok, err := st.Exists(ctx, k)
			require.NoError(t, err)
			require.True(t, ok, "gc --store %s --yes removed %s of a live run", spelling, k)
		}
	}
	fake.Finish("active", 2, 6, "")
	for _, run := range []string{"done", "active"} {
		sum, err := runs.WriteFile(ctx, fake, run, filepath.Join(t.TempDir(), "out.jsonl"), runs.ResultsConfig{Store: st})
		require.NoError(t, err)
		require.Equal(t, uint64(6), sum.Done, run)
		require.Zero(t, sum.Dead, run)
	}
}

// TestGCRefusesRelatedStore: a run on a directory inside the store makes
// gc --yes exit non-zero naming the run and how to go on, removing
// nothing; --distinct-from lets it go on; --yes with --dry-run is a usage
// error.
func TestGCRefusesRelatedStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fake := newFakeCoord()
	child := submitToStore(t, fake, "inner", "file://"+dir+"/runs/sub", "file://"+dir+"/runs/sub", 3)
	fake.Finish("inner", 0, 3, "")
	inner := storeKeys(t, child, dataOf(fake, "inner"))

	res := runCLI(t, fake, "gc", "--coord", "127.0.0.1:1", "--store", "file://"+dir, "--grace", "1ns", "--yes")
	require.NotEqual(t, 0, res.code)
	require.Contains(t, res.stderr, `run "inner" on file://`+dir+`/runs/sub`)
	require.Contains(t, res.stderr, "nothing was removed")
	require.Contains(t, res.stderr, "--distinct-from")
	for _, k := range inner {
		ok, err := child.Exists(ctx, k)
		require.NoError(t, err)
		require.True(t, ok, k)
	}

	res = runCLI(t, fake, "gc", "--coord", "127.0.0.1:1", "--store", "file://"+dir, "--grace", "1ns",
		"--distinct-from", "file://"+dir+"/runs/sub/")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "foreign, left alone: ")
	require.Contains(t, res.stdout, "under runs/sub/: "+runs.ForeignLegacy, "the child's objects cannot be told to be this cluster's")
	res = runCLI(t, fake, "gc", "--coord", "127.0.0.1:1", "--store", "file://"+dir, "--grace", "1ns", "--dry-run",
		"--distinct-from", "file://"+dir+"/runs/sub/")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "would sweep (--dry-run)")
	require.Len(t, storeKeys(t, child, dataOf(fake, "inner")), len(inner), "--dry-run removes nothing")

	res = runCLI(t, fake, "gc", "--coord", "127.0.0.1:1", "--store", "file://"+dir, "--yes", "--dry-run")
	require.Equal(t, 2, res.code, res.stderr)
	require.Contains(t, res.stderr, "--yes and --dry-run")
	res = runCLI(t, fake, "gc", "--coord", "127.0.0.1:1", "--store", "file://"+dir, "--distinct-from", "http://x")
	require.Equal(t, 2, res.code, res.stderr)
	require.Contains(t, res.stderr, "--distinct-from")
}

// TestGCForeignAndOverride: another cluster's run of the same name on one
// store is listed as foreign by gc and left alone, with --yes; so is a
// runs/NAME/ prefix of a run the ledger does not hold; --remove-foreign
// needs an admin certificate (refused insecure, changing nothing) and
// must name a whole run prefix.
func TestGCForeignAndOverride(t *testing.T) {
	ctx := context.Background()
	plain := "file://" + t.TempDir()
	a, b := newFakeCoord(), newFakeCoord()
	b.ClusterID = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	st := submitToStore(t, a, "same", plain, plain, 4)
	submitToStore(t, b, "same", plain, plain, 4)
	a.Finish("same", 0, 4, "")
	b.Finish("same", 0, 4, "")
	require.NoError(t, st.Put(ctx, "runs/legacy/results/r", []byte("old")))
	aKeys := storeKeys(t, st, dataOf(a, "same"))

	res := runCLI(t, b, "gc", "--coord", "127.0.0.1:1", "--store", plain, "--grace", "1ns", "--yes")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "under "+dataOf(a, "same")+": "+runs.ForeignCluster)
	require.Contains(t, res.stdout, "under runs/legacy/: "+runs.ForeignLegacy)
	require.Contains(t, res.stdout, "2 foreign run prefix(es)")
	for _, k := range append(aKeys, "runs/legacy/results/r") {
		ok, err := st.Exists(ctx, k)
		require.NoError(t, err)
		require.True(t, ok, "b's gc --yes removed %s", k)
	}

	res = runCLI(t, b, "gc", "--coord", "127.0.0.1:1", "--store", plain, "--grace", "1ns", "--yes", "--remove-foreign", "runs/legacy")
	require.Equal(t, 2, res.code, res.stderr)
	require.Contains(t, res.stderr, "not a whole run prefix")
	res = runCLI(t, b, "--insecure", "gc", "--coord", "127.0.0.1:1", "--store", plain, "--grace", "1ns", "--yes", "--remove-foreign", "runs/legacy/")
	require.Equal(t, 2, res.code, res.stderr)
	require.Contains(t, res.stderr, "needs an admin certificate")
	ok, err := st.Exists(ctx, "runs/legacy/results/r")
	require.NoError(t, err)
	require.True(t, ok, "a refused override removes nothing")
}
