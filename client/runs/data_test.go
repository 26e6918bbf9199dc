package runs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/client/runs/runstest"
	"github.com/rollout/rollout/store"
)

func openFileStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), "file://"+t.TempDir(), store.DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

// TestSubmitToStoreChunksOnce: a submit with a store sends no payload
// bytes, only references into content-addressed chunks of at most
// ChunkObjectBytes that hold exactly the items' lines; a resubmit uploads
// nothing; the results come back exact through the store.
func TestSubmitToStoreChunksOnce(t *testing.T) {
	ctx := context.Background()
	st := openFileStore(t)
	path := writeInput(t, 50)
	fake := runstest.New()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store, cfg.ChunkObjectBytes = "r", []string{path}, st, 1000
	var up, reused int
	cfg.Chunks = func(u, r int, _ int64) { up, reused = u, r }
	_, err := runs.Submit(ctx, fake, cfg)
	require.NoError(t, err)
	require.Greater(t, up, 1, "1000-byte chunks: several")
	require.Zero(t, reused)
	objects := map[string]bool{}
	for _, req := range fake.Submits {
		require.Equal(t, st.URL(), req.GetSpec().GetStore())
		for _, it := range req.GetItems() {
			require.Empty(t, it.GetPayload())
			ref := it.GetPayloadRef()
			require.NotNil(t, ref)
			require.True(t, strings.HasPrefix(ref.GetObject(), "clusters/"+runstest.TestClusterID+"/runs/r/"), ref.GetObject())
			require.True(t, strings.HasPrefix(ref.GetObject(), runData(fake, "r")+"inputs/"), ref.GetObject())
			objects[ref.GetObject()] = true
			b, err := st.ReadRange(ctx, ref.GetObject(), int64(ref.GetOffset()), int64(ref.GetLength()))
			require.NoError(t, err)
			id := batch.SampleIDOfLine("", b, cfg.Sampling, it.GetIndex())
			require.Equal(t, id[:], it.GetId(), "the referenced bytes are the line the id was made from")
		}
	}
	for k := range objects {
		n, err := st.Size(ctx, k)
		require.NoError(t, err)
		require.LessOrEqual(t, n, int64(1000))
	}
	_, err = runs.Submit(ctx, fake, cfg)
	require.NoError(t, err)
	require.Zero(t, up, "a resubmit uploads nothing")
	require.Equal(t, len(objects), reused)

	fake.Finish("r", 0, 50, "")
	out := filepath.Join(t.TempDir(), "out.jsonl")
	sum, err := runs.WriteFile(ctx, fake, "r", out, runs.ResultsConfig{Store: st})
	require.NoError(t, err)
	require.Equal(t, uint64(50), sum.Done)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, 50, strings.Count(string(b), `"completion":"MOCK:prompt `))
}

// TestSubmitInPlace: an input already in the store is referenced where it
// is, by the offsets of its lines; nothing is uploaded.
func TestSubmitInPlace(t *testing.T) {
	ctx := context.Background()
	st := openFileStore(t)
	local := writeInput(t, 20)
	data, err := os.ReadFile(local)
	require.NoError(t, err)
	require.NoError(t, st.Put(ctx, "datasets/prompts.jsonl", data))
	fake := runstest.New()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store, cfg.InPlace = "p", []string{"datasets/prompts.jsonl"}, st, true
	var up int
	cfg.Chunks = func(u, _ int, _ int64) { up = u }
	res, err := runs.Submit(ctx, fake, cfg)
	require.NoError(t, err)
	require.Equal(t, uint64(20), res.Created)
	require.Zero(t, up)
	for _, req := range fake.Submits {
		for _, it := range req.GetItems() {
			ref := it.GetPayloadRef()
			require.Equal(t, "datasets/prompts.jsonl", ref.GetObject())
			line := data[ref.GetOffset() : ref.GetOffset()+ref.GetLength()]
			id := batch.SampleIDOfLine("", line, cfg.Sampling, it.GetIndex())
			require.Equal(t, id[:], it.GetId())
		}
	}
	var objects []string
	require.NoError(t, st.List(ctx, store.RunPrefix("p"), func(o store.Object) error { objects = append(objects, o.Key); return nil }))
	require.Empty(t, objects, "nothing copied into the run's prefix")
}

