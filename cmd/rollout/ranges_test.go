package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/store"
)

// workerClient is a plain gRPC client of the replica with the worker's
// certificate (a fake worker's view).
func (r *liveReplica) workerClient(t *testing.T) rolloutv1.CoordinatorClient {
	t.Helper()
	tlsConf, err := mtls.FilesFor(r.certs, "w1").Load()
	require.NoError(t, err)
	cc, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsConf)))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return rolloutv1.NewCoordinatorClient(cc)
}

// fakeResult is the result a fake backend gives the input line at index i.
func fakeResult(t *testing.T, line []byte, i uint64) []byte {
	t.Helper()
	if bytes.Contains(line, []byte(`"custom_id"`)) {
		return batch.OpenAIResult{StatusCode: 200, RequestID: fmt.Sprintf("req_%d", i),
			Body: []byte(fmt.Sprintf(`{"choices":[{"text":"answer %d"}]}`, i))}.Encode()
	}
	return batch.EncodeCompletionResult(fmt.Sprintf("answer %d", i), "stop")
}

// deadIndex fails permanently in both runs of TestRangesCLI.
const deadIndex = 7

// workRanges runs a fake range worker over everything pending: claims of at
// most 50 indexes, each range reported in two progress reports (two result
// objects), deadIndex failed permanently. It returns the result objects.
func workRanges(t *testing.T, ctx context.Context, wc rolloutv1.CoordinatorClient, st *store.Store, model string, sp batch.SamplingParams) []string {
	t.Helper()
	var objects []string
	for {
		claim, err := wc.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 100, MaxIndexes: 50})
		require.NoError(t, err)
		if len(claim.GetItems()) == 0 {
			return objects
		}
		for _, it := range claim.GetItems() {
			require.Positive(t, it.GetCount(), "a range run's claims are ranges")
			pr := it.GetPayloadRef()
			lines, err := store.ReadChunkLines(ctx, st, pr.GetObject(), pr.GetLength(), it.GetIndex()-it.GetBase(), it.GetCount())
			require.NoError(t, err)
			lo, hi := it.GetIndex(), it.GetIndex()+it.GetCount()
			for _, part := range [][2]uint64{{lo, lo + (hi-lo)/2}, {lo + (hi-lo)/2, hi}} {
				if part[0] == part[1] {
					continue
				}
				var rs []store.RangeResult
				var failed []*rolloutv1.FailedIndex
				for i := part[0]; i < part[1]; i++ {
					line := lines[i-lo]
					if i == deadIndex {
						failed = append(failed, &rolloutv1.FailedIndex{Index: i, Reason: "backend said no", Permanent: true})
						continue
					}
					rs = append(rs, store.RangeResult{Index: i, SampleID: batch.SampleIDOfLine(model, line, sp, i), Result: fakeResult(t, line, i)})
				}
				obj, err := store.EncodeRangeResults(rs)
				require.NoError(t, err)
				key, sum, _, err := st.PutContent(ctx, store.RunResults(it.GetRun(), it.GetDataPrefix()), obj)
				require.NoError(t, err)
				objects = append(objects, key)
				resp, err := wc.ReportRange(ctx, &rolloutv1.ReportRangeRequest{WorkerId: "w1", Reports: []*rolloutv1.RangeReport{{
					Run: it.GetRun(), Id: it.GetId(), Attempt: it.GetAttempt(), Lo: part[0], DoneTo: part[1], Failed: failed,
					ResultRef: &rolloutv1.DataRef{Object: key, Length: uint64(len(obj)), Blake3: sum[:]}}}})
				require.NoError(t, err)
				require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, resp.GetResults()[0].GetStatus(), resp.GetResults()[0].GetMessage())
			}
		}
	}
}

// workItems runs a fake item worker over everything pending, with the same
// results as workRanges.
func workItems(t *testing.T, ctx context.Context, wc rolloutv1.CoordinatorClient, st *store.Store) {
	t.Helper()
	for {
		claim, err := wc.Claim(ctx, &rolloutv1.ClaimRequest{WorkerId: "w1", MaxItems: 100})
		require.NoError(t, err)
		if len(claim.GetItems()) == 0 {
			return
		}
		var reports []*rolloutv1.ItemReport
		for _, it := range claim.GetItems() {
			require.Zero(t, it.GetCount())
			pr := it.GetPayloadRef()
			line, err := st.ReadRange(ctx, pr.GetObject(), int64(pr.GetOffset()), int64(pr.GetLength()))
			require.NoError(t, err)
			rep := &rolloutv1.ItemReport{Run: it.GetRun(), Id: it.GetId(), Attempt: it.GetAttempt()}
			if it.GetIndex() == deadIndex {
				rep.Outcome, rep.Reason, rep.Permanent = rolloutv1.Outcome_OUTCOME_FAILED, "backend said no", true
			} else {
				res := fakeResult(t, line, it.GetIndex())
				key, sum, _, err := st.PutContent(ctx, store.RunResults(it.GetRun(), it.GetDataPrefix()), res)
				require.NoError(t, err)
				rep.Outcome, rep.ResultRef = rolloutv1.Outcome_OUTCOME_DONE, &rolloutv1.DataRef{Object: key, Length: uint64(len(res)), Blake3: sum[:]}
			}
			reports = append(reports, rep)
		}
		resp, err := wc.Report(ctx, &rolloutv1.ReportRequest{WorkerId: "w1", Reports: reports})
		require.NoError(t, err)
		for _, r := range resp.GetResults() {
			require.Equal(t, rolloutv1.ReportStatus_REPORT_STATUS_APPLIED, r.GetStatus(), r.GetMessage())
		}
	}
}

