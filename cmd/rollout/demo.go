package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rollout/rollout/api/coordclient"
	"github.com/rollout/rollout/api/mtls"
	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/runs"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/cmd/procs"
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
	f := cmd.Flags()
	f.StringVar(&cfg.Bin, "bin", "", "directory holding rollout-coord and rollout-worker (default: this executable's directory)")
	f.StringVar(&cfg.Input, "input", cfg.Input, "JSONL input file")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "number of worker processes")
	f.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "items each worker runs at once")
	f.DurationVar(&cfg.MockLatency, "mock-latency", cfg.MockLatency, "latency of the mock backend per item")
	f.BoolVar(&cfg.Keep, "keep", cfg.Keep, "keep the temporary directory (data, logs, results)")
	f.BoolVar(&cfg.KillLeader, "kill-leader", cfg.KillLeader, "SIGKILL the leader when about a third of the items are done")
	f.BoolVar(&cfg.TLS, "tls", cfg.TLS, "run every edge over mutual TLS from a dev CA made in the demo directory (--tls=false: plaintext)")
	f.Float64Var(&cfg.KillAt, "kill-at", cfg.KillAt, "fraction of items finished when the leader is killed")
	f.DurationVar(&cfg.StartTimeout, "start-timeout", cfg.StartTimeout, "how long the cluster may take to come up")
	f.DurationVar(&cfg.RunTimeout, "run-timeout", cfg.RunTimeout, "how long the run may take")
	cmd.RunE = a.action(func(ctx context.Context, cmd *cobra.Command) error {
		if a.tls.Enabled() {
			return usagef("demo makes its own certificates (see --tls); --tls-ca/--tls-cert/--tls-key do not apply")
		}
		if cfg.Bin == "" {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding the directory of this executable (pass --bin): %w", err)
			}
			cfg.Bin = filepath.Dir(exe)
		}
		if err := cfg.check(); err != nil {
			return err
		}
		d := &demo{cfg: cfg, out: a.stdout, errOut: a.stderr, timeout: a.timeout, start: time.Now()}
		return d.run(ctx)
	})
	return cmd
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

// Supervisor tiers: workers stop before the replicas they talk to.
const (
	tierReplica = 0
	tierWorker  = 1
)

// replicaProc is one coordinator replica of the demo cluster.
type replicaProc struct {
	id, raftAddr, grpcAddr string
	proc                   *procs.Proc
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
	timeout     time.Duration
	start       time.Time

	dir      string
	sup      *procs.Supervisor
	replicas []*replicaProc
	probe    *prober
	tlsDir   string      // dev CA and certificates; "" without TLS
	cliTLS   *tls.Config // the demo's own client identity; nil without TLS
}

// say prints one line stamped with the time since the demo started.
func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "[%6.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// run is the whole demo; every child is stopped before it returns.
func (d *demo) run(ctx context.Context) (err error) {
	coordBin, workerBin, err := d.binaries()
	if err != nil {
		return err
	}
	items, err := d.validateInput(ctx)
	if err != nil {
		return err
	}
	if d.dir, err = os.MkdirTemp("", "rollout-demo-"); err != nil {
		return fmt.Errorf("creating the demo directory: %w", err)
	}
	logDir := filepath.Join(d.dir, "logs")
	d.sup = procs.New(logDir)
	defer func() { err = d.cleanup(err) }()
	if err := os.Mkdir(logDir, 0o755); err != nil {
		return fmt.Errorf("creating the log directory: %w", err)
	}
	if err := d.makeCerts(); err != nil {
		return err
	}
	d.probe = newProber(func(addr string) (*coordclient.Client, error) {
		cfg := coordclient.DefaultConfig()
		cfg.Addrs, cfg.CallTimeout, cfg.TLS = []string{addr}, 2*time.Second, d.cliTLS
		return coordclient.New(cfg)
	})

	d.say("demo directory %s", d.dir)
	if err := d.startCluster(ctx, coordBin); err != nil {
		return err
	}
	ccfg := coordclient.DefaultConfig()
	ccfg.Addrs = d.grpcAddrs()
	ccfg.CallTimeout = 3 * time.Second
	ccfg.TLS = d.cliTLS
	client, err := coordclient.New(ccfg)
	if err != nil {
		return err
	}
	defer client.Close()
	if err := d.startWorkers(workerBin); err != nil {
		return err
	}

	scfg := runs.DefaultSubmitConfig()
	scfg.Run, scfg.Files, scfg.Timeout, scfg.Invalid = d.cfg.Run, []string{d.cfg.Input}, d.timeout, d.errOut
	runStart := time.Now()
	res, err := runs.Submit(ctx, client, scfg)
	if err != nil {
		return err
	}
	d.say("submitted run %q: %s", d.cfg.Run, res)

	leaders, failover, err := d.watch(ctx, client, items)
	if err != nil {
		return err
	}
	elapsed := time.Since(runStart)

	resultsPath := filepath.Join(d.dir, "results.jsonl")
	sum, err := runs.WriteFile(ctx, client, d.cfg.Run, resultsPath, runs.ResultsConfig{Timeout: d.timeout})
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

	var chain []string
	for _, l := range leaders {
		chain = append(chain, l.String())
	}
	fmt.Fprintf(d.out, "\nPASS  %d items in %s (%.1f items/s); leaders %s", items,
		batch.FormatDuration(elapsed), float64(items)/elapsed.Seconds(), strings.Join(chain, " -> "))
	if failover > 0 {
		fmt.Fprintf(d.out, "; failover %s", batch.FormatDuration(failover))
	}
	fmt.Fprintln(d.out)
	return nil
}

