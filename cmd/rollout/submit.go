package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/fsm"
)

// Submit defaults.
const (
	defaultChunkItems  = 1000
	defaultChunkBytes  = 1 << 20
	defaultMaxFailures = 3
)

// defaultStaleAfter is how long a Running item's owner may be silent before
// a resubmit re-enqueues it (the seed's DEFAULT_STALE_AFTER_MS).
const defaultStaleAfter = 5 * time.Minute

// submitConfig is one submission of input files as a run.
type submitConfig struct {
	Run string
	// Input is one input file (--input); Files, when set, are the input
	// files in index order (a config's glob) and Input is ignored.
	Input string
	Files []string
	// Model and Sampling are the run's model and sampling parameters: they
	// go into every sample id and the run's spec.
	Model    string
	Sampling batch.SamplingParams
	// SkipInvalid submits a run despite invalid lines, each recorded as a
	// failed item with its reason.
	SkipInvalid bool
	// StaleAfter re-enqueues Running items whose owner has been silent this
	// long (0: never).
	StaleAfter  time.Duration
	ChunkItems  int
	ChunkBytes  int
	MaxFailures uint32
	RetryDead   bool
	// Timeout bounds each SubmitItems call (with its retries).
	Timeout time.Duration
	// Coords are the addresses the limits may be asked at (after the
	// believed leader); empty asks only the believed leader.
	Coords []string
	Read   batch.Config
	// Progress, when set, is told after every chunk how many of the
	// input's items were sent.
	Progress func(sent, total uint64)
}

func defaultSubmitConfig() submitConfig {
	return submitConfig{
		Sampling:    batch.DefaultSamplingParams(),
		StaleAfter:  defaultStaleAfter,
		ChunkItems:  defaultChunkItems,
		ChunkBytes:  defaultChunkBytes,
		MaxFailures: defaultMaxFailures,
		RetryDead:   true,
		Timeout:     defaultTimeout,
		Read:        batch.DefaultConfig(),
	}
}

// files returns the input files in index order.
func (cfg *submitConfig) files() []string {
	if len(cfg.Files) > 0 {
		return cfg.Files
	}
	return []string{cfg.Input}
}

// submitResult sums the coordinator's answers over all chunks.
type submitResult struct {
	Items                                uint64
	Chunks                               int
	Created, AlreadyPending              uint64
	AlreadyRunning, AlreadyDone, Retried uint64
	Dead                                 uint64
	RependedStale, CreatedDead           uint64
}

func (r *submitResult) add(resp *rolloutv1.SubmitItemsResponse) {
	r.Created += uint64(resp.GetCreated())
	r.AlreadyPending += uint64(resp.GetAlreadyPending())
	r.AlreadyRunning += uint64(resp.GetAlreadyRunning())
	r.AlreadyDone += uint64(resp.GetAlreadyDone())
	r.Retried += uint64(resp.GetRetried())
	r.Dead += uint64(resp.GetDead())
	r.RependedStale += uint64(resp.GetRependedStale())
	r.CreatedDead += uint64(resp.GetCreatedDead())
}

