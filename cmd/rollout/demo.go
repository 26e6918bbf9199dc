package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/internal/procs"
	"github.com/rollout/rollout/store"
)

// demoConfig configures `rollout demo`.
type demoConfig struct {
	Bin, Input  string
	Run         string
	Replicas    int
	Workers     int
	Concurrency int
	MockLatency time.Duration
	Keep        bool
	KillLeader  bool
	// TLS runs every edge (CLI, workers, Raft) over mutual TLS from a dev
	// CA generated in the demo directory.
	TLS bool
	// KillAt is the fraction of items finished when the leader is killed.
	KillAt float64
	// StartTimeout bounds bringing the cluster up; RunTimeout the run.
	StartTimeout, RunTimeout time.Duration
	// Grace is how long children get between SIGTERM and SIGKILL.
	Grace time.Duration
	// LogTail is how many lines of each log a failure prints.
	LogTail int
	// Dashboards serves every replica's web dashboard on a free loopback
	// port and prints the addresses.
	Dashboards bool
	// Pause waits for Enter before the run starts and after it finished,
	// so that a dashboard can be opened and looked at.
	Pause bool
}

func defaultDemoConfig() demoConfig {
	return demoConfig{
		Input:        filepath.Join("examples", "prompts.jsonl"),
		Run:          "demo",
		Replicas:     3,
		Workers:      3,
		Concurrency:  4,
		MockLatency:  100 * time.Millisecond,
		KillLeader:   true,
		TLS:          true,
		KillAt:       1.0 / 3,
		StartTimeout: 60 * time.Second,
		RunTimeout:   3 * time.Minute,
		Grace:        5 * time.Second,
		LogTail:      15,
		Dashboards:   true,
	}
}

func (a *app) demoCmd() *cobra.Command {
	cfg := defaultDemoConfig()
	cmd := &cobra.Command{
		Use:   "demo [--bin DIR] [--input FILE] [--workers 3]",
		Short: "Run a local 3-replica cluster and workers on a batch, kill the leader part-way, verify the output",
		Long: "demo starts real rollout-coord and rollout-worker processes from --bin in a fresh temporary\n" +
			"directory (free loopback ports, logs in DIR/logs), submits --input, SIGKILLs the Raft leader\n" +
			"when about a third of the items are done, waits for the run to finish under the new leader,\n" +
			"writes DIR/results.jsonl and verifies it: one line per input line, in input order, each with\n" +
			"completion \"MOCK:<prompt>\", no duplicates, none missing. Every child is stopped on every\n" +
			"exit path. The exit status is 0 only when the verification passed.",
		Args: cobra.NoArgs,
	}
	cfg.clusterFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&cfg.Input, "input", cfg.Input, "JSONL input file")
	f.DurationVar(&cfg.MockLatency, "mock-latency", cfg.MockLatency, "latency of the mock backend per item")
	f.BoolVar(&cfg.Keep, "keep", cfg.Keep, "keep the temporary directory (data, logs, results)")
	f.BoolVar(&cfg.KillLeader, "kill-leader", cfg.KillLeader, "SIGKILL the leader when about a third of the items are done")
	f.Float64Var(&cfg.KillAt, "kill-at", cfg.KillAt, "fraction of items finished when the leader is killed")
	f.BoolVar(&cfg.Dashboards, "dashboard", cfg.Dashboards, "serve each replica's read-only web dashboard on a free loopback port and print the addresses")
	f.BoolVar(&cfg.Pause, "pause", false, "with --dashboard: wait for Enter before the run starts and after it finished (default: when stdin and stdout are terminals)")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		if err := a.demoBin("demo", &cfg); err != nil {
			return err
		}
		if err := cfg.check(); err != nil {
			return err
		}
		if !cmd.Flags().Changed("pause") {
			cfg.Pause = a.tty && stdinIsTerminal()
		}
		d := &demo{cfg: cfg, out: a.stdout, errOut: a.stderr, in: os.Stdin, timeout: a.timeout, start: time.Now()}
		return d.run(ctx)
	})
	return cmd
}

// clusterFlags defines the flags both demos take for their cluster and
// workers: --bin, --workers, --concurrency, --tls, --start-timeout and
// --run-timeout.
func (cfg *demoConfig) clusterFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&cfg.Bin, "bin", "", "directory holding rollout-coord and rollout-worker (default: this executable's directory)")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "number of worker processes")
	f.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "items each worker runs at once")
	f.BoolVar(&cfg.TLS, "tls", cfg.TLS, "run every edge over mutual TLS from a dev CA made in the demo directory (--tls=false: plaintext)")
	f.DurationVar(&cfg.StartTimeout, "start-timeout", cfg.StartTimeout, "how long the cluster may take to come up")
	f.DurationVar(&cfg.RunTimeout, "run-timeout", cfg.RunTimeout, "how long the run may take")
}

