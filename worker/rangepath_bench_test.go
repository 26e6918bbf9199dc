package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/internal/jsonscan"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/mock"
)

// memChunk is a range chunk in memory (store.RangeReader); each read
// copies, as a store's does.
type memChunk []byte

func (m memChunk) ReadRange(_ context.Context, _ string, off, n int64) ([]byte, error) {
	if off < 0 || n < 0 || off+n > int64(len(m)) {
		return nil, store.ErrShortObject
	}
	return append([]byte(nil), m[off:off+n]...), nil
}

// BenchmarkRangePath is a worker's per-index work on a range run of 2 KiB
// prompt lines (the payload stage's), without the RPCs and the store's
// I/O: a chunk of 4096 lines read and checked once (store.LoadRangeChunk),
// then for each line its parse (batch.ParseInputShared, as the worker
// parses a line of its immutable chunk) and sample id, the mock's
// result, the check of the result (a JSON object), and the results encoded
// as range result objects of 1024 indexes (store.EncodeRangeResults) and
// hashed as PutContent names them. SetBytes counts the lines' bytes: MB/s
// is the input a worker's core carries.
func BenchmarkRangePath(b *testing.B) {
	const lines, report = 4096, 1024
	var c store.RangeChunk
	for i := range lines {
		c.Add(fmt.Appendf(nil, `{"prompt":"item %06d: %s"}`, i, strings.Repeat("Summarise the item in one line. ", 62)))
	}
	obj := memChunk(c.Bytes())
	sum := store.Hash(obj)
	be, err := mock.New(mock.DefaultConfig())
	require.NoError(b, err)
	sp, err := batch.ParseSamplingJSON(nil)
	require.NoError(b, err)
	ctx := context.Background()
	b.SetBytes(int64(c.DataLen()))
	b.ReportAllocs()
	for b.Loop() {
		ch, err := store.LoadRangeChunk(ctx, obj, "in/k", uint64(c.DataLen()), &sum)
		if err != nil {
			b.Fatal(err)
		}
		done := make([]store.RangeResult, 0, report)
		for k := range uint64(lines) {
			line, err := ch.Line(k)
			if err != nil {
				b.Fatal(err)
			}
			in := batch.ParseInputShared(line)
			sid := in.SampleID("m", sp, k)
			res, err := be.Run(ctx, worker.Item{Run: "r", ID: sid[:], Index: k, Payload: line, Input: in})
			if err != nil || !jsonscan.Valid(res) {
				b.Fatal(err, string(res))
			}
			done = append(done, store.RangeResult{Index: k, SampleID: sid, Result: res})
			if len(done) == report {
				out, err := store.EncodeRangeResults(done)
				if err != nil {
					b.Fatal(err)
				}
				_ = store.Hash(out)
				done = done[:0]
			}
		}
	}
}