// String says what happened, e.g. `1200 items to run "x" in 2 chunks:
// 1200 created`.
func (r *submitResult) String() string {
	var parts []string
	for _, c := range []struct {
		n    uint64
		what string
	}{
		{r.Created, "created"}, {r.CreatedDead, "recorded as failed (invalid lines)"},
		{r.AlreadyDone, "already done"}, {r.AlreadyRunning, "already running (live owner, left alone)"},
		{r.AlreadyPending, "already pending"}, {r.Retried, "failed re-enqueued"},
		{r.RependedStale, "running with a silent owner re-enqueued"}, {r.Dead, "left failed"},
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
	var configPath string
	var wait bool
	interval := defaultPollInterval
	maxErrors := cfg.Read.MaxReportedErrors
	cmd := &cobra.Command{
		Use:   "submit --coord H:P[,...] (--config RUN.toml | --input FILE.jsonl --run NAME) [--wait]",
		Short: "Validate JSONL input and submit it as a run (idempotent: resubmitting resumes)",
		Long: "submit first validates every line of the input. A line is either {\"prompt\": ..., ...} (other\n" +
			"members are kept verbatim) or an OpenAI Batch request {\"custom_id\", \"method\": \"POST\",\n" +
			"\"url\": \"/v1/chat/completions\" or \"/v1/completions\", \"body\"}; blank lines are skipped. If any\n" +
			"line is invalid it prints each as FILE:LINE: reason and submits nothing, unless --skip-invalid,\n" +
			"which records each invalid line as a failed item with its reason. A line longer than the\n" +
			"coordinator's per-item limit (it announces its limits; 1 MiB by default) is invalid, and an\n" +
			"input with no items is refused. Otherwise it streams the input to the coordinator in chunks\n" +
			"under its per-request limits, with progress.\n\n" +
			"--config RUN.toml names the model, the sampling parameters, the input files (a glob, read in\n" +
			"lexical order), the output directory and the run name (default: derived from the config).\n" +
			"--input FILE --run NAME submits one file with no model and the default sampling parameters.\n\n" +
			"Items are content-addressed (blake3 of the model, prompt, sampling parameters and input index),\n" +
			"so submitting the same input to the same run again resumes it, and says what it did: done items\n" +
			"are skipped, failed ones re-enqueued (--retry-dead), running ones left alone unless their worker\n" +
			"has been silent for --stale-after, in which case they are re-enqueued.\n\n" +
			"With --wait it shows progress until the run finishes; with --config it then writes the outputs\n" +
			"(results.jsonl, errors.jsonl) into the config's output directory.",
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	addCoordFlag(cmd, &coords)
	f.StringVar(&configPath, "config", "", "TOML run config: [model] uri, [sampling], [input] glob, [output] dir, [workers] count, name")
	f.StringVar(&cfg.Input, "input", "", "JSONL input file (instead of --config; needs --run)")
	f.StringVar(&cfg.Run, "run", "", "run name (required with --input; overrides the config's name)")
	f.BoolVar(&wait, "wait", false, "after submitting, show progress until the run finishes")
	f.DurationVar(&interval, "interval", interval, "with --wait: how often to poll progress")
	f.BoolVar(&cfg.SkipInvalid, "skip-invalid", false, "submit despite invalid lines, recording each as a failed item with its reason")
	f.IntVar(&maxErrors, "max-errors", maxErrors, "invalid lines listed at most (all are counted; 0 lists all)")
	f.DurationVar(&cfg.StaleAfter, "stale-after", cfg.StaleAfter, "when resubmitting, re-enqueue running items whose worker has been silent this long (0: never)")
	f.IntVar(&cfg.ChunkItems, "chunk-items", cfg.ChunkItems, "most items per SubmitItems call")
	f.IntVar(&cfg.ChunkBytes, "chunk-bytes", cfg.ChunkBytes, "most bytes per SubmitItems call, as encoded (the coordinator's max_request_bytes caps it too)")
	f.Uint32Var(&cfg.MaxFailures, "max-failures", cfg.MaxFailures, "failed attempts that make an item failed for good")
	f.BoolVar(&cfg.RetryDead, "retry-dead", cfg.RetryDead, "when resubmitting, give failed items new attempts")
	f.IntVar(&cfg.Read.MaxLineBytes, "max-line-bytes", cfg.Read.MaxLineBytes, "longest accepted input line")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		var rc *batch.RunConfig
		switch {
		case configPath != "" && cfg.Input != "":
			return usagef("--config and --input cannot be used together")
		case configPath != "":
			var err error
			if rc, err = loadRunConfig(configPath); err != nil {
				return err
			}
			if !cmd.Flags().Changed("run") {
				cfg.Run = rc.Name
			}
		case cfg.Input == "" || !cmd.Flags().Changed("run"):
			return usagef("submit needs --config RUN.toml, or --input FILE.jsonl with --run NAME")
		}
		if err := checkRunName(cfg.Run); err != nil {
			return err
		}
		if maxErrors < 0 {
			return usagef("--max-errors must not be negative, got %d", maxErrors)
		}
		cfg.Read.MaxReportedErrors = maxErrors
		if maxErrors == 0 {
			cfg.Read.MaxReportedErrors = math.MaxInt
		}
		if err := cfg.check(); err != nil {
			return err
		}
		if wait && interval <= 0 {
			return usagef("--interval must be positive, got %v", interval)
		}
		if rc != nil {
			files, err := batch.ExpandGlob(rc.InputGlob)
			if err != nil {
				return fmt.Errorf("%s: [input] glob: %w", rc.Path, err)
			}
			cfg.Files, cfg.Model, cfg.Sampling = files, rc.Model, rc.Sampling
		}
		cfg.Timeout = a.timeout
		addrs, err := parseCoords(coords)
		if err != nil {
			return err
		}
		cfg.Coords = addrs
		c, err := a.client(coords)
		if err != nil {
			return err
		}
		defer c.Close()
		sp := newSubmitProgress(a.stderr, a.tty)
		cfg.Progress = sp.show
		res, err := submitInput(ctx, c, cfg, a.stderr)
		sp.done()
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "submitted run %q: %s\n", cfg.Run, res)
		if rc != nil && rc.Workers > 1 {
			fmt.Fprintf(a.stdout, "the config plans %d workers ([workers] count); start them with rollout-worker\n", rc.Workers)
		}
		if !wait {
			return nil
		}
		pr := newProgressPrinter(a.stdout, a.tty, interval)
		counters, err := waitRun(ctx, c, cfg.Run, a.timeout, interval, pr)
		if err != nil {
			return err
		}
		if rc != nil {
			sum, err := writeOutputDir(ctx, c, cfg.Run, rc.OutputDir, defaultPageSize, a.timeout)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "wrote %s: %s\n", rc.OutputDir, sum)
		}
		return finishedRunError(counters)
	})
	return cmd
}