// demoBin refuses the global certificate flags (a demo makes its own) and
// defaults --bin to this executable's directory. name is the command.
func (a *app) demoBin(name string, cfg *demoConfig) error {
	if a.tls.Enabled() {
		return usagef("%s makes its own certificates (see --tls); --tls-ca/--tls-cert/--tls-key do not apply", name)
	}
	if cfg.Bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding the directory of this executable (pass --bin): %w", err)
		}
		cfg.Bin = filepath.Dir(exe)
	}
	return nil
}

// check validates flag values.
func (cfg *demoConfig) check() error {
	switch {
	case cfg.Input == "":
		return usagef("--input must name a JSONL file")
	case cfg.Workers < 1:
		return usagef("--workers must be at least 1, got %d", cfg.Workers)
	case cfg.Concurrency < 1:
		return usagef("--concurrency must be at least 1, got %d", cfg.Concurrency)
	case cfg.MockLatency < 0:
		return usagef("--mock-latency must not be negative, got %v", cfg.MockLatency)
	case !(cfg.KillAt > 0 && cfg.KillAt < 1):
		return usagef("--kill-at must be between 0 and 1 (exclusive), got %v", cfg.KillAt)
	case cfg.StartTimeout <= 0 || cfg.RunTimeout <= 0:
		return usagef("--start-timeout and --run-timeout must be positive")
	}
	return nil
}

// leaderSeen is a leader and the term it led in, as seen in replies.
type leaderSeen struct {
	id   string
	term uint64
}

func (l leaderSeen) String() string { return fmt.Sprintf("%s@%d", l.id, l.term) }

// demo is one run of `rollout demo`.
type demo struct {
	cfg         demoConfig
	out, errOut io.Writer
	in          io.Reader // Enter, with --pause
	timeout     time.Duration
	start       time.Time

	dir    string
	cl     *localcluster.Cluster // nil until the cluster formed
	cliTLS *tls.Config           // the demo's own client identity; nil without TLS
}

// say prints one line stamped with the time since the demo started.
func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "[%6.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// run is the whole demo; every child is stopped before it returns.
func (d *demo) run(ctx context.Context) error {
	if err := d.binaries(); err != nil {
		return err
	}
	items, err := d.validateInput(ctx)
	if err != nil {
		return err
	}
	intro := func() {
		if d.cfg.TLS {
			d.say("mutual TLS on every edge: dev CA and %d certificates in %s",
				1+d.cfg.Replicas+d.cfg.Workers, filepath.Join(d.dir, "tls"))
		} else {
			d.say("WARNING: plaintext (--tls=false): every process runs with --insecure, without authentication")
		}
		d.say("demo directory %s", d.dir)
	}
	return d.supervise(ctx, "rollout-demo-", intro, d.startWorkers, func(ctx context.Context, client *coordclient.Client, st *store.Store) error {
		return d.batch(ctx, client, st, items)
	})
}

// supervise is what both demos do around their run: it makes the demo
// directory (named prefix*), calls intro, starts the cluster and then the
// workers (startWorkers), opens a client and the object store, waits for
// Enter with --pause, and calls body. On every exit path it closes the
// store and the client, stops every child, prints the log tails on failure
// and removes or keeps the directory (cleanup); it returns body's error, or
// the first of its own.
func (d *demo) supervise(ctx context.Context, prefix string, intro func(), startWorkers func() error,
	body func(ctx context.Context, client *coordclient.Client, st *store.Store) error) (err error) {
	if d.dir, err = os.MkdirTemp("", prefix); err != nil {
		return fmt.Errorf("creating the demo directory: %w", err)
	}
	defer func() { err = d.cleanup(err) }()
	intro()
	if err := d.startCluster(ctx); err != nil {
		return err
	}
	ccfg := coordclient.DefaultConfig()
	ccfg.Addrs = d.cl.GRPCAddrs()
	ccfg.CallTimeout = 3 * time.Second
	ccfg.TLS = d.cliTLS
	client, err := coordclient.New(ccfg)
	if err != nil {
		return err
	}
	defer client.Close()
	if err := startWorkers(); err != nil {
		return err
	}
	if err := d.pause(ctx, "open a dashboard above, then press Enter to start the run"); err != nil {
		return err
	}
	st, err := d.openStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	return body(ctx, client, st)
}

