package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
)

// Submit defaults.
const (
	defaultChunkItems  = 1000
	defaultChunkBytes  = 1 << 20
	defaultMaxFailures = 3
	// itemOverhead approximates the protobuf bytes of one item besides its
	// payload (id, index, tags).
	itemOverhead = 48
)

// submitConfig is one submission of an input file as a run.
type submitConfig struct {
	Run         string
	Input       string
	ChunkItems  int
	ChunkBytes  int
	MaxFailures uint32
	RetryDead   bool
	// Timeout bounds each SubmitItems call (with its retries).
	Timeout time.Duration
	Read    batch.Config
}

func defaultSubmitConfig() submitConfig {
	return submitConfig{
		ChunkItems:  defaultChunkItems,
		ChunkBytes:  defaultChunkBytes,
		MaxFailures: defaultMaxFailures,
		RetryDead:   true,
		Timeout:     defaultTimeout,
		Read:        batch.DefaultConfig(),
	}
}

// submitResult sums the coordinator's answers over all chunks.
type submitResult struct {
	Items                                uint64
	Chunks                               int
	Created, AlreadyPending              uint64
	AlreadyRunning, AlreadyDone, Retried uint64
	Dead                                 uint64
}

func (r *submitResult) add(resp *rolloutv1.SubmitItemsResponse) {
	r.Created += uint64(resp.GetCreated())
	r.AlreadyPending += uint64(resp.GetAlreadyPending())
	r.AlreadyRunning += uint64(resp.GetAlreadyRunning())
	r.AlreadyDone += uint64(resp.GetAlreadyDone())
	r.Retried += uint64(resp.GetRetried())
	r.Dead += uint64(resp.GetDead())
}

// String says what happened, e.g. `1200 items to run "x" in 2 chunks:
// 1200 created`.
func (r *submitResult) String() string {
	var parts []string
	for _, c := range []struct {
		n    uint64
		what string
	}{
		{r.Created, "created"}, {r.AlreadyDone, "already done"}, {r.AlreadyRunning, "already running"},
		{r.AlreadyPending, "already pending"}, {r.Retried, "dead items retried"}, {r.Dead, "left dead"},
	} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "no change")
	}
	chunks := "chunks"
	if r.Chunks == 1 {
		chunks = "chunk"
	}
	s := fmt.Sprintf("%d items in %d %s: %s", r.Items, r.Chunks, chunks, strings.Join(parts, ", "))
	if r.AlreadyDone == r.Items && r.Items > 0 {
		s += " (the run is already complete)"
	}
	return s
}

func (a *app) submitCmd() *cobra.Command {
	cfg := defaultSubmitConfig()
	var coords []string
	var wait bool
	interval := defaultPollInterval
	cmd := &cobra.Command{
		Use:   "submit --coord H:P[,...] --input FILE.jsonl --run NAME [--wait]",
		Short: "Validate a JSONL file and submit it as a run (idempotent: resubmitting resumes)",
		Long: "submit first validates every line of the input (a JSON object with a string \"prompt\"\n" +
			"per line; blank lines are skipped). If any line is invalid it prints each as FILE:LINE: reason\n" +
			"and submits nothing. Otherwise it streams the file to the coordinator in chunks. Items are\n" +
			"content-addressed, so submitting the same file to the same run again resumes it: done items\n" +
			"are skipped, running ones left alone and (with --retry-dead) dead ones retried.",
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	addCoordFlag(cmd, &coords)
	f.StringVar(&cfg.Input, "input", "", "JSONL input file (required)")
	f.StringVar(&cfg.Run, "run", "", "run name (required)")
	f.BoolVar(&wait, "wait", false, "after submitting, show progress until the run finishes")
	f.DurationVar(&interval, "interval", interval, "with --wait: how often to poll progress")
	f.IntVar(&cfg.ChunkItems, "chunk-items", cfg.ChunkItems, "most items per SubmitItems call")
	f.IntVar(&cfg.ChunkBytes, "chunk-bytes", cfg.ChunkBytes, "approximate most payload bytes per SubmitItems call")
	f.Uint32Var(&cfg.MaxFailures, "max-failures", cfg.MaxFailures, "failed attempts that make an item dead")
	f.BoolVar(&cfg.RetryDead, "retry-dead", cfg.RetryDead, "when resubmitting, give dead items new attempts")
	f.IntVar(&cfg.Read.MaxLineBytes, "max-line-bytes", cfg.Read.MaxLineBytes, "longest accepted input line")
	_ = cmd.MarkFlagRequired("input")
	_ = cmd.MarkFlagRequired("run")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		if err := checkRunName(cfg.Run); err != nil {
			return err
		}
		if err := cfg.check(); err != nil {
			return err
		}
		if wait && interval <= 0 {
			return usagef("--interval must be positive, got %v", interval)
		}
		cfg.Timeout = a.timeout
		c, err := a.client(coords)
		if err != nil {
			return err
		}
		defer c.Close()
		res, err := submitInput(ctx, c, cfg, a.stderr)
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "submitted run %q: %s\n", cfg.Run, res)
		if !wait {
			return nil
		}
		pr := newProgressPrinter(a.stdout, a.tty, interval)
		rc, err := waitRun(ctx, c, cfg.Run, a.timeout, interval, pr)
		if err != nil {
			return err
		}
		return finishedRunError(rc)
	})
	return cmd
}

