package runs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/client/runs/runstest"
)

// writeInput writes n valid lines (with a blank line after the first) and
// returns the path (see runstest.WriteInput).
func writeInput(t *testing.T, n int) string {
	t.Helper()
	path, err := runstest.WriteInput(t.TempDir(), n)
	require.NoError(t, err)
	return path
}

// submit runs Submit with invalid lines told to invalid.
func submit(c runs.Coordinator, cfg runs.SubmitConfig, invalid io.Writer) (*runs.SubmitResult, error) {
	cfg.Invalid = invalid
	return runs.Submit(context.Background(), c, cfg)
}

func TestSubmitInvalidInputCapsTheList(t *testing.T) {
	var b strings.Builder
	for range 130 {
		b.WriteString("{}\n")
	}
	path := filepath.Join(t.TempDir(), "bad.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	var errOut bytes.Buffer
	_, err := submit(runstest.New(), func() runs.SubmitConfig {
		c := runs.DefaultSubmitConfig()
		c.Run, c.Files = "r", []string{path}
		return c
	}(), &errOut)
	require.ErrorIs(t, err, batch.ErrInvalidInput)
	require.Equal(t, batch.DefaultMaxReportedErrors+1, strings.Count(errOut.String(), "\n"))
	require.Contains(t, errOut.String(), "... and 30 more invalid lines")
}

func TestSubmitChunksAndIDs(t *testing.T) {
	path := writeInput(t, 25)
	fake := runstest.New()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.ChunkItems = "r1", []string{path}, 10
	var errOut bytes.Buffer
	res, err := submit(fake, cfg, &errOut)
	require.NoError(t, err)
	require.Empty(t, errOut.String())
	require.Equal(t, uint64(25), res.Items)
	require.Equal(t, 3, res.Chunks)
	require.Equal(t, uint64(25), res.Created)
	require.Equal(t, "25 items in 3 chunks: 25 created", res.String())

	require.Len(t, fake.Submits, 3)
	var next uint64
	for _, req := range fake.Submits {
		require.Equal(t, "r1", req.GetRun())
		require.Equal(t, uint32(3), req.GetSpec().GetMaxFailures())
		require.Equal(t, uint64(25), req.GetSpec().GetTotal())
		require.True(t, req.GetRetryDead())
		require.LessOrEqual(t, len(req.GetItems()), 10)
		for _, it := range req.GetItems() {
			require.Equal(t, next, it.GetIndex(), "indexes are 0-based over valid lines, blank lines skipped")
			prompt := fmt.Sprintf("prompt %d", next)
			id := batch.SampleID("", prompt, batch.DefaultSamplingParams(), next)
			require.Equal(t, id[:], it.GetId())
			require.JSONEq(t, fmt.Sprintf(`{"id":%d,"prompt":%q,"meta":{"k":[%d]}}`, next, prompt, next), string(it.GetPayload()))
			next++
		}
	}
	require.Equal(t, uint64(25), next)

	// Resubmitting is idempotent: every item already exists.
	res, err = submit(fake, cfg, &errOut)
	require.NoError(t, err)
	require.Equal(t, "25 items in 3 chunks: 25 already pending", res.String())
	fake.Finish("r1", 0, 25, "")
	res, err = submit(fake, cfg, &errOut)
	require.NoError(t, err)
	require.Equal(t, "25 items in 3 chunks: 25 already done (the run is already complete)", res.String())
}

func TestSubmitChunksByBytes(t *testing.T) {
	path := writeInput(t, 20)
	fake := runstest.New()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files = "r", []string{path}
	cfg.ChunkBytes = 400 // about three of these lines, with the request's run and spec
	res, err := submit(fake, cfg, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, uint64(20), res.Items)
	require.Greater(t, len(fake.Submits), 5)
	for _, req := range fake.Submits {
		require.LessOrEqual(t, proto.Size(req), cfg.ChunkBytes, "every request is at most --chunk-bytes as encoded")
	}
}

func TestSubmitFailureSaysWhatWasSent(t *testing.T) {
	path := writeInput(t, 30)
	fake := runstest.New()
	fake.SubmitErr, fake.SubmitErrAt = status.Error(codes.InvalidArgument, "run name too long"), 1
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.ChunkItems = "r", []string{path}, 10
	_, err := submit(fake, cfg, &bytes.Buffer{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "submitting items 10..19")
	require.Contains(t, err.Error(), "the first 10 items were submitted; submit again to resume")
	require.Contains(t, err.Error(), "run name too long")

	fake.SubmitErr = context.DeadlineExceeded
	fake.SubmitErrAt = 0
	_, err = submit(fake, cfg, &bytes.Buffer{})
	require.ErrorContains(t, err, "submitting items 0..9: no answer from the cluster within 30s")
}

func TestResultsBadPagesLeaveNoFile(t *testing.T) {
	tests := []struct {
		name string
		hook func(*rolloutv1.ResultsResponse)
		want string
	}{
		{"out of order", func(r *rolloutv1.ResultsResponse) {
			if len(r.Items) > 1 {
				r.Items[0], r.Items[1] = r.Items[1], r.Items[0]
			}
		}, "out of order"},
		{"no progress", func(r *rolloutv1.ResultsResponse) {
			if !r.Done {
				r.Items, r.NextIndex = nil, 0
			}
		}, "did not advance"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := runstest.New()
			cfg := runs.DefaultSubmitConfig()
			cfg.Run, cfg.Files = "r", []string{writeInput(t, 6)}
			_, err := submit(fake, cfg, &bytes.Buffer{})
			require.NoError(t, err)
			fake.Finish("r", 0, 6, "")
			fake.ResultsHook = tt.hook
			dir := t.TempDir()
			out := filepath.Join(dir, "out.jsonl")
			_, err = runs.WriteFile(context.Background(), fake, "r", out, runs.ResultsConfig{PageSize: 3, Timeout: time.Second})
			require.ErrorContains(t, err, tt.want)
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Empty(t, entries)
		})
	}
}

// TestResultsBadItemsBecomeErrorLines: an item whose id or result cannot be
// rendered is an error line with the reason; the other items are written.
func TestResultsBadItemsBecomeErrorLines(t *testing.T) {
	tests := []struct {
		name string
		hook func(*rolloutv1.ResultsResponse)
		want string
	}{
		{"short id", func(r *rolloutv1.ResultsResponse) {
			if len(r.Items) > 0 {
				r.Items[0].Id = r.Items[0].Id[:5]
			}
		}, "5-byte id"},
		{"bad result", func(r *rolloutv1.ResultsResponse) {
			if len(r.Items) > 0 {
				r.Items[0].Result = []byte(`{"text":"x"}`)
			}
		}, `result has no \"completion\"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := runstest.New()
			cfg := runs.DefaultSubmitConfig()
			cfg.Run, cfg.Files = "r", []string{writeInput(t, 6)}
			_, err := submit(fake, cfg, &bytes.Buffer{})
			require.NoError(t, err)
			fake.Finish("r", 0, 6, "")
			fake.ResultsHook = tt.hook
			out := filepath.Join(t.TempDir(), "out.jsonl")
			sum, err := runs.WriteFile(context.Background(), fake, "r", out, runs.ResultsConfig{PageSize: 3, Timeout: time.Second})
			require.NoError(t, err)
			require.EqualValues(t, 6, sum.Lines)
			require.EqualValues(t, 2, sum.Unrenderable, "the first item of each of the two pages")
			data, err := os.ReadFile(out)
			require.NoError(t, err)
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			require.Len(t, lines, 6)
			require.Contains(t, lines[0], tt.want)
			require.Contains(t, lines[1], `"completion":"MOCK:prompt 1"`)
		})
	}
}

func TestRunFinished(t *testing.T) {
	tests := []struct {
		rc   *rolloutv1.RunCounters
		want bool
	}{
		{&rolloutv1.RunCounters{}, false},
		{&rolloutv1.RunCounters{Total: 3, Done: 3}, true},
		{&rolloutv1.RunCounters{Total: 3, Done: 2, Dead: 1}, true},
		{&rolloutv1.RunCounters{Total: 3, ExpectedTotal: 4, Done: 3}, false},
		{&rolloutv1.RunCounters{Total: 3, Done: 3, Running: 1}, false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, runs.Finished(tt.rc), "%v", tt.rc)
	}
}

func TestResultsShrinksOversizedPages(t *testing.T) {
	fake := runstest.New()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files = "r", []string{writeInput(t, 9)}
	_, err := submit(fake, cfg, &bytes.Buffer{})
	require.NoError(t, err)
	fake.Finish("r", 0, 9, "")
	fake.MaxPage = 3
	out := filepath.Join(t.TempDir(), "out.jsonl")
	sum, err := runs.WriteFile(context.Background(), fake, "r", out, runs.ResultsConfig{PageSize: 16, Timeout: time.Second})
	require.NoError(t, err)
	require.Equal(t, uint64(9), sum.Lines)
	require.Equal(t, []uint32{16, 8, 4, 2, 2, 2, 2, 2}, fake.Limits, "halved until a page fits")
}

// TestSubmitUsesAnnouncedLimits: Submit chunks under the limits the
// coordinator announces (items and bytes per request), and checks each
// chunk with the coordinator's own validation.
func TestSubmitUsesAnnouncedLimits(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "in.jsonl")
	var b strings.Builder
	for i := range 120 {
		fmt.Fprintf(&b, `{"prompt":"%d %s"}`+"\n", i, strings.Repeat("y", 3000))
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	lim := validate.Limits{MaxMessageBytes: 160 << 10, MaxRequestBytes: 80 << 10, MaxItemsPerRequest: 20,
		MaxPayloadBytes: 4 << 10, MaxResultBytes: 4 << 10, MaxRunNameBytes: 64, IDBytes: 32}
	require.NoError(t, lim.Validate())
	fake := runstest.New()
	fake.Announce = lim.Proto()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.ChunkBytes = "r", []string{path}, 1<<20
	res, err := submit(fake, cfg, &strings.Builder{})
	require.NoError(t, err)
	require.EqualValues(t, 120, res.Created)
	require.Equal(t, 1, fake.Clusters)
	for _, req := range fake.Submits {
		require.NoError(t, lim.CheckRequest(req))
	}
	require.GreaterOrEqual(t, len(fake.Submits), 6)

	// A line over the announced per-item limit is refused before anything.
	require.NoError(t, os.WriteFile(path, []byte(`{"prompt":"`+strings.Repeat("z", 5000)+`"}`+"\n"), 0o644))
	fake = runstest.New()
	fake.Announce = lim.Proto()
	var errOut strings.Builder
	_, err = submit(fake, cfg, &errOut)
	require.Error(t, err)
	require.Contains(t, errOut.String(), "exceeds the per-item limit of 4096 bytes")
	require.Empty(t, fake.Submits)
}

// TestSubmitRetriesWhenCoordinatorBusy: a chunk refused because the
// coordinator's in-flight budget is full (it changed nothing) is sent again
// after a backoff; any other RESOURCE_EXHAUSTED is not retried.
func TestSubmitRetriesWhenCoordinatorBusy(t *testing.T) {
	fake := runstest.New()
	fake.Busy = 3
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files = "r", []string{writeInput(t, 5)}
	res, err := submit(fake, cfg, &strings.Builder{})
	require.NoError(t, err)
	require.EqualValues(t, 5, res.Created)
	require.Zero(t, fake.Busy)

	fake = runstest.New()
	fake.SubmitErr = status.Error(codes.ResourceExhausted, "grpc: received message larger than max")
	_, err = submit(fake, cfg, &strings.Builder{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
}

func TestSubmitResultStringSaysWhatResumeDid(t *testing.T) {
	r := &runs.SubmitResult{Items: 6, Chunks: 1}
	r.Add(&rolloutv1.SubmitItemsResponse{Created: 1, AlreadyPending: 1, AlreadyRunning: 1, AlreadyDone: 1, Retried: 1, RependedStale: 1})
	require.Equal(t, "6 items in 1 chunk: 1 created, 1 already done, 1 already running (live owner, left alone), "+
		"1 already pending, 1 failed re-enqueued, 1 running with a silent owner re-enqueued", r.String())
	r = &runs.SubmitResult{Items: 2, Chunks: 1}
	r.Add(&rolloutv1.SubmitItemsResponse{CreatedDead: 1, Dead: 1})
	require.Equal(t, "2 items in 1 chunk: 1 recorded as failed (invalid lines), 1 left failed", r.String())
}

// TestWait: Wait reads the status until the run is finished, telling
// Progress every read (the finished one included); an error from Progress
// ends it; an unknown run matches ErrRunNotFound.
func TestWait(t *testing.T) {
	fake := runstest.New()
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files = "r", []string{writeInput(t, 6)}
	_, err := runs.Submit(context.Background(), fake, cfg)
	require.NoError(t, err)
	fake.OnStatus = func(f *runstest.Coordinator) {
		if f.Statuses <= 3 { // two items finish per read, the third read finds all six
			f.FinishLocked("r", uint64(2*f.Statuses-2), uint64(2*f.Statuses), "")
		}
	}
	var seen []uint64
	wcfg := runs.WaitConfig{Interval: time.Millisecond, Progress: func(resp *rolloutv1.RunStatusResponse, rc *rolloutv1.RunCounters) error {
		require.Equal(t, uint64(2), resp.GetHeader().GetTerm())
		seen = append(seen, rc.GetDone())
		return nil
	}}
	rc, err := runs.Wait(context.Background(), fake, "r", wcfg)
	require.NoError(t, err)
	require.True(t, runs.Finished(rc))
	require.Equal(t, []uint64{2, 4, 6}, seen)

	boom := errors.New("boom")
	wcfg.Progress = func(*rolloutv1.RunStatusResponse, *rolloutv1.RunCounters) error { return boom }
	_, err = runs.Wait(context.Background(), fake, "r", wcfg)
	require.ErrorIs(t, err, boom)

	_, err = runs.Wait(context.Background(), fake, "nope", wcfg)
	require.ErrorIs(t, err, runs.ErrRunNotFound)
	require.EqualError(t, err, `run "nope" not found`)
	require.Equal(t, codes.NotFound, status.Code(err), "the cluster's answer is kept")

	fake.OnStatus = nil
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fake.Runs["r"].Items[0].State = rolloutv1.ItemState_ITEM_STATE_PENDING
	_, err = runs.Wait(ctx, fake, "r", runs.WaitConfig{Interval: time.Millisecond})
	require.ErrorIs(t, err, context.Canceled)
}

// TestSubmitRefusesBadConfig: a config with a missing or bad field is
// refused before anything is sent.
func TestSubmitRefusesBadConfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*runs.SubmitConfig)
	}{
		{"no run", func(c *runs.SubmitConfig) { c.Run = "" }},
		{"no files", func(c *runs.SubmitConfig) { c.Files = nil }},
		{"zero chunk items", func(c *runs.SubmitConfig) { c.ChunkItems = 0 }},
		{"zero chunk bytes", func(c *runs.SubmitConfig) { c.ChunkBytes = 0 }},
		{"zero max failures", func(c *runs.SubmitConfig) { c.MaxFailures = 0 }},
		{"negative stale after", func(c *runs.SubmitConfig) { c.StaleAfter = -time.Second }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fake := runstest.New()
			cfg := runs.DefaultSubmitConfig()
			cfg.Run, cfg.Files = "r", []string{writeInput(t, 2)}
			tt.edit(&cfg)
			_, err := runs.Submit(context.Background(), fake, cfg)
			require.ErrorIs(t, err, runs.ErrInvalidConfig)
			require.Zero(t, fake.Clusters)
			require.Empty(t, fake.Submits)
		})
	}
}