// loadRunConfig reads a run config, printing nothing: its errors name the
// file, line and key.
func loadRunConfig(path string) (*batch.RunConfig, error) {
	rc, err := batch.LoadRunConfig(path)
	if err != nil {
		if errors.Is(err, batch.ErrInvalidRunConfig) {
			return nil, fmt.Errorf("invalid run config (nothing was sent):\n%w", err)
		}
		return nil, err
	}
	return rc, nil
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
	case cfg.StaleAfter < 0:
		return usagef("--stale-after must not be negative, got %v", cfg.StaleAfter)
	}
	return nil
}

// submitInput first asks the cluster for the limits it accepts
// (clusterLimits) and checks the run name and spec against them. It then
// validates the input files completely, printing every invalid line (up to
// cfg.Read.MaxReportedErrors) to errOut as FILE:LINE: reason (a line over
// the per-item limit is invalid: "exceeds the per-item limit of N bytes"),
// and submits nothing if any line is invalid, unless cfg.SkipInvalid: then
// each invalid line becomes a failed item (dead_reason = FILE:LINE: reason,
// payload batch.InvalidPayload). An input with no items is an error.
// Otherwise it reads the files a second time and sends them in chunks of at
// most cfg.ChunkItems and max_items_per_request items and at most
// cfg.ChunkBytes and max_request_bytes bytes (as encoded), each checked with
// the coordinator's own validation (validate.Limits.CheckRequest) before it
// is sent. Every non-blank line takes the next index over the files in
// order; item id = batch.SampleID(cfg.Model, the request's SamplePrompt (the
// raw line for an invalid one), cfg.Sampling, index).
func submitInput(ctx context.Context, c coordinator, cfg submitConfig, errOut io.Writer) (*submitResult, error) {
	files := cfg.files()
	if err := cfg.Sampling.Validate(); err != nil {
		return nil, err
	}
	lim, err := clusterLimits(ctx, c, cfg.Coords, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	spec := &rolloutv1.RunSpec{MaxFailures: cfg.MaxFailures, Model: cfg.Model, Sampling: cfg.Sampling.JSON()}
	if err := lim.RunName(cfg.Run); err != nil {
		return nil, fmt.Errorf("%w; nothing was submitted", err)
	}
	if err := lim.Spec(spec); err != nil {
		return nil, fmt.Errorf("%w; nothing was submitted", err)
	}
	read := cfg.Read
	read.MaxItemBytes = lim.MaxPayloadBytes
	rep, err := batch.ValidateInputs(ctx, files, read)
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
		if !cfg.SkipInvalid || rep.Valid == 0 {
			return nil, fmt.Errorf("%w; nothing was submitted", rep.Err())
		}
		fmt.Fprintf(errOut, "--skip-invalid: the %d invalid line(s) are recorded as failed items\n", rep.Invalid)
	}
	spec.Total = rep.Records

	sc, err := batch.NewScanner(files, read)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	res := &submitResult{}
	maxItems := min(cfg.ChunkItems, lim.MaxItemsPerRequest)
	maxBytes := min(cfg.ChunkBytes, lim.MaxRequestBytes)
	req := &rolloutv1.SubmitItemsRequest{Run: cfg.Run, Spec: spec, RetryDead: cfg.RetryDead,
		StaleAfterMs: uint64(cfg.StaleAfter / time.Millisecond)}
	baseBytes := proto.Size(req)
	chunkBytes := baseBytes
	send := func() error {
		if len(req.Items) == 0 {
			return nil
		}
		first, last := req.Items[0].Index, req.Items[len(req.Items)-1].Index
		if err := lim.CheckRequest(req); err != nil {
			return fmt.Errorf("items %d..%d do not pass the coordinator's checks (input changed since it was validated?): %w", first, last, err)
		}
		resp, err := submitChunk(ctx, c, req, cfg.Timeout)
		if err != nil {
			what := fmt.Sprintf("submitting items %d..%d", first, last)
			if res.Chunks > 0 {
				what += fmt.Sprintf(" (the first %d items were submitted; submit again to resume)", res.Items)
			}
			return rpcError(what, cfg.Timeout, err)
		}
		res.add(resp)
		res.Chunks++
		res.Items += uint64(len(req.Items))
		req.Items, chunkBytes = nil, baseBytes
		if cfg.Progress != nil {
			cfg.Progress(res.Items, rep.Records)
		}
		return nil
	}
	for {
		rec, err := sc.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("input changed since it was validated: %w", err)
		}
		it := &rolloutv1.SubmitItem{Index: rec.Index, Payload: rec.Raw}
		prompt := rec.Request.SamplePrompt
		if rec.Err != nil {
			if !cfg.SkipInvalid {
				return nil, fmt.Errorf("input changed since it was validated: %w", rec.Err)
			}
			prompt = string(rec.Raw)
			it.Payload, it.DeadReason = batch.InvalidPayload(rec), fsm.CleanText(rec.Err.Error(), maxDeadReason)
		}
		id := batch.SampleID(cfg.Model, prompt, cfg.Sampling, rec.Index)
		it.Id = id[:]
		// The exact bytes the item adds to the request: its tag, length and
		// message (field 3 of SubmitItemsRequest).
		size := protowire.SizeTag(3) + protowire.SizeBytes(proto.Size(it))
		if len(req.Items) > 0 && (len(req.Items) >= maxItems || chunkBytes+size > maxBytes) {
			if err := send(); err != nil {
				return nil, err
			}
		}
		req.Items = append(req.Items, it)
		chunkBytes += size
	}
	if err := send(); err != nil {
		return nil, err
	}
	if res.Items != rep.Records {
		return nil, fmt.Errorf("input changed since it was validated: %d items then, %d now", rep.Records, res.Items)
	}
	return res, nil
}