// TestRangesCLI: rollout submit --ranges records 300 lines (prompt and
// OpenAI Batch) of a config as range chunks in one real replica's ledger;
// submitting again creates nothing; a fake range worker's results (two
// result objects per range, one index failed) come out of rollout results
// byte for byte as the same input's results do through the item path (one
// file, and the results and errors files), also without --config (the
// ledger's sampling); a range run read with another sampling is refused
// naming the sample id; --items records the same input one record per line; rollout gc keeps every chunk and
// result object the ranges reference and removes an unreferenced one; a
// resubmit of the finished run redoes no finished index.
func TestRangesCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("environment: starts a replica")
	}
	r := startLiveReplica(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfgPath := writeRun(t, 200, 100, "")
	dir := filepath.Dir(cfgPath)
	storeURL := "file://" + t.TempDir()
	st, err := store.Open(ctx, storeURL, store.DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })

	// Submit as ranges of 64 lines: 5 chunks (the last of 44 lines).
	submitArgs := []string{"submit", "--config", cfgPath, "--run", "rng", "--store", storeURL, "--ranges", "--chunk-items", "64"}
	res := r.cli(t, submitArgs...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, `submitted run "rng": 300 items in 5 chunks: 300 created`)
	records, _, done, err := r.ledger.Results("rng", 0, 1000)
	require.NoError(t, err)
	require.True(t, done)
	require.Len(t, records, 5, "one record per chunk")
	for k, rec := range records {
		require.EqualValues(t, 64*k, rec.Index)
		require.EqualValues(t, 64*k, rec.Base)
		require.EqualValues(t, min(64, 300-64*k), rec.Count)
		require.NotNil(t, rec.PayloadRef)
		lines, err := store.ReadChunkLines(ctx, st, rec.PayloadRef.Object, rec.PayloadRef.Length, 0, rec.Count)
		require.NoError(t, err)
		require.Len(t, lines, int(rec.Count))
	}
	chunks := storeKeys(t, st, r.dataPrefix(t, "rng")+"inputs/")
	require.Len(t, chunks, 5)

	// Again: nothing new in the ledger or the store.
	res = r.cli(t, submitArgs...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "300 items in 5 chunks: 300 already pending")
	require.Contains(t, res.stdout, "0 uploaded, 5 already there")
	again, _, _, err := r.ledger.Results("rng", 0, 1000)
	require.NoError(t, err)
	require.Len(t, again, 5)

	// A fake range worker does the run.
	wc := r.workerClient(t)
	_, err = wc.Register(ctx, &rolloutv1.RegisterRequest{WorkerId: "w1"})
	require.NoError(t, err)
	resultObjects := workRanges(t, ctx, wc, st, "org/model-7b", mixedParams)
	require.NotEmpty(t, resultObjects)
	status := r.cli(t, "status", "--run", "rng")
	require.Equal(t, 0, status.code, status.stderr)

	// The same input through the item path, done by a fake item worker.
	res = r.cli(t, "submit", "--config", cfgPath, "--run", "itm", "--store", storeURL, "--items")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "300 created")
	itmRecords, _, _, err := r.ledger.Results("itm", 0, 1000)
	require.NoError(t, err)
	require.Len(t, itmRecords, 300, "--items: one record per line")
	workItems(t, ctx, wc, st)

	// One file: byte-identical.
	outR, outI := filepath.Join(dir, "r.jsonl"), filepath.Join(dir, "i.jsonl")
	res = r.cli(t, "results", "--config", cfgPath, "--run", "rng", "-o", outR)
	require.Equal(t, 0, res.code, res.stdout+res.stderr)
	require.Contains(t, res.stdout, "300 lines (299 done, 1 dead)")
	res = r.cli(t, "results", "--config", cfgPath, "--run", "itm", "-o", outI)
	require.Equal(t, 0, res.code, res.stdout+res.stderr)
	gotR, gotI := mustRead(t, outR), mustRead(t, outI)
	require.Equal(t, gotI, gotR, "the range path prints what the item path prints")
	require.Contains(t, gotR, "backend said no")
	require.Contains(t, gotR, "answer 299")

	// The config's output directory (results and errors files): identical.
	outDir := filepath.Join(dir, "out")
	read := func() (string, string) {
		return mustRead(t, filepath.Join(outDir, batch.ResultsFile)), mustRead(t, filepath.Join(outDir, batch.ErrorsFile))
	}
	res = r.cli(t, "results", "--config", cfgPath, "--run", "itm")
	require.Equal(t, 0, res.code, res.stdout+res.stderr)
	itmResults, itmErrors := read()
	res = r.cli(t, "results", "--config", cfgPath, "--run", "rng")
	require.Equal(t, 0, res.code, res.stdout+res.stderr)
	rngResults, rngErrors := read()
	require.Equal(t, itmResults, rngResults)
	require.Equal(t, itmErrors, rngErrors)

	// Without the config, the run's model and sampling are the ones the
	// ledger records (RunCounters): the same bytes.
	noCfg := filepath.Join(dir, "nocfg.jsonl")
	res = r.cli(t, "results", "--run", "rng", "-o", noCfg)
	require.Equal(t, 0, res.code, res.stdout+res.stderr)
	require.Equal(t, gotI, mustRead(t, noCfg), "without --config the run's own sampling is used")

	// A config with another sampling gives other sample ids: results
	// refuses, naming the sample id, and writes nothing.
	otherCfg := filepath.Join(dir, "other.toml")
	cfgText := mustRead(t, cfgPath)
	require.Contains(t, cfgText, "seed = 7")
	require.NoError(t, os.WriteFile(otherCfg, []byte(strings.Replace(cfgText, "seed = 7", "seed = 8", 1)), 0o644))
	res = r.cli(t, "results", "--config", otherCfg, "--run", "rng", "-o", filepath.Join(dir, "wrong.jsonl"))
	require.NotEqual(t, 0, res.code)
	require.Contains(t, res.stderr, "sample id")
	_, err = os.Stat(filepath.Join(dir, "wrong.jsonl"))
	require.True(t, os.IsNotExist(err), "a refused walk leaves no file")

	// gc: everything the ranges reference stays, the unreferenced goes.
	stale := r.dataPrefix(t, "rng") + "results/stale"
	require.NoError(t, st.Put(ctx, stale, []byte("x")))
	time.Sleep(10 * time.Millisecond)
	res = r.cli(t, "gc", "--store", storeURL, "--grace", "1ns", "--yes")
	require.Equal(t, 0, res.code, res.stdout+res.stderr)
	ok, err := st.Exists(ctx, stale)
	require.NoError(t, err)
	require.False(t, ok, "gc removes an unreferenced result object of a range run: %s", res.stdout)
	for _, k := range append(chunks, resultObjects...) {
		ok, err := st.Exists(ctx, k)
		require.NoError(t, err)
		require.True(t, ok, "gc keeps %s, which a range record references", k)
	}
	res = r.cli(t, "results", "--config", cfgPath, "--run", "rng", "-o", outR)
	require.Equal(t, 0, res.code, res.stdout+res.stderr)
	require.Equal(t, gotI, mustRead(t, outR), "after gc the results are whole")

	// Resume of the finished run: done indexes stay done, the dead one is
	// retried (--retry-dead), nothing is created.
	res = r.cli(t, submitArgs...)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "300 items in 5 chunks: 299 already done, 1 failed re-enqueued")
	rc, err := r.ledger.Run("rng")
	require.NoError(t, err)
	require.EqualValues(t, 300, rc.Total)
	require.EqualValues(t, 299, rc.Done)
	require.EqualValues(t, 1, rc.Pending)
}