// binaries finds rollout-coord and rollout-worker in --bin.
func (d *demo) binaries() (coord, worker string, err error) {
	find := func(name string) (string, error) {
		p := filepath.Join(d.cfg.Bin, name)
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return "", fmt.Errorf("--bin %s has no executable %s (build the binaries with: go build -o bin/ ./cmd/...)", d.cfg.Bin, name)
		}
		return p, nil
	}
	if coord, err = find("rollout-coord"); err != nil {
		return "", "", err
	}
	if worker, err = find("rollout-worker"); err != nil {
		return "", "", err
	}
	return coord, worker, nil
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
	if d.probe != nil {
		_ = d.probe.Close()
	}
	stopErr := d.sup.StopAll(d.cfg.Grace)
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

func (d *demo) printLogTails() {
	for _, p := range d.sup.Procs() {
		fmt.Fprintf(d.errOut, "---- %s (pid %d, %s): last lines of %s ----\n%s\n",
			p.Name, p.Pid(), p.State(), p.LogPath, p.TailLines(d.cfg.LogTail))
	}
}

func (d *demo) grpcAddrs() []string {
	var addrs []string
	for _, r := range d.replicas {
		addrs = append(addrs, r.grpcAddr)
	}
	return addrs
}

// startCluster starts c1 with --bootstrap, waits until it leads, then the
// others with --join, and waits until all are voters under one leader.
func (d *demo) startCluster(ctx context.Context, bin string) error {
	ports, err := procs.FreePorts(2 * d.cfg.Replicas)
	if err != nil {
		return err
	}
	for i := range d.cfg.Replicas {
		d.replicas = append(d.replicas, &replicaProc{
			id:       fmt.Sprintf("c%d", i+1),
			raftAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i])),
			grpcAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i+1])),
		})
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.StartTimeout)
	defer cancel()
	began := time.Now()
	first := d.replicas[0]
	for i, r := range d.replicas {
		args := []string{"--id", r.id, "--data", filepath.Join(d.dir, r.id),
			"--raft-addr", r.raftAddr, "--grpc-addr", r.grpcAddr}
		args = append(args, d.tlsArgs(r.id)...)
		if i == 0 {
			args = append(args, "--bootstrap")
		} else {
			args = append(args, "--join", first.grpcAddr)
		}
		if r.proc, err = d.sup.Start(r.id, tierReplica, append([]string{bin}, args...)...); err != nil {
			return err
		}
		d.say("started %s (pid %d): raft %s, grpc %s", r.id, r.proc.Pid(), r.raftAddr, r.grpcAddr)
		if i == 0 {
			if _, err := d.waitCluster(ctx, 1); err != nil {
				return fmt.Errorf("%s did not become leader: %w", r.id, err)
			}
			if err := d.waitServing(ctx, r.grpcAddr); err != nil {
				return fmt.Errorf("%s leads but does not serve: %w", r.id, err)
			}
		}
	}
	l, err := d.waitCluster(ctx, len(d.replicas))
	if err != nil {
		return fmt.Errorf("the cluster did not form: %w", err)
	}
	if err := d.waitServing(ctx, d.grpcAddrs()...); err != nil {
		return fmt.Errorf("the cluster's leader does not serve: %w", err)
	}
	d.say("cluster ready in %s: leader %s, %d voters", batch.FormatDuration(time.Since(began)), l, len(d.replicas))
	return nil
}