// submitChunk sends one SubmitItems request. A coordinator too busy to take
// it now (RESOURCE_EXHAUSTED: its in-flight request budget is full; the
// request changed nothing) is asked again with backoff until timeout.
func submitChunk(ctx context.Context, c coordinator, req *rolloutv1.SubmitItemsRequest, timeout time.Duration) (*rolloutv1.SubmitItemsResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	backoff := 50 * time.Millisecond
	for {
		resp, err := c.SubmitItems(cctx, req)
		if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "coordinator busy") {
			return resp, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-cctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last answer: %w)", cctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// clusterLimits asks the cluster for the limits it accepts (Cluster's
// limits): the believed leader first, then each of coords, until one
// answers. A coordinator that announces none gets validate.DefaultLimits.
// Nothing is created before this succeeds.
func clusterLimits(ctx context.Context, c coordinator, coords []string, timeout time.Duration) (validate.Limits, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lastErr error
	for _, addr := range append([]string{""}, coords...) {
		resp, err := c.Cluster(cctx, addr)
		if err != nil {
			lastErr = err
			continue
		}
		lim, err := validate.FromProto(resp.GetLimits())
		if err != nil {
			return validate.Limits{}, fmt.Errorf("the coordinator announced unusable limits: %w", err)
		}
		return lim, nil
	}
	return validate.Limits{}, rpcError("asking the cluster for its limits (nothing was submitted)", timeout, lastErr)
}

// submitProgress shows how much of the input was sent: on a terminal one
// line redrawn in place, otherwise a plain line at most every
// submitProgressEvery. Short submissions (one chunk) show nothing.
type submitProgress struct {
	w      io.Writer
	tty    bool
	start  time.Time
	last   time.Time
	chunks int
	open   bool
}

const submitProgressEvery = 2 * time.Second

func newSubmitProgress(w io.Writer, tty bool) *submitProgress {
	now := time.Now()
	return &submitProgress{w: w, tty: tty, start: now, last: now}
}

func (p *submitProgress) show(sent, total uint64) {
	p.chunks++
	if p.chunks == 1 && sent >= total {
		return
	}
	now := time.Now()
	rate := float64(sent) / max(now.Sub(p.start).Seconds(), 1e-3)
	line := fmt.Sprintf("submitting: %d/%d items (%.1f%%)  %.0f items/s", sent, total, 100*float64(sent)/float64(max(total, 1)), rate)
	switch {
	case p.tty:
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
		p.open = true
	case now.Sub(p.last) >= submitProgressEvery || sent >= total:
		fmt.Fprintln(p.w, line)
		p.last = now
	}
}

// done ends a half-drawn terminal line.
func (p *submitProgress) done() {
	if p.open {
		fmt.Fprintln(p.w)
		p.open = false
	}
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

// maxDeadReason bounds the reason sent for an invalid line (the ledger takes
// up to 4 KiB; a long file path must not push it over).
const maxDeadReason = 1024