// check validates the flag-given parts of cfg.
func (cfg *submitConfig) check() error {
	switch {
	case cfg.ChunkItems <= 0:
		return usagef("--chunk-items must be positive, got %d", cfg.ChunkItems)
	case cfg.ChunkBytes <= 0:
		return usagef("--chunk-bytes must be positive, got %d", cfg.ChunkBytes)
	case cfg.MaxFailures == 0:
		return usagef("--max-failures must be positive")
	case cfg.Read.MaxLineBytes <= 0:
		return usagef("--max-line-bytes must be positive, got %d", cfg.Read.MaxLineBytes)
	}
	return nil
}

// submitInput validates cfg.Input completely, printing every invalid line to
// errOut as FILE:LINE: reason, and submits nothing if any line is invalid.
// Otherwise it reads the file a second time and sends it in chunks, item id
// = SampleID("", prompt, DefaultSamplingParams(), index).
func submitInput(ctx context.Context, c coordinator, cfg submitConfig, errOut io.Writer) (*submitResult, error) {
	f, err := os.Open(cfg.Input)
	if err != nil {
		return nil, fmt.Errorf("input: %w", err)
	}
	defer f.Close()

	rep, err := batch.ValidateInput(ctx, f, cfg.Input, cfg.Read)
	if err != nil {
		return nil, fmt.Errorf("validating input: %w", err)
	}
	if !rep.OK() {
		for _, e := range rep.Errors {
			fmt.Fprintln(errOut, e.Error())
		}
		if n := rep.Omitted(); n > 0 {
			fmt.Fprintf(errOut, "... and %d more invalid lines\n", n)
		}
		return nil, fmt.Errorf("%w; nothing was submitted", rep.Err())
	}

	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("input: rewinding %s: %w", cfg.Input, err)
	}
	rd, err := batch.NewReader(f, cfg.Input, cfg.Read)
	if err != nil {
		return nil, err
	}
	sampling := batch.DefaultSamplingParams()
	samplingJSON, _ := json.Marshal(map[string]any{
		"temperature": sampling.Temperature, "top_p": sampling.TopP,
		"max_tokens": sampling.MaxTokens, "seed": sampling.Seed,
	})
	spec := &rolloutv1.RunSpec{MaxFailures: cfg.MaxFailures, Total: rep.Items, Sampling: samplingJSON}
	res := &submitResult{}
	var chunk []*rolloutv1.SubmitItem
	chunkBytes := 0
	send := func() error {
		if len(chunk) == 0 {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
		resp, err := c.SubmitItems(cctx, &rolloutv1.SubmitItemsRequest{
			Run: cfg.Run, Spec: spec, Items: chunk, RetryDead: cfg.RetryDead,
		})
		if err != nil {
			what := fmt.Sprintf("submitting items %d..%d", chunk[0].Index, chunk[len(chunk)-1].Index)
			if res.Chunks > 0 {
				what += fmt.Sprintf(" (the first %d items were submitted; submit again to resume)", res.Items)
			}
			return rpcError(what, cfg.Timeout, err)
		}
		res.add(resp)
		res.Chunks++
		res.Items += uint64(len(chunk))
		chunk, chunkBytes = nil, 0
		return nil
	}
	for l, err := range rd.Lines() {
		if err != nil {
			return nil, fmt.Errorf("input changed since it was validated: %w", err)
		}
		id := batch.SampleID("", l.Prompt, sampling, l.Index)
		size := len(l.Raw) + itemOverhead
		if len(chunk) > 0 && (len(chunk) >= cfg.ChunkItems || chunkBytes+size > cfg.ChunkBytes) {
			if err := send(); err != nil {
				return nil, err
			}
		}
		chunk = append(chunk, &rolloutv1.SubmitItem{Id: id[:], Index: l.Index, Payload: l.Raw})
		chunkBytes += size
	}
	if err := send(); err != nil {
		return nil, err
	}
	if res.Items != rep.Items {
		return nil, fmt.Errorf("input changed since it was validated: %d items then, %d now", rep.Items, res.Items)
	}
	return res, nil
}

