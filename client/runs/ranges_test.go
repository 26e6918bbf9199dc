package runs_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/api/validate"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/client/runs/runstest"
	"github.com/rollout/rollout/store"
)

// rangeFake is the fake coordinator as a cluster that takes range runs
// (runstest.WithRanges: SubmitRanges with the ledger's rules, its accepted
// requests in RangeSubmits).
func rangeFake() runstest.WithRanges { return runstest.WithRanges{Coordinator: runstest.New()} }

// TestSubmitRangesChunksAndRequests: LayoutRanges cuts the input into range
// chunks of at most ChunkItems lines and ChunkObjectBytes bytes (line index
// included) whose lines are the input's, consecutive over the indexes, and
// sends them in requests of at most max_items_per_request chunks.
func TestSubmitRangesChunksAndRequests(t *testing.T) {
	ctx := context.Background()
	st := openFileStore(t)
	path := writeInput(t, 250)
	input, err := os.ReadFile(path)
	require.NoError(t, err)
	var want []string // the non-blank lines, each an index
	for _, l := range strings.Split(string(input), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			want = append(want, l)
		}
	}
	fake := rangeFake()
	lim := validate.DefaultLimits()
	lim.MaxItemsPerRequest = 3
	fake.Announce = lim.Proto()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Store, cfg.Layout = "r", []string{path}, st, runs.LayoutRanges
	cfg.ChunkItems, cfg.ChunkObjectBytes = 40, 1200
	var progress []uint64
	cfg.Progress = func(sent, total uint64) { progress = append(progress, sent); require.EqualValues(t, 250, total) }
	res, err := runs.Submit(ctx, fake, cfg)
	require.NoError(t, err)
	require.EqualValues(t, 250, res.Items)
	require.EqualValues(t, 250, res.Created)
	require.Empty(t, fake.Submits, "no SubmitItems")
	require.True(t, fake.Runs["r"].Ranged, "a range run")
	require.Len(t, fake.Runs["r"].Items, res.Chunks, "one record a chunk")
	var next uint64
	chunks := 0
	for _, req := range fake.RangeSubmits {
		require.LessOrEqual(t, len(req.GetRanges()), 3)
		require.Equal(t, st.URL(), req.GetSpec().GetStore())
		require.EqualValues(t, runs.DefaultStaleAfter.Milliseconds(), req.GetStaleAfterMs(), "a resubmit re-pends a silent owner's ranges as an item resubmit does")
		for _, r := range req.GetRanges() {
			chunks++
			require.Equal(t, next, r.GetIndex(), "chunks are consecutive")
			require.LessOrEqual(t, r.GetCount(), uint64(40))
			size, err := st.Size(ctx, r.GetPayloadRef().GetObject())
			require.NoError(t, err)
			require.LessOrEqual(t, size, int64(1200))
			require.True(t, strings.HasPrefix(r.GetPayloadRef().GetObject(), runData(fake.Coordinator, "r")+"inputs/"))
			lines, err := store.ReadChunkLines(ctx, st, r.GetPayloadRef().GetObject(), r.GetPayloadRef().GetLength(), 0, r.GetCount())
			require.NoError(t, err)
			for k, l := range lines {
				require.Equal(t, want[r.GetIndex()+uint64(k)], string(l))
			}
			next += r.GetCount()
		}
	}
	require.EqualValues(t, 250, next)
	require.Equal(t, chunks, res.Chunks)
	require.Len(t, progress, len(fake.RangeSubmits))
	require.Contains(t, res.String(), "250 items in")
}

// TestSubmitRangesRefusals: LayoutRanges without a store, in place, with
// invalid lines kept by SkipInvalid, or with a coordinator that cannot take
// ranges, is refused before anything is sent; the default layout submits
// items.
func TestSubmitRangesRefusals(t *testing.T) {
	ctx := context.Background()
	st := openFileStore(t)
	path := writeInput(t, 5)
	base := runs.DefaultSubmitConfig()
	base.Run, base.Files, base.Layout = "r", []string{path}, runs.LayoutRanges

	cfg := base
	_, err := runs.Submit(ctx, runstest.New(), cfg)
	require.ErrorIs(t, err, runs.ErrInvalidConfig)
	require.Contains(t, err.Error(), "needs a Store")

	cfg.Store, cfg.InPlace = st, true
	_, err = runs.Submit(ctx, runstest.New(), cfg)
	require.ErrorIs(t, err, runs.ErrInvalidConfig)

	cfg = base
	cfg.Store = st
	fake := runstest.New()
	_, err = runs.Submit(ctx, fake, cfg)
	require.ErrorIs(t, err, runs.ErrInvalidConfig)
	require.Contains(t, err.Error(), "cannot submit ranges")
	require.Empty(t, fake.Runs)

	bad := writeInput(t, 5)
	f, err := os.OpenFile(bad, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("not json\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	cfg.Files, cfg.SkipInvalid = []string{bad}, true
	rf := rangeFake()
	_, err = runs.Submit(ctx, rf, cfg)
	require.ErrorIs(t, err, runs.ErrInvalidConfig)
	require.Contains(t, err.Error(), "invalid line")
	require.Empty(t, rf.RangeSubmits)

	// The default layout: DefaultLayout for a run with a store whose input
	// is uploaded and valid, through a client that can submit ranges.
	cfg = base
	cfg.Store, cfg.Layout = st, runs.LayoutDefault
	rf = rangeFake()
	_, err = runs.Submit(ctx, rf, cfg)
	require.NoError(t, err)
	require.Equal(t, runs.DefaultLayout == runs.LayoutRanges, len(rf.RangeSubmits) > 0)
	require.Equal(t, runs.DefaultLayout == runs.LayoutRanges, len(rf.Submits) == 0, "no SubmitItems for a range run")
	if runs.DefaultLayout != runs.LayoutRanges {
		return // the cases below are ranges by default turning into items
	}

	// Items, automatically: no store (inline), invalid lines kept, a client
	// without SubmitRanges; and when asked for (LayoutItems).
	for name, mod := range map[string]func(*runs.SubmitConfig) runs.Coordinator{
		"inline":       func(c *runs.SubmitConfig) runs.Coordinator { c.Store = nil; return nil },
		"skip-invalid": func(c *runs.SubmitConfig) runs.Coordinator { c.Files, c.SkipInvalid = []string{bad}, true; return nil },
		"no ranges":    func(c *runs.SubmitConfig) runs.Coordinator { return runstest.New() },
		"items":        func(c *runs.SubmitConfig) runs.Coordinator { c.Layout = runs.LayoutItems; return nil },
	} {
		cfg = base
		cfg.Run, cfg.Store, cfg.Layout = "r-"+strings.ReplaceAll(name, " ", "-"), st, runs.LayoutDefault
		rf = rangeFake()
		var c runs.Coordinator = rf
		if alt := mod(&cfg); alt != nil {
			c = alt
		}
		_, err = runs.Submit(ctx, c, cfg)
		require.NoError(t, err, name)
		require.Empty(t, rf.RangeSubmits, name)
		if c == runs.Coordinator(rf) {
			require.NotEmpty(t, rf.Submits, "%s: submitted as items", name)
		}
	}
}
