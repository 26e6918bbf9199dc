package dashboard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeRun is a run's items for TrainingLoss: result "S" is step S's
// result (loss 1/S, accuracy S/10); other results are not steps.
type fakeRun struct {
	items []ResultItem
	froms []uint64 // the from of every page read
}

func (f *fakeRun) page(_ context.Context, _ string, from uint64, limit int) ([]ResultItem, uint64, bool, error) {
	f.froms = append(f.froms, from)
	var out []ResultItem
	for _, it := range f.items {
		if it.Index >= from && len(out) < limit {
			out = append(out, it)
		}
	}
	next := from
	if len(out) > 0 {
		next = out[len(out)-1].Index + 1
	}
	return out, next, next >= uint64(len(f.items)), nil
}

func decodeFake(results [][]byte) ([]LossPoint, error) {
	var out []LossPoint
	for _, r := range results {
		s := string(r)
		if s == "bad" {
			return nil, errors.New("not a training result")
		}
		if !strings.HasPrefix(s, "step") {
			continue
		}
		var step uint64
		if _, err := fmt.Sscanf(s, "step%d", &step); err != nil {
			return nil, err
		}
		out = append(out, LossPoint{Step: step, Loss: 1 / float64(step), Accuracy: float64(step) / 10})
	}
	return out, nil
}

// TestTrainingLossIncremental: finished items are read once; the reader
// goes on from the first unfinished item; steps come out in order.
func TestTrainingLossIncremental(t *testing.T) {
	run := &fakeRun{}
	// index 0: init; then per step 2 shards and a reduce (100 steps).
	run.items = append(run.items, ResultItem{Index: 0, Finished: true, Result: []byte("init")})
	for s := 1; s <= 100; s++ {
		base := uint64(len(run.items))
		run.items = append(run.items,
			ResultItem{Index: base, Finished: true, Result: []byte("shard")},
			ResultItem{Index: base + 1, Finished: true, Result: []byte("shard")},
			ResultItem{Index: base + 2, Finished: s <= 60, Result: []byte(fmt.Sprintf("step%d", s))})
	}
	read := TrainingLoss(run.page, decodeFake)
	pts, err := read(context.Background(), "mlp")
	require.NoError(t, err)
	require.Len(t, pts, 60)
	require.Equal(t, uint64(1), pts[0].Step)
	require.Equal(t, uint64(60), pts[59].Step)
	require.Equal(t, 0.5, pts[1].Loss)
	require.Equal(t, uint64(0), run.froms[0])

	// Nothing new: the next read starts at step 61's reduce, the first
	// unfinished item (index 3*61).
	run.froms = nil
	pts, err = read(context.Background(), "mlp")
	require.NoError(t, err)
	require.Len(t, pts, 60)
	require.Equal(t, uint64(3*61), run.froms[0])

	for i := range run.items {
		run.items[i].Finished = true
	}
	pts, err = read(context.Background(), "mlp")
	require.NoError(t, err)
	require.Len(t, pts, 100)
	require.Equal(t, uint64(100), pts[99].Step)
	run.froms = nil
	_, err = read(context.Background(), "mlp")
	require.NoError(t, err)
	require.Equal(t, []uint64{uint64(len(run.items))}, run.froms, "a finished run is not read again")

	run.items = append(run.items, ResultItem{Index: uint64(len(run.items)), Finished: true, Result: []byte("bad")})
	_, err = read(context.Background(), "mlp")
	require.ErrorContains(t, err, `decoding results of "mlp"`)
}