// batch submits the input, kills the leader part-way, writes the results
// and verifies them.
func (d *demo) batch(ctx context.Context, client *coordclient.Client, st *store.Store, items uint64) error {
	scfg := runs.DefaultSubmitConfig()
	scfg.Run, scfg.Files, scfg.Timeout, scfg.Invalid = d.cfg.Run, []string{d.cfg.Input}, d.timeout, d.errOut
	scfg.Store = st
	runStart := time.Now()
	res, err := runs.Submit(ctx, client, scfg)
	if err != nil {
		return err
	}
	d.say("submitted run %q: %s", d.cfg.Run, res)

	lk, err := d.watch(ctx, client, items)
	if err != nil {
		return err
	}
	elapsed := time.Since(runStart)

	resultsPath := filepath.Join(d.dir, "results.jsonl")
	sum, err := runs.WriteFile(ctx, client, d.cfg.Run, resultsPath, runs.ResultsConfig{Timeout: d.timeout, Store: st})
	if err != nil {
		return err
	}
	d.say("wrote %s: %s", resultsPath, sum)
	n, problems, err := verifyDemoResults(d.cfg.Input, resultsPath, batch.DefaultConfig())
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(d.errOut, "  "+p)
		}
		return fmt.Errorf("verification FAILED: %d problem(s) in %s (shown above)", len(problems), resultsPath)
	}
	d.say("verified %d/%d output lines: in input order, completion == \"MOCK:\"+prompt, input fields kept, no duplicates, none missing", n, items)

	fmt.Fprintf(d.out, "\nPASS  %d items in %s (%.1f items/s); %s\n", items,
		batch.FormatDuration(elapsed), float64(items)/elapsed.Seconds(), lk.summary())
	return d.pause(ctx, "the cluster is still up for the dashboards; press Enter to stop it")
}

// showDashboards prints the replicas' dashboard addresses.
func (d *demo) showDashboards() {
	if !d.cfg.Dashboards {
		return
	}
	d.say("web dashboards (read-only, live; any replica shows the whole cluster):")
	for _, r := range d.cl.Replicas {
		fmt.Fprintf(d.out, "          %s  %s\n", r.ID, r.DashboardURL())
	}
	if d.cfg.TLS {
		fmt.Fprintf(d.out, "          they serve HTTPS with the demo's own dev CA (%s), which your browser does not know:\n"+
			"          accept its warning, or run the demo with --tls=false for plain HTTP on loopback\n", filepath.Join(d.dir, "tls", "ca.pem"))
	}
	if !d.cfg.Pause {
		fmt.Fprintln(d.out, "          (--pause waits for Enter before and after the run, to give you time to look)")
	}
}

// pause waits for Enter with --pause and dashboards on; ctx ending (Ctrl-C)
// ends the wait with ctx's error.
func (d *demo) pause(ctx context.Context, prompt string) error {
	if !d.cfg.Pause || !d.cfg.Dashboards {
		return nil
	}
	d.say("%s", prompt)
	got := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(d.in).ReadString('\n')
		close(got)
	}()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-got:
		return nil
	}
}

// stdinIsTerminal reports whether standard input is a terminal.
func stdinIsTerminal() bool { return isatty.IsTerminal(os.Stdin.Fd()) }

// binaries checks that --bin holds executable rollout-coord and
// rollout-worker.
func (d *demo) binaries() error {
	for _, name := range []string{"rollout-coord", "rollout-worker"} {
		fi, err := os.Stat(filepath.Join(d.cfg.Bin, name))
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("--bin %s has no executable %s (build the binaries with: go build -o bin/ ./cmd/...)", d.cfg.Bin, name)
		}
	}
	return nil
}

// validateInput runs the submit validation up front so that nothing starts
// on bad input.
func (d *demo) validateInput(ctx context.Context) (uint64, error) {
	f, err := os.Open(d.cfg.Input)
	if err != nil {
		return 0, fmt.Errorf("input: %w", err)
	}
	defer f.Close()
	rep, err := batch.ValidateInput(ctx, f, d.cfg.Input, batch.DefaultConfig())
	if err != nil {
		return 0, fmt.Errorf("validating input: %w", err)
	}
	if !rep.OK() {
		for _, e := range rep.Errors {
			fmt.Fprintln(d.errOut, e.Error())
		}
		if n := rep.Omitted(); n > 0 {
			fmt.Fprintf(d.errOut, "... and %d more invalid lines\n", n)
		}
		return 0, rep.Err()
	}
	return rep.Items, nil
}

