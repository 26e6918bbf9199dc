package runs_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/client/runs/runstest"
)

func itemID(s string) []byte { return []byte(fmt.Sprintf("%-*s", validate.DefaultIDBytes, s)) }

// steps builds a training-shaped item list: per step, shards then a reduce
// depending on them; the next step's shards depend on the reduce.
func steps(n, shards int) []*rolloutv1.SubmitItem {
	var out []*rolloutv1.SubmitItem
	var prev []byte
	for s := range n {
		var ids [][]byte
		for k := range shards {
			it := &rolloutv1.SubmitItem{Id: itemID(fmt.Sprintf("s%d.%d", s, k)), Index: uint64(len(out)), Payload: []byte(`{}`)}
			if prev != nil {
				it.DependsOn = [][]byte{prev}
			}
			out = append(out, it)
			ids = append(ids, it.Id)
		}
		red := &rolloutv1.SubmitItem{Id: itemID(fmt.Sprintf("r%d", s)), Index: uint64(len(out)), Payload: []byte(`{}`), DependsOn: ids}
		out = append(out, red)
		prev = red.Id
	}
	return out
}

func TestSubmitItemsWithDeps(t *testing.T) {
	fake := runstest.New()
	items := steps(3, 4) // 15 items
	var progress []uint64
	res, err := runs.SubmitItems(context.Background(), fake, runs.ItemsConfig{
		Run: "train", Spec: &rolloutv1.RunSpec{Kind: "train", Model: "mlp"}, Items: items, ChunkItems: 4,
		Progress: func(sent, total uint64) { progress = append(progress, sent); require.Equal(t, uint64(15), total) },
	})
	require.NoError(t, err)
	require.Equal(t, uint64(15), res.Created)
	require.Equal(t, 4, res.Chunks)
	require.Equal(t, []uint64{4, 8, 12, 15}, progress)
	var sent []*rolloutv1.SubmitItem
	for _, req := range fake.Submits {
		require.Equal(t, "train", req.GetSpec().GetKind())
		require.Equal(t, uint64(15), req.GetSpec().GetTotal(), "total defaults to the items")
		require.Equal(t, uint32(runs.DefaultMaxFailures), req.GetSpec().GetMaxFailures())
		sent = append(sent, req.GetItems()...)
	}
	require.Len(t, sent, 15)
	for i := range items {
		require.Equal(t, items[i].GetDependsOn(), sent[i].GetDependsOn(), "items go out in order with their dependencies")
	}

	_, rc, err := runs.Status(context.Background(), fake, "train", 0)
	require.NoError(t, err)
	require.Equal(t, "train", rc.GetKind())
	require.Equal(t, uint64(11), rc.GetBlocked(), "all but the first step's shards wait")

	// A later submission may depend on what an earlier one sent.
	more := &rolloutv1.SubmitItem{Id: itemID("eval"), Index: 15, Payload: []byte(`{}`), DependsOn: [][]byte{itemID("r2")}}
	_, err = runs.SubmitItems(context.Background(), fake, runs.ItemsConfig{Run: "train", Items: []*rolloutv1.SubmitItem{more},
		Existing: func(id []byte) bool { return bytes.Equal(id, itemID("r2")) }})
	require.NoError(t, err)
}

func TestSubmitItemsRefusesBeforeSending(t *testing.T) {
	items := steps(2, 2)
	for _, tc := range []struct {
		name string
		edit func([]*rolloutv1.SubmitItem) []*rolloutv1.SubmitItem
		want error
		msg  string
	}{
		{"dependency after its dependent", func(its []*rolloutv1.SubmitItem) []*rolloutv1.SubmitItem {
			its[0], its[2] = its[2], its[0]
			return its
		}, validate.ErrDeps, "items[0]"},
		{"unknown dependency", func(its []*rolloutv1.SubmitItem) []*rolloutv1.SubmitItem {
			its[4].DependsOn = [][]byte{itemID("nope")}
			return its
		}, validate.ErrDeps, "items[4]"},
		{"self dependency", func(its []*rolloutv1.SubmitItem) []*rolloutv1.SubmitItem {
			its[1].DependsOn = [][]byte{its[1].Id}
			return its
		}, validate.ErrDeps, "the item itself"},
		{"duplicate id", func(its []*rolloutv1.SubmitItem) []*rolloutv1.SubmitItem {
			its[3].Id = its[0].Id
			return its
		}, validate.ErrDuplicateID, "items[3]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := runstest.New()
			its := make([]*rolloutv1.SubmitItem, len(items))
			for i, it := range items {
				its[i] = proto.Clone(it).(*rolloutv1.SubmitItem)
			}
			_, err := runs.SubmitItems(context.Background(), fake, runs.ItemsConfig{Run: "r", Items: tc.edit(its)})
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, tc.msg)
			require.ErrorContains(t, err, "nothing was submitted")
			require.Empty(t, fake.Submits)
		})
	}
	_, err := runs.SubmitItems(context.Background(), runstest.New(), runs.ItemsConfig{Run: "r"})
	require.ErrorIs(t, err, runs.ErrInvalidConfig)
	_, err = runs.SubmitItems(context.Background(), runstest.New(), runs.ItemsConfig{Run: "r", Items: items,
		Spec: &rolloutv1.RunSpec{Kind: "a\tb"}})
	require.ErrorIs(t, err, validate.ErrSpec)
}

// TestWaitStuck: a run whose pending items all wait on a Dead dependency,
// with nothing running, cannot finish: Wait says so instead of waiting
// forever; while anything can still progress it keeps waiting.
func TestWaitStuck(t *testing.T) {
	fake := runstest.New()
	_, err := runs.SubmitItems(context.Background(), fake, runs.ItemsConfig{Run: "train", Items: steps(2, 2)})
	require.NoError(t, err)
	fake.OnStatus = func(f *runstest.Coordinator) {
		switch f.Statuses {
		case 1:
			f.FinishLocked("train", 0, 1, "") // s0.0 done: still progressing
		case 2:
			f.FinishLocked("train", 1, 2, "out of memory") // s0.1 dead: r0 and step 1 stuck
		}
	}
	rc, err := runs.Wait(context.Background(), fake, "train", runs.WaitConfig{Interval: time.Millisecond})
	require.ErrorIs(t, err, runs.ErrStuck)
	require.ErrorContains(t, err, "4 pending, all blocked; 1 dead")
	require.Equal(t, 2, fake.Statuses)
	require.True(t, runs.Stuck(rc))
	require.False(t, runs.Finished(rc))
}