// TestRangesResumeWithMoreLines: a range run resubmitted with lines appended to its input is resumed as an item run
// is: the chunk the run holds is cut where it was (the same object, left
// as it is) and the new lines go into a new chunk, whatever --chunk-items
// says now.
func TestRangesResumeWithMoreLines(t *testing.T) {
	if testing.Short() {
		t.Skip("environment: starts a replica")
	}
	r := startLiveReplica(t)
	ctx := context.Background()
	storeURL := "file://" + t.TempDir()
	st, err := store.Open(ctx, storeURL, store.DefaultOptions())
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	in := writeInput(t, 5)
	res := r.cli(t, "submit", "--input", in, "--run", "grow", "--store", storeURL, "--ranges")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, `submitted run "grow": 5 items in 1 chunk: 5 created`)
	first := storeKeys(t, st, r.dataPrefix(t, "grow")+"inputs/")
	require.Len(t, first, 1)

	f, err := os.OpenFile(in, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"prompt":"one more"}` + "\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	res = r.cli(t, "submit", "--input", in, "--run", "grow", "--store", storeURL, "--chunk-items", "3")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "6 items in 2 chunks: 1 created, 5 already pending")
	require.Contains(t, res.stdout, "1 uploaded, 1 already there")
	records, _, _, err := r.ledger.Results("grow", 0, 100)
	require.NoError(t, err)
	require.Len(t, records, 2)
	require.EqualValues(t, 5, records[0].Count)
	require.EqualValues(t, 5, records[1].Index)
	require.EqualValues(t, 1, records[1].Count)
}