// cleanup stops every child, prints the log tails on failure, and removes
// the demo directory unless it is kept (--keep, or a failure other than an
// interruption).
func (d *demo) cleanup(runErr error) error {
	var stopErr error
	if d.cl != nil {
		stopErr = d.cl.Shutdown(d.cfg.Grace)
	}
	if stopErr != nil {
		fmt.Fprintf(d.errOut, "rollout: stopping children: %v\n", stopErr)
		if runErr == nil {
			runErr = stopErr
		}
	}
	interrupted := errors.Is(runErr, context.Canceled)
	if runErr != nil && !interrupted {
		d.printLogTails()
	}
	switch {
	case (runErr != nil && !interrupted) || d.cfg.Keep:
		fmt.Fprintf(d.out, "kept %s (logs in %s)\n", d.dir, filepath.Join(d.dir, "logs"))
	default:
		if err := os.RemoveAll(d.dir); err != nil {
			fmt.Fprintf(d.errOut, "rollout: removing %s: %v\n", d.dir, err)
		} else if runErr == nil {
			fmt.Fprintf(d.out, "removed %s (--keep keeps it)\n", d.dir)
		}
	}
	return runErr
}

// printLogTails prints the last lines of every child's log; when the
// cluster never formed (localcluster.Start stopped it) the logs are read
// from the demo directory.
func (d *demo) printLogTails() {
	if d.cl != nil {
		for _, p := range d.cl.Procs() {
			fmt.Fprintf(d.errOut, "---- %s (pid %d, %s): last lines of %s ----\n%s\n",
				p.Name, p.Pid(), p.State(), p.LogPath, p.TailLines(d.cfg.LogTail))
		}
		return
	}
	logs, _ := filepath.Glob(filepath.Join(d.dir, "logs", "*.log"))
	for _, path := range logs {
		fmt.Fprintf(d.errOut, "---- %s: last lines of %s ----\n%s\n",
			strings.TrimSuffix(filepath.Base(path), ".log"), path, procs.TailLines(path, d.cfg.LogTail))
	}
}

// startCluster starts the replicas (c1 bootstraps, the others join) and
// waits until all are voters under a serving leader (localcluster.Start).
func (d *demo) startCluster(ctx context.Context) error {
	began := time.Now()
	cl, err := localcluster.Start(ctx, localcluster.Config{
		BinDir:       d.cfg.Bin,
		Dir:          d.dir,
		Replicas:     d.cfg.Replicas,
		TLS:          d.cfg.TLS,
		CertWorkers:  d.cfg.Workers,
		NoAdminCert:  true,
		StartTimeout: d.cfg.StartTimeout,
		Dashboards:   d.cfg.Dashboards,
		Started: func(r *localcluster.Replica) {
			d.say("started %s (pid %d): raft %s, grpc %s", r.ID, r.Pid(), r.RaftAddr, r.GRPCAddr)
		},
	})
	if err != nil {
		return fmt.Errorf("the cluster did not form: %w", err)
	}
	d.cl = cl
	if d.cliTLS, err = cl.TLSConfig("cli"); err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, d.cfg.StartTimeout)
	defer cancel()
	r, term, err := cl.WaitLeader(lctx)
	if err != nil {
		return fmt.Errorf("the cluster did not form: %w", err)
	}
	d.say("cluster ready in %s: leader %s, %d voters", batch.FormatDuration(time.Since(began)), leaderSeen{id: r.ID, term: term}, d.cfg.Replicas)
	d.showDashboards()
	return nil
}

// startWorkers starts the worker processes.
func (d *demo) startWorkers() error {
	for i := range d.cfg.Workers {
		id := fmt.Sprintf("w%d", i+1)
		w, err := d.cl.StartWorker(id, "--backend", "mock",
			"--concurrency", strconv.Itoa(d.cfg.Concurrency), "--mock-latency", d.cfg.MockLatency.String())
		if err != nil {
			return err
		}
		d.say("started worker %s (pid %d): mock backend, concurrency %d, latency %v", id, w.Pid(), d.cfg.Concurrency, d.cfg.MockLatency)
	}
	return nil
}