// waitCluster polls the started replicas until every one answers, all
// name the same leader, and that leader's view has n voters.
func (d *demo) waitCluster(ctx context.Context, n int) (leaderSeen, error) {
	var last string
	for {
		if p := d.sup.Unexpected(); p != nil {
			return leaderSeen{}, fmt.Errorf("%s exited: %v", p.Name, p.Err())
		}
		var addrs []string
		for _, r := range d.replicas {
			if r.proc != nil {
				addrs = append(addrs, r.grpcAddr)
			}
		}
		views := d.views(ctx, addrs)
		l, ok, why := clusterReady(views, n)
		if ok {
			return l, nil
		}
		last = why
		select {
		case <-ctx.Done():
			return leaderSeen{}, fmt.Errorf("%w (last: %s)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitServing polls RunStatus through addrs until a leader answers it (a
// leader serves only once its epoch entry has committed).
func (d *demo) waitServing(ctx context.Context, addrs ...string) error {
	cfg := coordclient.DefaultConfig()
	cfg.Addrs, cfg.CallTimeout, cfg.TLS = addrs, 2*time.Second, d.cliTLS
	c, err := coordclient.New(cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		if p := d.sup.Unexpected(); p != nil {
			return fmt.Errorf("%s exited: %v", p.Name, p.Err())
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.RunStatus(cctx, &rolloutv1.RunStatusRequest{})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %s)", ctx.Err(), shortErr(err))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// views asks the replicas at addrs, each bounded by a short timeout.
func (d *demo) views(ctx context.Context, addrs []string) []replicaView {
	vs := make([]replicaView, len(addrs))
	done := make(chan struct{})
	for i, a := range addrs {
		go func() {
			defer func() { done <- struct{}{} }()
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			resp, err := d.probe.ask(cctx, a)
			vs[i] = replicaView{Addr: a, Resp: resp, Err: err}
		}()
	}
	for range addrs {
		<-done
	}
	return vs
}

// clusterReady decides whether views show a formed cluster of n voters: all
// answered, all name one leader, and the leader lists n voters.
func clusterReady(views []replicaView, n int) (leaderSeen, bool, string) {
	var leader string
	for _, v := range views {
		if v.Err != nil {
			return leaderSeen{}, false, fmt.Sprintf("%s: %s", v.Addr, shortErr(v.Err))
		}
		id := v.Resp.GetHeader().GetLeaderId()
		if id == "" {
			return leaderSeen{}, false, fmt.Sprintf("%s knows no leader", v.Addr)
		}
		if leader != "" && id != leader {
			return leaderSeen{}, false, fmt.Sprintf("replicas disagree on the leader (%s, %s)", leader, id)
		}
		leader = id
	}
	best := authoritative(views)
	if best == nil || best.Resp.GetState() != rolloutv1.ReplicaState_REPLICA_STATE_LEADER {
		return leaderSeen{}, false, "no replica answers as leader"
	}
	if voters := coordclient.Voters(best.Resp); voters != n {
		return leaderSeen{}, false, fmt.Sprintf("%d of %d voters", voters, n)
	}
	return leaderSeen{id: best.Resp.GetHeader().GetReplicaId(), term: best.Resp.GetHeader().GetTerm()}, true, ""
}

// startWorkers starts the worker processes.
func (d *demo) startWorkers(bin string) error {
	coord := strings.Join(d.grpcAddrs(), ",")
	for i := range d.cfg.Workers {
		id := fmt.Sprintf("w%d", i+1)
		args := []string{"--id", id, "--coord", coord, "--backend", "mock",
			"--concurrency", strconv.Itoa(d.cfg.Concurrency), "--mock-latency", d.cfg.MockLatency.String()}
		p, err := d.sup.Start(id, tierWorker, append(append([]string{bin}, args...), d.tlsArgs(id)...)...)
		if err != nil {
			return err
		}
		d.say("started worker %s (pid %d): mock backend, concurrency %d, latency %v", id, p.Pid(), d.cfg.Concurrency, d.cfg.MockLatency)
	}
	return nil
}

// watch shows progress until the run finishes (runs.Wait), killing the
// leader once KillAt of the items are finished. It returns the leaders seen
// in order and the failover time (0 without a kill).
func (d *demo) watch(ctx context.Context, c coordinator, items uint64) ([]leaderSeen, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.RunTimeout)
	defer cancel()
	meter := batch.NewProgressMeter(3 * time.Second)
	var leaders []leaderSeen
	var killedAt time.Time
	var killedTerm uint64
	var failover time.Duration
	var lastPrint time.Time
	killed := !d.cfg.KillLeader
	progress := func(resp *rolloutv1.RunStatusResponse, rc *rolloutv1.RunCounters) error {
		if p := d.sup.Unexpected(); p != nil {
			return fmt.Errorf("%s exited unexpectedly: %v", p.Name, p.Err())
		}
		h := resp.GetHeader()
		l := leaderSeen{id: h.GetLeaderId(), term: h.GetTerm()}
		if l.id == "" {
			l.id = h.GetReplicaId()
		}
		if len(leaders) == 0 || leaders[len(leaders)-1] != l {
			leaders = append(leaders, l)
			if !killedAt.IsZero() && failover == 0 && l.term > killedTerm {
				failover = time.Since(killedAt)
				d.say("new leader %s at term %d, serving %s after the kill", l.id, l.term, batch.FormatDuration(failover))
			}
		}
		p := meter.Observe(time.Now(), rc.GetDone(), rc.GetDead(), runs.Target(rc))
		if runs.Finished(rc) {
			d.say("%s  leader %s", p, l)
			if !killed {
				d.say("note: the run finished before the leader could be killed (try a larger --mock-latency)")
			}
			return nil
		}
		if time.Since(lastPrint) >= time.Second {
			d.say("%s  leader %s", p, l)
			lastPrint = time.Now()
		}
		if !killed && float64(p.Finished()) >= d.cfg.KillAt*float64(items) {
			killed = true
			term, err := d.killLeader(ctx, p)
			if err != nil {
				return err
			}
			killedAt, killedTerm = time.Now(), term
		}
		return nil
	}
	_, err := runs.Wait(ctx, c, d.cfg.Run, runs.WaitConfig{Interval: 200 * time.Millisecond, Timeout: d.timeout, Progress: progress})
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, 0, fmt.Errorf("the run did not finish within --run-timeout %v", d.cfg.RunTimeout)
		}
		return nil, 0, err
	}
	return leaders, failover, nil
}

// killLeader finds the current leader by asking every live replica and
// SIGKILLs its process. It returns the term the leader led in.
func (d *demo) killLeader(ctx context.Context, p batch.Progress) (uint64, error) {
	var addrs []string
	for _, r := range d.replicas {
		if r.proc.Running() {
			addrs = append(addrs, r.grpcAddr)
		}
	}
	best := authoritative(d.views(ctx, addrs))
	if best == nil || best.Resp.GetState() != rolloutv1.ReplicaState_REPLICA_STATE_LEADER {
		return 0, errors.New("cannot find the leader to kill: no replica answers as leader")
	}
	id, term := best.Resp.GetHeader().GetReplicaId(), best.Resp.GetHeader().GetTerm()
	var victim *replicaProc
	for _, r := range d.replicas {
		if r.id == id {
			victim = r
		}
	}
	if victim == nil {
		return 0, fmt.Errorf("the leader %q is not one of the demo's replicas", id)
	}
	d.say("KILL  leader %s (pid %d, term %d) with SIGKILL at %d/%d finished", id, victim.proc.Pid(), term, p.Finished(), p.Total)
	if err := victim.proc.Kill(); err != nil {
		return 0, err
	}
	return term, nil
}

// makeCerts generates the demo's dev CA and a certificate per replica,
// worker and the CLI itself, when TLS is on.
func (d *demo) makeCerts() error {
	if !d.cfg.TLS {
		d.say("WARNING: plaintext (--tls=false): every process runs with --insecure, without authentication")
		return nil
	}
	names := []mtls.Cert{{Name: "cli", Role: mtls.RoleClient}}
	for i := range d.cfg.Replicas {
		names = append(names, mtls.Cert{Name: fmt.Sprintf("c%d", i+1), Role: mtls.RoleReplica})
	}
	for i := range d.cfg.Workers {
		names = append(names, mtls.Cert{Name: fmt.Sprintf("w%d", i+1), Role: mtls.RoleWorker})
	}
	d.tlsDir = filepath.Join(d.dir, "tls")
	if err := mtls.GenerateDevCA(d.tlsDir, names, 24*time.Hour); err != nil {
		return fmt.Errorf("generating the demo's certificates: %w", err)
	}
	conf, err := mtls.FilesFor(d.tlsDir, "cli").Load()
	if err != nil {
		return err
	}
	d.cliTLS = conf
	d.say("mutual TLS on every edge: dev CA and %d certificates in %s", len(names), d.tlsDir)
	return nil
}

// tlsArgs returns the --tls-* flags for the named process (--insecure
// without TLS).
func (d *demo) tlsArgs(name string) []string {
	if d.tlsDir == "" {
		return mtls.Files{}.Args()
	}
	return mtls.FilesFor(d.tlsDir, name).Args()
}