// runTarget is the number of items a run is expected to hold.
func runTarget(rc *rolloutv1.RunCounters) uint64 {
	return max(rc.GetTotal(), rc.GetExpectedTotal())
}

// runFinished reports whether every expected item is Done or Dead.
func runFinished(rc *rolloutv1.RunCounters) bool {
	t := runTarget(rc)
	return t > 0 && rc.GetPending() == 0 && rc.GetRunning() == 0 && rc.GetDone()+rc.GetDead() >= t
}

// findRun picks the counters of run from a RunStatus reply.
func findRun(resp *rolloutv1.RunStatusResponse, run string) *rolloutv1.RunCounters {
	for _, rc := range resp.GetRuns() {
		if rc.GetName() == run {
			return rc
		}
	}
	return nil
}

// runStatus fetches the counters of one run; an unknown run is an error
// saying so.
func runStatus(ctx context.Context, c coordinator, run string, timeout time.Duration) (*rolloutv1.RunStatusResponse, *rolloutv1.RunCounters, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.RunStatus(cctx, &rolloutv1.RunStatusRequest{Run: run})
	if isNotFound(err) {
		return nil, nil, fmt.Errorf("run %q not found", run)
	}
	if err != nil {
		return nil, nil, rpcError("reading run status", timeout, err)
	}
	rc := findRun(resp, run)
	if rc == nil {
		return nil, nil, fmt.Errorf("run %q not found", run)
	}
	return resp, rc, nil
}

// waitRun polls the run every interval and shows its progress until it
// finishes, ctx ends or the cluster stays silent for timeout.
func waitRun(ctx context.Context, c coordinator, run string, timeout, interval time.Duration, pr *progressPrinter) (*rolloutv1.RunCounters, error) {
	meter := batch.NewProgressMeter(10 * time.Second)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		_, rc, err := runStatus(ctx, c, run, timeout)
		if err != nil {
			pr.abort()
			return nil, err
		}
		p := meter.Observe(time.Now(), rc.GetDone(), rc.GetDead(), runTarget(rc))
		if runFinished(rc) {
			pr.final(p)
			return rc, nil
		}
		pr.show(time.Now(), p)
		select {
		case <-ctx.Done():
			pr.abort()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// finishedRunError is nil for a run whose items are all done, else an error
// counting the dead ones.
func finishedRunError(rc *rolloutv1.RunCounters) error {
	if rc.GetDead() > 0 {
		return fmt.Errorf("run %q finished with %d dead item(s) of %d; 'rollout results' shows their errors",
			rc.GetName(), rc.GetDead(), runTarget(rc))
	}
	return nil
}

// progressPrinter shows progress: on a terminal one line redrawn in place
// with a bar; otherwise a plain line whenever progress changed, at most one
// per interval (and at least one every quietEvery).
type progressPrinter struct {
	w        io.Writer
	tty      bool
	interval time.Duration

	last      time.Time
	lastShown uint64
	shown     bool
	open      bool // a tty line is drawn without its newline
}

const (
	quietEvery = 30 * time.Second
	barWidth   = 30
)

func newProgressPrinter(w io.Writer, tty bool, interval time.Duration) *progressPrinter {
	return &progressPrinter{w: w, tty: tty, interval: interval}
}

// show displays p, taken at now.
func (pr *progressPrinter) show(now time.Time, p batch.Progress) {
	if pr.tty {
		fmt.Fprintf(pr.w, "\r%s %s\x1b[K", p.Bar(barWidth), p)
		pr.open = true
		return
	}
	changed := !pr.shown || p.Finished() != pr.lastShown
	since := now.Sub(pr.last)
	if (changed && since >= pr.interval) || since >= quietEvery {
		fmt.Fprintln(pr.w, p.String())
		pr.last, pr.lastShown, pr.shown = now, p.Finished(), true
	}
}

// final displays the finished progress and ends the line.
func (pr *progressPrinter) final(p batch.Progress) {
	if pr.tty {
		fmt.Fprintf(pr.w, "\r%s %s\x1b[K\n", p.Bar(barWidth), p)
	} else {
		fmt.Fprintln(pr.w, p.String())
	}
	pr.open = false
}

// abort ends a half-drawn tty line so that an error starts on its own line.
func (pr *progressPrinter) abort() {
	if pr.open {
		fmt.Fprintln(pr.w)
		pr.open = false
	}
}