// TestResultsNameAChangedObject: a result whose bytes no longer match their
// recorded hash is an error line naming the object; the rest is written.
func TestResultsNameAChangedObject(t *testing.T) {
	ctx := context.Background()
	st := openFileStore(t)
	fake := runstest.New()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store = "r", []string{writeInput(t, 3)}, st
	_, err := runs.Submit(ctx, fake, cfg)
	require.NoError(t, err)
	fake.Finish("r", 0, 3, "")
	ref := fake.Runs["r"].Items[1].GetResultRef()
	require.NotNil(t, ref)
	require.NoError(t, st.Put(ctx, ref.GetObject(), []byte(`{"completion":"forged","finish_reason":"stop"}`)))
	out := filepath.Join(t.TempDir(), "out.jsonl")
	sum, err := runs.WriteFile(ctx, fake, "r", out, runs.ResultsConfig{Store: st})
	require.NoError(t, err)
	require.Equal(t, uint64(3), sum.Lines)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NotContains(t, string(b), "forged")
	require.Contains(t, string(b), ref.GetObject())
	require.Equal(t, 2, strings.Count(string(b), "MOCK:"))

	// Without a store to read from, references are an error, not a guess.
	_, err = runs.WriteFile(ctx, fake, "r", out, runs.ResultsConfig{})
	require.ErrorContains(t, err, "object store")
}

// TestSweep: unreferenced result objects of a live run and every prefix of
// a run the ledger does not hold go, once older than the grace period;
// referenced results and live runs' inputs stay.
func TestSweep(t *testing.T) {
	ctx := context.Background()
	st := openFileStore(t)
	fake := runstest.New()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store = "r", []string{writeInput(t, 5)}, st
	_, err := runs.Submit(ctx, fake, cfg)
	require.NoError(t, err)
	fake.Finish("r", 0, 5, "")
	garbage := runData(fake, "r") + "results/lost-to-a-steal"
	require.NoError(t, st.Put(ctx, garbage, []byte("x")))
	orphan := ownOrphan("deleted-by-retention") + "inputs/chunk"
	require.NoError(t, st.Put(ctx, orphan, []byte("y")))

	// Everything is young: nothing goes.
	res, err := runs.Sweep(ctx, fake, st, runs.SweepConfig{Grace: time.Hour})
	require.NoError(t, err)
	require.Equal(t, 1, res.Runs)
	require.Equal(t, 1, res.Orphans)
	require.Equal(t, 1, res.Garbage)
	require.Zero(t, res.Removed)
	require.Equal(t, 2, res.Young)

	later := time.Now().Add(2 * time.Hour)
	res, err = runs.Sweep(ctx, fake, st, runs.SweepConfig{Grace: time.Hour, Now: later, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 2, res.Removed)
	ok, err := st.Exists(ctx, garbage)
	require.NoError(t, err)
	require.True(t, ok, "a dry run removes nothing")

	res, err = runs.Sweep(ctx, fake, st, runs.SweepConfig{Grace: time.Hour, Now: later})
	require.NoError(t, err)
	require.Equal(t, 2, res.Removed)
	for _, k := range []string{garbage, orphan} {
		ok, err := st.Exists(ctx, k)
		require.NoError(t, err)
		require.False(t, ok, k)
	}
	// The run's results and inputs are all still there: its output is exact.
	out := filepath.Join(t.TempDir(), "out.jsonl")
	sum, err := runs.WriteFile(ctx, fake, "r", out, runs.ResultsConfig{Store: st})
	require.NoError(t, err)
	require.Equal(t, uint64(5), sum.Done)
	require.Zero(t, sum.Unrenderable)
	_, err = runs.Sweep(ctx, fake, st, runs.SweepConfig{})
	require.ErrorIs(t, err, runs.ErrInvalidConfig)
}
