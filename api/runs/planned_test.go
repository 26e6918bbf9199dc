package runs_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/runs"
	"github.com/rollout/rollout/api/runs/runstest"
	"github.com/rollout/rollout/api/validate"
)

// chain builds n items where item i depends on item i-1.
func chain(n int) []*rolloutv1.SubmitItem {
	var items []*rolloutv1.SubmitItem
	var prev []byte
	for i := range n {
		id := sha256.Sum256(fmt.Appendf(nil, "item %d", i))
		it := &rolloutv1.SubmitItem{Id: id[:], Index: uint64(i), Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
		if prev != nil {
			it.DependsOn = [][]byte{prev}
		}
		items = append(items, it)
		prev = id[:]
	}
	return items
}

func plannedConfig(items []*rolloutv1.SubmitItem) runs.PlannedConfig {
	cfg := runs.DefaultPlannedConfig()
	cfg.Run = "train"
	cfg.Spec = &rolloutv1.RunSpec{Kind: "train", Total: uint64(len(items)), MaxFailures: 3}
	cfg.Items = items
	return cfg
}

func TestSubmitPlannedChunksInOrderAndResumes(t *testing.T) {
	f := runstest.New()
	lim := validate.DefaultLimits()
	lim.MaxItemsPerRequest = 4
	f.Announce = lim.Proto()
	items := chain(10)
	cfg := plannedConfig(items)
	var progress []uint64
	cfg.Progress = func(sent, total uint64) {
		require.Equal(t, uint64(10), total)
		progress = append(progress, sent)
	}
	res, err := runs.SubmitPlanned(context.Background(), f, cfg)
	require.NoError(t, err)
	require.Equal(t, uint64(10), res.Items)
	require.Equal(t, uint64(10), res.Created)
	require.Equal(t, 3, res.Chunks, "10 items at most 4 a request")
	require.Equal(t, []uint64{4, 8, 10}, progress)
	var next uint64
	for _, req := range f.Submits {
		require.Equal(t, "train", req.GetSpec().GetKind())
		require.LessOrEqual(t, len(req.GetItems()), 4)
		for _, it := range req.GetItems() {
			require.Equal(t, next, it.GetIndex(), "items go in plan order")
			next++
		}
	}
	require.Len(t, f.Submits[1].GetItems()[0].GetDependsOn(), 1, "dependencies travel with the items")

	// Submitting the same plan again changes nothing.
	res, err = runs.SubmitPlanned(context.Background(), f, cfg)
	require.NoError(t, err)
	require.Zero(t, res.Created)
	require.Equal(t, uint64(10), res.AlreadyPending)
}

func TestSubmitPlannedChunkBytes(t *testing.T) {
	f := runstest.New()
	cfg := plannedConfig(chain(20))
	cfg.ChunkBytes = 400
	res, err := runs.SubmitPlanned(context.Background(), f, cfg)
	require.NoError(t, err)
	require.Greater(t, res.Chunks, 2)
	for _, req := range f.Submits {
		require.NotEmpty(t, req.GetItems())
	}
}

func TestSubmitPlannedRefusesBadPlansSendingNothing(t *testing.T) {
	for name, mutate := range map[string]func([]*rolloutv1.SubmitItem){
		"dependency after the item": func(items []*rolloutv1.SubmitItem) {
			items[2].DependsOn = [][]byte{items[5].GetId()}
		},
		"self dependency": func(items []*rolloutv1.SubmitItem) {
			items[3].DependsOn = [][]byte{items[3].GetId()}
		},
		"duplicate id": func(items []*rolloutv1.SubmitItem) {
			items[4].Id = items[1].GetId()
		},
		"payload not a JSON object": func(items []*rolloutv1.SubmitItem) {
			items[6].Payload = []byte("[1]")
		},
		"short id": func(items []*rolloutv1.SubmitItem) {
			items[0].Id = []byte{1, 2, 3}
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := runstest.New()
			items := chain(8)
			mutate(items)
			_, err := runs.SubmitPlanned(context.Background(), f, plannedConfig(items))
			require.Error(t, err)
			require.Empty(t, f.Submits, "nothing was sent")
			require.Empty(t, f.Runs)
		})
	}
	_, err := runs.SubmitPlanned(context.Background(), runstest.New(), plannedConfig(nil))
	require.ErrorIs(t, err, runs.ErrInvalidConfig)
}