// watch shows progress until the run finishes (runs.Wait), killing the
// leader once KillAt of the items are finished. It returns the leaders seen
// and the failover.
func (d *demo) watch(ctx context.Context, c coordinator, items uint64) (*leaderKill, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.RunTimeout)
	defer cancel()
	meter := batch.NewProgressMeter(3 * time.Second)
	lk := d.leaderKill()
	var lastPrint time.Time
	progress := func(resp *rolloutv1.RunStatusResponse, rc *rolloutv1.RunCounters) error {
		l, err := lk.observe(resp)
		if err != nil {
			return err
		}
		p := meter.Observe(time.Now(), rc.GetDone(), rc.GetDead(), runs.Target(rc))
		if runs.Finished(rc) {
			d.say("%s  leader %s", p, l)
			if !lk.killed {
				d.say("note: the run finished before the leader could be killed (try a larger --mock-latency)")
			}
			return nil
		}
		if time.Since(lastPrint) >= time.Second {
			d.say("%s  leader %s", p, l)
			lastPrint = time.Now()
		}
		if !lk.killed && float64(p.Finished()) >= d.cfg.KillAt*float64(items) {
			return lk.kill(ctx, fmt.Sprintf("%d/%d finished", p.Finished(), p.Total))
		}
		return nil
	}
	_, err := runs.Wait(ctx, c, d.cfg.Run, runs.WaitConfig{Interval: 200 * time.Millisecond, Timeout: d.timeout, Progress: progress})
	if err != nil {
		return nil, d.runTimeout(ctx, err)
	}
	return lk, nil
}

// runTimeout names --run-timeout when the run's ctx (bounded by it) ran
// out, and returns err otherwise.
func (d *demo) runTimeout(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("the run did not finish within --run-timeout %v", d.cfg.RunTimeout)
	}
	return err
}

// leaderKill follows the Raft leader through a run's status replies and
// SIGKILLs it once, part-way through the run (with --kill-leader).
type leaderKill struct {
	d       *demo
	leaders []leaderSeen // in the order seen
	// killed is set once the leader was killed, or from the start without
	// --kill-leader.
	killed     bool
	killedAt   time.Time
	killedTerm uint64
	failover   time.Duration // from the kill to a new leader serving; 0 before
}

// leaderKill returns a leaderKill for this demo's cluster.
func (d *demo) leaderKill() *leaderKill { return &leaderKill{d: d, killed: !d.cfg.KillLeader} }

// observe fails when a child exited unexpectedly, else records the leader
// resp names (saying when a new one serves after the kill) and returns it.
func (k *leaderKill) observe(resp *rolloutv1.RunStatusResponse) (leaderSeen, error) {
	if p := k.d.cl.Unexpected(); p != nil {
		return leaderSeen{}, fmt.Errorf("%s exited unexpectedly: %v", p.Name, p.Err())
	}
	h := resp.GetHeader()
	l := leaderSeen{id: h.GetLeaderId(), term: h.GetTerm()}
	if l.id == "" {
		l.id = h.GetReplicaId()
	}
	if len(k.leaders) == 0 || k.leaders[len(k.leaders)-1] != l {
		k.leaders = append(k.leaders, l)
		if !k.killedAt.IsZero() && k.failover == 0 && l.term > k.killedTerm {
			k.failover = time.Since(k.killedAt)
			k.d.say("new leader %s at term %d, serving %s after the kill", l.id, l.term, batch.FormatDuration(k.failover))
		}
	}
	return l, nil
}

// kill finds the current serving leader (localcluster.WaitLeader, bounded
// by a few seconds) and SIGKILLs its process, saying so with where the run
// stands (at, "3/9 finished"). It is done once, even when it fails.
func (k *leaderKill) kill(ctx context.Context, at string) error {
	k.killed = true
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	victim, term, err := k.d.cl.WaitLeader(lctx)
	if err != nil {
		return fmt.Errorf("cannot find the leader to kill: %w", err)
	}
	k.d.say("KILL  leader %s (pid %d, term %d) with SIGKILL at %s", victim.ID, victim.Pid(), term, at)
	if err := victim.Kill(); err != nil {
		return err
	}
	k.killedAt, k.killedTerm = time.Now(), term
	return nil
}

// summary is "leaders c1@2 -> c2@3", with "; failover 1.2s" after a kill
// that a new leader followed.
func (k *leaderKill) summary() string {
	var chain []string
	for _, l := range k.leaders {
		chain = append(chain, l.String())
	}
	s := "leaders " + strings.Join(chain, " -> ")
	if k.failover > 0 {
		s += "; failover " + batch.FormatDuration(k.failover)
	}
	return s
}

// openStore opens the demo's object store: a directory in the demo's
// directory (file://), which the demo's workers on this machine read and
// write. It says where it is.
func (d *demo) openStore(ctx context.Context) (*store.Store, error) {
	dir := filepath.Join(d.dir, "store")
	st, err := store.Open(ctx, "file://"+filepath.ToSlash(dir), store.DefaultOptions())
	if err != nil {
		return nil, err
	}
	d.say("object store %s (inputs and results live there; the ledger holds references)", st.URL())
	return st, nil
}
