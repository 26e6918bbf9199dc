package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/spf13/cobra"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/store/storeurl"
)

// submitConfig is one submission as the flags give it: the library's
// config and the one input file of --input.
type submitConfig struct {
	runs.SubmitConfig
	// Input is one input file (--input); a config's glob sets Files.
	Input string
}

// layoutHelp is submit's paragraph on how a run is recorded.
var layoutHelp = func() string {
	if runs.DefaultLayout == runs.LayoutRanges {
		return "A run with a --store is recorded as ranges of input chunks (one ledger record per chunk of\n" +
			"--chunk-items lines) unless --items is given, its input is referenced in place, or invalid\n" +
			"lines are recorded with --skip-invalid; a run without one is recorded as items (one per line).\n" +
			"A resubmitted run stays what it is.\n\n"
	}
	return "A run is recorded as items (one ledger record per line); with --ranges (and --store) as\n" +
		"ranges of input chunks (one ledger record per chunk of --chunk-items lines). A resubmitted run\n" +
		"stays what it is.\n\n"
}()

func (a *app) submitCmd() *cobra.Command {
	cfg := submitConfig{SubmitConfig: runs.DefaultSubmitConfig()}
	var coords []string
	var configPath string
	var wait bool
	var storeURL string
	var ranges, items bool
	interval := defaultPollInterval
	maxErrors := cfg.Read.MaxReportedErrors
	cmd := &cobra.Command{
		Use:   "submit --coord H:P[,...] (--config RUN.toml | --input FILE.jsonl --run NAME) [--wait]",
		Short: "Validate JSONL input and submit it as a run (idempotent: resubmitting resumes)",
		Long: "submit first validates every line of the input. A line is either {\"prompt\": ..., ...} (other\n" +
			"members are kept verbatim) or an OpenAI Batch request {\"custom_id\", \"method\": \"POST\",\n" +
			"\"url\": \"/v1/chat/completions\", \"/v1/completions\" or \"/v1/embeddings\", \"body\"}; blank lines\n" +
			"are skipped. If any line is invalid it prints each as FILE:LINE: reason and submits nothing,\n" +
			"unless --skip-invalid, which records each invalid line as a failed item with its reason. A line longer than the\n" +
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
			layoutHelp +
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
	addStoreFlag(cmd, &storeURL)
	rangesHelp, itemsHelp := "", " (the default)"
	if runs.DefaultLayout == runs.LayoutRanges {
		rangesHelp, itemsHelp = "; the default for a run with a store whose input is uploaded and valid", ""
	}
	f.BoolVar(&ranges, "ranges", false, "record the run as ranges of input chunks (one ledger record per chunk of --chunk-items lines, not one per line); needs --store, and workers that run ranges"+rangesHelp)
	f.BoolVar(&items, "items", false, "record the run as items (one ledger record per line), not as ranges of input chunks"+itemsHelp)
	f.DurationVar(&cfg.RetainAfter, "retain", 0, "delete the run (ledger records; objects stay until rollout delete) this long after it finishes, e.g. 720h (0: keep; run.toml's retain)")
	f.Uint32Var(&cfg.Priority, "priority", 0, "the run's priority, 1 (lowest) to 5 (highest): claims serve a higher priority first (0: run.toml's priority, else 3)")
	f.StringVar(&cfg.Tenant, "tenant", "", "submit the run for this tenant (needs an admin certificate; default: the certificate's name)")
	f.StringVar(&cfg.Cluster, "cluster", "", "where the run runs: local, or a peer cluster's name from the coordinators' --peers file (default: local when a live worker here serves the model, else the first peer that does; docs/FEDERATION.md)")
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
			if !cmd.Flags().Changed("retain") {
				cfg.RetainAfter = rc.Retain
			}
			if !cmd.Flags().Changed("store") && rc.Store != "" {
				storeURL = rc.Store
			}
			if !cmd.Flags().Changed("priority") {
				cfg.Priority = rc.Priority
			}
			if !cmd.Flags().Changed("tenant") {
				cfg.Tenant = rc.Tenant
			}
		}
		if cfg.Priority > batch.MaxPriority || cmd.Flags().Changed("priority") && cfg.Priority == 0 {
			return usagef("--priority must be 1 (lowest) to %d (highest), got %d", batch.MaxPriority, cfg.Priority)
		}
		if cfg.RetainAfter < 0 {
			return usagef("--retain must not be negative, got %v", cfg.RetainAfter)
		}
		if err := checkClusterFlag(cmd, cfg.Cluster); err != nil {
			return err
		}
		if su, key, ok := storeObjectURL(cfg.Input); ok && rc == nil {
			// An input already in a bucket is referenced where it is: the
			// bucket must be the run's store.
			switch {
			case storeURL == "":
				storeURL = su
			case storeURL != su:
				return usagef("--input %s is in %s, but the run's --store is %s: an input referenced where it is must be in the run's store",
					storeurl.Redact(cfg.Input), storeurl.Redact(su), storeurl.Redact(storeURL))
			}
			cfg.Input, cfg.InPlace = key, true
		}
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
		if storeURL, err = a.resolveStore(ctx, c, storeURL, cfg.Run); err != nil {
			return err
		}
		st, err := openStore(ctx, storeURL)
		if err != nil {
			return err
		}
		defer st.Close()
		cfg.Store = st
		if ranges && items {
			return usagef("--ranges and --items cannot be used together")
		}
		if items {
			cfg.Layout = runs.LayoutItems
		}
		if ranges {
			switch {
			case st == nil:
				return usagef("--ranges needs --store (a range's lines are read from its chunk in the run's store)")
			case cfg.InPlace:
				return usagef("--ranges cannot reference an input in a bucket where it is: ranges read their lines from range chunks")
			}
			cfg.Layout = runs.LayoutRanges
		}
		cfg.Chunks = func(uploaded, reused int, bytes int64) {
			fmt.Fprintf(a.stdout, "store %s: %d input chunk(s), %d uploaded, %d already there (%d bytes)\n",
				storeurl.Redact(st.URL()), uploaded+reused, uploaded, reused, bytes)
		}
		cfg.Timeout = a.timeout
		cfg.Identity = a.identity()
		if rc == nil {
			cfg.Files = []string{cfg.Input}
		}
		sp := newSubmitProgress(a.stderr, a.tty)
		cfg.Progress, cfg.Invalid = sp.show, a.stderr
		res, err := runs.Submit(ctx, c, cfg.SubmitConfig)
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
			expected := max(runs.Target(counters), res.Items)
			sum, err := runs.WriteDir(ctx, c, cfg.Run, rc.OutputDir, runs.ResultsConfig{Timeout: a.timeout, Store: st, Expected: expected,
				Model: cfg.Model, Sampling: &cfg.Sampling})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "wrote %s: %s\n", rc.OutputDir, sum)
			if err := incomplete(counters, expected, sum.Missing); err != nil {
				return err
			}
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

