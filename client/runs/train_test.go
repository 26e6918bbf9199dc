package runs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch/train"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/client/runs/runstest"
	"github.com/rollout/rollout/gpu/mlp"
)

func TestTrainShape(t *testing.T) {
	s := runs.TrainShape{Shards: 3, Steps: 10}
	require.Equal(t, uint64(41), s.Items())
	require.Equal(t, uint64(0), s.ReduceIndex(0))
	require.Equal(t, uint64(4), s.ReduceIndex(1))
	require.Equal(t, uint64(40), s.ReduceIndex(10))
	for done, want := range map[uint64]int{0: 0, 1: 0, 4: 0, 5: 1, 8: 1, 9: 2, 41: 10, 50: 10} {
		require.Equal(t, want, s.Completed(done), "done %d", done)
	}
}

// fakeTraining puts a training run of steps steps of shards shards into f,
// every item Pending, with the plan's dependencies (ids are made up).
func fakeTraining(f *runstest.Coordinator, run string, steps, shards int) runs.TrainShape {
	shape := runs.TrainShape{Shards: shards, Steps: steps}
	r := &runstest.Run{Spec: &rolloutv1.RunSpec{Kind: train.Kind, Total: shape.Items()}, Items: map[uint64]*rolloutv1.ResultItem{}}
	id := func(i uint64) []byte { return fmt.Appendf(nil, "%032d", i) }
	for i := range shape.Items() {
		it := &rolloutv1.ResultItem{Id: id(i), Index: i, State: rolloutv1.ItemState_ITEM_STATE_PENDING}
		if i > 0 {
			step := int(i-1)/(shards+1) + 1
			it.DependsOn = [][]byte{id(shape.ReduceIndex(step - 1))}
			if i == shape.ReduceIndex(step) {
				for s := range shards {
					it.DependsOn = append(it.DependsOn, id(shape.ReduceIndex(step-1)+1+uint64(s)))
				}
			}
		}
		r.Items[i] = it
	}
	f.Runs[run] = r
	return shape
}

// finishFake completes item i: a weights result for init and reduce items,
// a shard result for the others.
func finishFake(t *testing.T, f *runstest.Coordinator, run string, shape runs.TrainShape, i uint64) {
	t.Helper()
	w := []float32{float32(i), 1, 2}
	var res []byte
	var err error
	step := 0
	if i > 0 {
		step = int(i-1)/(shape.Shards+1) + 1
	}
	switch {
	case i == 0:
		res, err = (&train.WeightsResult{Role: train.RoleInit, Weights: mlp.Encode(w), Blake3: mlp.Hash(w)}).Encode()
	case i == shape.ReduceIndex(step):
		res, err = (&train.WeightsResult{Role: train.RoleReduce, Step: step, Weights: mlp.Encode(w), Blake3: mlp.Hash(w),
			Train: &train.Metrics{Loss: 1, Accuracy: 0.5, Count: 4}}).Encode()
	default:
		res, err = (&train.ShardResult{Step: step, Shard: 0, WeightsBlake3: mlp.Hash(w), Grad: mlp.Encode(w), LossSum: 1, Correct: 1, Count: 2}).Encode()
	}
	require.NoError(t, err)
	it := f.Runs[run].Items[i]
	it.State, it.Result = rolloutv1.ItemState_ITEM_STATE_DONE, res
}

func TestDiscoverTrainShapeAndFollow(t *testing.T) {
	f := runstest.New()
	want := fakeTraining(f, "t", 4, 2)
	_, rc, err := runs.Status(context.Background(), f, "t", time.Second)
	require.NoError(t, err)
	shape, err := runs.DiscoverTrainShape(context.Background(), f, rc, time.Second)
	require.NoError(t, err)
	require.Equal(t, want, shape)

	// Each status read finishes the next three items.
	next := uint64(0)
	f.OnStatus = func(f *runstest.Coordinator) {
		for range 3 {
			if next < shape.Items() {
				finishFake(t, f, "t", shape, next)
				next++
			}
		}
	}
	var seen []int
	rc, last, err := runs.FollowTraining(context.Background(), f, "t", shape, runs.FollowConfig{Interval: time.Millisecond,
		Step: func(st runs.StepResult) error {
			seen = append(seen, st.Step.Step)
			return nil
		}})
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2, 3, 4}, seen, "every step once, in order, init included")
	require.Equal(t, 4, last.Step.Step)
	require.Equal(t, mlp.Encode([]float32{float32(shape.ReduceIndex(4)), 1, 2}), last.Weights)
	require.Equal(t, shape.Items(), rc.GetDone())

	steps, newest, err := runs.TrainSteps(context.Background(), f, "t", runs.ResultsConfig{})
	require.NoError(t, err)
	require.Len(t, steps, 4)
	require.Equal(t, last.Weights, newest)
}

func TestFollowTrainingStopsWhenStuck(t *testing.T) {
	f := runstest.New()
	shape := fakeTraining(f, "t", 3, 1)
	finishFake(t, f, "t", shape, 0)
	finishFake(t, f, "t", shape, 1)
	finishFake(t, f, "t", shape, 2)
	// Step 2's shard is dead: everything after it waits forever.
	f.Runs["t"].Items[3].State = rolloutv1.ItemState_ITEM_STATE_DEAD
	rc, last, err := runs.FollowTraining(context.Background(), f, "t", shape, runs.FollowConfig{Interval: time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, 1, last.Step.Step)
	require.Equal(t, uint64(1), rc.GetDead())
	require.True(t, runs.Stuck(rc))

	// UntilStep ends at that step; bad configs are refused.
	_, last, err = runs.FollowTraining(context.Background(), f, "t", shape, runs.FollowConfig{Interval: time.Millisecond, UntilStep: 1})
	require.NoError(t, err)
	require.Equal(t, 1, last.Step.Step)
	_, _, err = runs.FollowTraining(context.Background(), f, "t", shape, runs.FollowConfig{UntilStep: 4})
	require.ErrorIs(t, err, runs.ErrInvalidConfig)
}

func TestDiscoverTrainShapeRefusesOtherRuns(t *testing.T) {
	f := runstest.New()
	_, err := runs.Submit(context.Background(), f, func() runs.SubmitConfig {
		c := runs.DefaultSubmitConfig()
		c.Run, c.Files = "batch", []string{writeInput(t, 3)}
		return c
	}())
	require.NoError(t, err)
	_, rc, err := runs.Status(context.Background(), f, "batch", time.Second)
	require.NoError(t, err)
	_, err = runs.DiscoverTrainShape(context.Background(), f, rc, time.Second)
	require.ErrorIs(t, err, runs.ErrNotTraining)

	// A run of kind train whose last item has no dependencies is not laid
	// out as a plan.
	f.Runs["batch"].Spec.Kind = train.Kind
	_, rc, err = runs.Status(context.Background(), f, "batch", time.Second)
	require.NoError(t, err)
	_, err = runs.DiscoverTrainShape(context.Background(), f, rc, time.Second)
	require.ErrorIs(t, err, runs.ErrNotTraining)
}
