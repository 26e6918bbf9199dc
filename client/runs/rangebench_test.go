package runs_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/store"
)

// payloadRun is a stored range run shaped like the payload stage of
// rollout-bench: chunks of perChunk prompt lines of about lineBytes bytes,
// one result object (a mock backend's echo) and one done record per
// perObject indexes. want is the output as batch.RenderLine renders each
// line, and inputBytes the input's size.
type payloadRun struct {
	f          *rangeRecords
	want       []byte
	inputBytes int64
	// results are the result objects' keys in index order.
	results []string
}

// newPayloadRun stores a payloadRun of chunks×perChunk lines in st.
func newPayloadRun(tb testing.TB, st *store.Store, chunks, perChunk, perObject, lineBytes int) *payloadRun {
	tb.Helper()
	ctx := context.Background()
	const model = "org/m"
	sp := batch.DefaultSamplingParams()
	run := &payloadRun{f: &rangeRecords{model: model, sampling: sp.JSON()}}
	pad := strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_", lineBytes/64+1)
	var want bytes.Buffer
	for c := range chunks {
		base := uint64(c * perChunk)
		var ch store.RangeChunk
		lines := make([][]byte, perChunk)
		for k := range lines {
			p := fmt.Sprintf("payload item %012d %s", base+uint64(k), pad)
			p = p[:max(lineBytes-len(`{"prompt":""}`), 20)]
			lines[k] = []byte(`{"prompt":"` + p + `"}`)
			ch.Add(lines[k])
			run.inputBytes += int64(len(lines[k]) + 1)
		}
		key, _, _, err := st.PutContent(ctx, store.InputPrefix("r"), ch.Bytes())
		require.NoError(tb, err)
		pr := &rolloutv1.DataRef{Object: key, Length: uint64(ch.DataLen())}
		for lo := 0; lo < perChunk; lo += perObject {
			hi := min(lo+perObject, perChunk)
			rs := make([]store.RangeResult, 0, hi-lo)
			for k := lo; k < hi; k++ {
				idx := base + uint64(k)
				sid := batch.SampleIDOfLine(model, lines[k], sp, idx)
				in, err := batch.ParseRequest(lines[k])
				require.NoError(tb, err)
				res := batch.EncodeCompletionResult("MOCK:"+in.Prompt, "stop")
				rs = append(rs, store.RangeResult{Index: idx, SampleID: sid, Result: res})
				line, _, bad := batch.RenderLine(batch.FinishedItem{Index: idx, ID: sid[:], SampleID: sid, Payload: lines[k], Done: true, Result: res})
				require.False(tb, bad)
				want.Write(line)
				want.WriteByte('\n')
			}
			obj, err := store.EncodeRangeResults(rs)
			require.NoError(tb, err)
			rkey, sum, _, err := st.PutContent(ctx, store.ResultPrefix("r"), obj)
			require.NoError(tb, err)
			run.results = append(run.results, rkey)
			first := base + uint64(lo)
			run.f.records = append(run.f.records, &rolloutv1.ResultItem{Id: []byte(fmt.Sprintf("R%08d", first)), Index: first,
				Count: uint64(hi - lo), Base: base, State: rolloutv1.ItemState_ITEM_STATE_DONE, PayloadRef: pr, Attempt: 1,
				ResultRef: &rolloutv1.DataRef{Object: rkey, Length: uint64(len(obj)), Blake3: sum[:]}})
		}
	}
	run.want = want.Bytes()
	return run
}

// countingWriter counts the bytes written to it.
type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

// TestPayloadRunRendersAsRenderLine: a run shaped like the benchmark's
// renders byte for byte as batch.RenderLine renders each line (the
// benchmark below measures what this checks).
func TestPayloadRunRendersAsRenderLine(t *testing.T) {
	st := openFileStore(t)
	run := newPayloadRun(t, st, 3, 700, 250, 2048)
	var got bytes.Buffer
	sum, err := runs.WriteTo(context.Background(), run.f, "r", &got, runs.ResultsConfig{Store: st})
	require.NoError(t, err)
	require.Equal(t, string(run.want), got.String())
	require.EqualValues(t, 2100, sum.Done)
	require.True(t, sum.Complete())
}

// BenchmarkWriteRangeResults measures `rollout results` of a finished range
// run of 2 KiB prompts (20 chunks of 1,000 lines, a result object per 500
// indexes) from a file:// store, without the ledger (its records are in
// memory) and onto a writer that only counts: the walk, its reads and
// checks, and the rendering. Bytes are the input's.
func BenchmarkWriteRangeResults(b *testing.B) {
	st, err := store.Open(context.Background(), "file://"+b.TempDir(), store.DefaultOptions())
	require.NoError(b, err)
	b.Cleanup(func() { st.Close() })
	run := newPayloadRun(b, st, 20, 1000, 500, 2048)
	b.SetBytes(run.inputBytes)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		var w countingWriter
		if _, err := runs.WriteTo(context.Background(), run.f, "r", &w, runs.ResultsConfig{Store: st}); err != nil {
			b.Fatal(err)
		}
		if w.n != int64(len(run.want)) {
			b.Fatalf("wrote %d bytes, want %d", w.n, len(run.want))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/20000, "µs/item")
}