// waitRun waits for the run to finish (runs.Wait, a status read every
// interval), showing its progress with pr.
func waitRun(ctx context.Context, c coordinator, run string, timeout, interval time.Duration, pr *progressPrinter) (*rolloutv1.RunCounters, error) {
	meter := batch.NewProgressMeter(10 * time.Second)
	note := "" // the last note shown about why the run waits
	rc, err := runs.Wait(ctx, c, run, runs.WaitConfig{Interval: interval, Timeout: timeout,
		Progress: func(_ *rolloutv1.RunStatusResponse, rc *rolloutv1.RunCounters) error {
			n := ""
			if rc.GetUnservedModel() && !runs.Finished(rc) {
				n = "waiting: no live worker serves model " + rc.GetModel()
			}
			if n != note {
				note = n
				if n != "" {
					pr.note(n)
				}
			}
			p := meter.Observe(time.Now(), rc.GetDone(), rc.GetDead(), runs.Target(rc))
			if runs.Finished(rc) {
				pr.final(p)
			} else {
				pr.show(time.Now(), p)
			}
			return nil
		}})
	if err != nil {
		pr.abort()
	}
	return rc, err
}

// finishedRunError is nil for a run whose items are all done, else an error
// counting the dead ones.
func finishedRunError(rc *rolloutv1.RunCounters) error {
	if rc.GetDead() > 0 {
		return fmt.Errorf("run %q finished with %d dead item(s) of %d; 'rollout results' shows their errors",
			rc.GetName(), rc.GetDead(), runs.Target(rc))
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

// note prints a line of its own (a tty's progress line is redrawn after
// it).
func (pr *progressPrinter) note(s string) {
	pr.abort()
	fmt.Fprintln(pr.w, s)
}

// abort ends a half-drawn tty line so that an error starts on its own line.
func (pr *progressPrinter) abort() {
	if pr.open {
		fmt.Fprintln(pr.w)
		pr.open = false
	}
}

// localCluster is the value of --cluster that pins a run to the cluster it
// is submitted to (RunSpec.cluster "local").
const localCluster = "local"

// checkClusterFlag checks --cluster: "local" or a cluster name (a DNS
// label, mtls.CheckClusterName); given empty it is a usage error (leave the
// flag out to let the cluster decide).
func checkClusterFlag(cmd *cobra.Command, cluster string) error {
	if !cmd.Flags().Changed("cluster") || cluster == localCluster {
		return nil
	}
	if err := mtls.CheckClusterName(cluster); err != nil {
		return usagef("--cluster must be %s or a peer cluster's name: %v", localCluster, err)
	}
	return nil
}
