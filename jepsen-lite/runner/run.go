package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/localcluster"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/jepsen-lite/checker"
	"github.com/rollout/rollout/jepsen-lite/flood"
	"github.com/rollout/rollout/jepsen-lite/history"
	"github.com/rollout/rollout/jepsen-lite/nemesis"
	"github.com/rollout/rollout/jepsen-lite/network"
	"github.com/rollout/rollout/jepsen-lite/report"
	"github.com/rollout/rollout/jepsen-lite/workload"
)

// Result is a finished run: the report's summary and the checkers' result.
type Result struct {
	Summary report.Summary
	Check   checker.Result
}

// Passed reports whether every check passed.
func (r *Result) Passed() bool { return r.Check.OK() }

// fabric is what the harness needs of a network: network.NetNS and
// network.Proxy.
type fabric interface {
	localcluster.Placement
	Mode() network.Mode
	Cut(ctx context.Context, links []network.Link) error
	Heal(ctx context.Context) error
	Close() error
}

var (
	_ fabric = (*network.NetNS)(nil)
	_ fabric = (*network.Proxy)(nil)
)

// harness is one run's state.
type harness struct {
	cfg   Config
	log   hclog.Logger
	start int64
	raw   string
	shape shape

	net fabric
	c   *localcluster.Cluster
	w   *watcher
	inj *nemesis.Injector

	mu      sync.Mutex
	writers []*history.Writer
	clients []*coordclient.Client
	notes   []string

	plan      []nemesis.Step
	totals    map[string]uint64
	lastHeal  int64
	completed int64
	final     []history.Item
	finalRaw  map[string][]*rolloutv1.ResultItem
	storeIn   checker.StoreInput
	rangeIn   []checker.RangeRun // the range runs read back (range-results)
	finalErr  string
	stores    *runStores     // chaos and straggler: the runs' object stores
	attacks   int            // hostile operations recorded
	floods    flood.Stats    // every flood's figures, summed
	certs     *certifier     // the certs nemesis
	sources   []*mtls.Source // the TLS files of the harness's clients
	impostors int            // impostor certificates issued (the hostile nemesis)
	// tenants are the chaos runs' tenants (Config.Tenants); tenantsSeen
	// what RunStatus said of them at the end (tenantsSeenErr: why not).
	fed            *fedState // the federation scenario's parent and findings
	tenants        map[string]workload.RunTenant
	tenantsSeen    map[string]checker.TenantSeen
	tenantsSeenErr string
}

func (h *harness) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	h.log.Info(msg)
	h.mu.Lock()
	h.notes = append(h.notes, msg)
	h.mu.Unlock()
}

// Run runs the scenario of cfg and writes the report into cfg.OutDir. An
// error means the harness itself could not run (it wraps ErrHarness or
// ErrInconclusive, or is an invalid config); a violation found in the system
// is a Result that did not pass. The report is written in both cases when
// the run got far enough to have a history.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	h := &harness{cfg: cfg, log: cfg.Logger.Named("jepsen-lite"), shape: cfg.shape()}
	if err := h.prepareOut(); err != nil {
		return nil, err
	}
	if cfg.NetNSPrefix == "" {
		unlock, err := lockDir(cfg.OutDir)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	h.start = history.Now()
	wall := time.Now()
	return h.finish(wall, h.run(ctx))
}

// prepareOut creates the out directory and removes what an earlier run left
// in it.
func (h *harness) prepareOut() error {
	out := h.cfg.OutDir
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("%w: %v", ErrHarness, err)
	}
	olds, _ := filepath.Glob(filepath.Join(out, "linearizability-*.html"))
	olds = append(olds, "raw", "cluster", "cluster-"+fedParent, "peers.toml", "federation.json", "store", "logs", "history.jsonl", "summary.md", "summary.json")
	for _, o := range olds {
		if !filepath.IsAbs(o) {
			o = filepath.Join(out, o)
		}
		if err := os.RemoveAll(o); err != nil {
			return fmt.Errorf("%w: cleaning %s: %v", ErrHarness, o, err)
		}
	}
	h.raw = filepath.Join(out, "raw")
	if err := os.MkdirAll(h.raw, 0o755); err != nil {
		return fmt.Errorf("%w: %v", ErrHarness, err)
	}
	return nil
}

// lockDir takes an exclusive lock on dir/.lock, so two runs never share an
// out directory (and its namespace prefix).
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHarness, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: another run is using %s: %v", ErrHarness, dir, err)
	}
	return func() { f.Close() }, nil
}

// run does everything up to the checks.
func (h *harness) run(ctx context.Context) (err error) {
	if err := h.setupNetwork(); err != nil {
		return err
	}
	defer func() {
		if cerr := h.net.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("%w: closing the network: %v", ErrHarness, cerr)
		}
	}()
	nemHist, err := h.writer("nemesis")
	if err != nil {
		return err
	}
	if h.cfg.Scenario == ScenarioFederation {
		defer h.stopFederation()
		err := h.startFederation(ctx)
		if h.c != nil {
			defer h.stopCluster()
		}
		if err != nil {
			return err
		}
	} else {
		if err := h.startCluster(ctx); err != nil {
			return err
		}
		defer h.stopCluster()
	}
	wconf, err := h.tlsConfig("cli")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrHarness, err)
	}
	w, err := newWatcher(h.c, wconf, nemHist, h.start)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrHarness, err)
	}
	h.w = w
	defer w.close()
	var stores nemesis.Stores
	switch h.cfg.Scenario {
	case ScenarioChaos:
		if err := h.startStores(ctx, append(h.chaosRuns(), h.rangeRuns()...), true); err != nil {
			return err
		}
		defer h.stores.close()
		stores = h.stores
	case ScenarioStraggler:
		// The range run's store (file://); no store faults.
		if err := h.startStores(ctx, h.rangeRuns(), false); err != nil {
			return err
		}
		defer h.stores.close()
	}
	h.certs = &certifier{h: h}
	inj, err := nemesis.NewInjector(nemesis.InjectorConfig{
		Replicas: h.shape.replicas, Workers: h.shape.workers, History: nemHist, Logger: h.log, Stores: stores, Flooder: flooder{h},
		Certs: h.certs, Retired: h.revokedWorker,
	}, &control{c: h.c, net: h.net, w: w})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrHarness, err)
	}
	h.inj = inj
	wctx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.run(wctx) })
	defer func() {
		stopWatch()
		wg.Wait()
	}()
	switch h.cfg.Scenario {
	case ScenarioStraggler:
		err = h.straggler(ctx)
	case ScenarioStaleLeader:
		err = h.staleLeader(ctx)
	case ScenarioFederation:
		err = h.federation(ctx, nemHist)
	default:
		err = h.chaos(ctx)
	}
	if err != nil {
		_ = h.inj.HealAll(context.WithoutCancel(ctx))
		return err
	}
	return nil
}

func (h *harness) setupNetwork() error {
	s := h.shape
	switch {
	case h.cfg.NetNSPrefix != "":
		n, err := network.AttachNetNS(network.NetNSConfig{Prefix: h.cfg.NetNSPrefix, Replicas: s.replicas, Workers: s.workers, Logger: h.log})
		if err != nil {
			return fmt.Errorf("%w: %v", ErrHarness, err)
		}
		h.net = n
		if h.cfg.NetNote == "" {
			h.cfg.NetNote = "each process in its own network namespace, on a bridge in a switch namespace; cuts are " + n.Firewall() + " drop rules"
		}
	case h.cfg.Net == NetNetNS:
		return fmt.Errorf("%w: network namespaces are made by RunInNamespaces (the harness must run inside the control namespace)", ErrInvalidConfig)
	default:
		p, err := network.NewProxy(network.ProxyConfig{Replicas: s.replicas, Workers: s.workers, Logger: h.log})
		if err != nil {
			return fmt.Errorf("%w: %v", ErrHarness, err)
		}
		h.net = p
		if h.cfg.NetNote == "" {
			h.cfg.NetNote = "user-space proxy per link on loopback"
		}
	}
	return nil
}

// chaosRuns names the runs of the chaos scenario.
func (h *harness) chaosRuns() []string {
	var runs []string
	for i := 1; i <= h.cfg.Runs; i++ {
		runs = append(runs, "chaos-"+strconv.Itoa(i))
	}
	return runs
}

// rangeRuns names the runs with the range layout: chaos's RangeRuns, the
// straggler scenario's one.
func (h *harness) rangeRuns() []string {
	switch h.cfg.Scenario {
	case ScenarioChaos:
		var runs []string
		for i := 1; i <= h.cfg.RangeRuns; i++ {
			runs = append(runs, "chaos-ranges-"+strconv.Itoa(i))
		}
		return runs
	case ScenarioStraggler:
		return []string{"cas-ranges"}
	}
	return nil
}

// startStores starts the object stores of runs (see runStores) in
// OutDir/store: the first in the S3 server when s3 is set and versitygw is
// found, the others in file://. The range runs are left out of the store
// nemesis' object faults (runStores.ranged).
func (h *harness) startStores(ctx context.Context, runs []string, s3 bool) error {
	bin := h.cfg.Versitygw
	if !s3 {
		bin = noS3
	}
	rs, note, err := startStores(ctx, h.log, filepath.Join(h.cfg.OutDir, "store"), storeHost(h.net), bin, h.cfg.BinDir, runs)
	if err != nil {
		return err
	}
	rs.ranged = h.rangeRuns()
	if note != "" {
		h.note("%s", note)
	}
	reader, err := h.client("store-nemesis")
	if err != nil {
		rs.close()
		return err
	}
	rs.reader = reader
	h.stores = rs
	return nil
}

// coordArgs are the flags of every replica.
func (h *harness) coordArgs() []string {
	if h.cfg.Scenario == ScenarioStaleLeader {
		// The paused leader must not learn the new term from its peers
		// before it is cut off from them: slow elections leave seconds
		// for that. And the worker's items must not be re-pended while it
		// cannot reach the new leader.
		return []string{"--failure-timeout", max(h.cfg.FailureTimeout, 30*time.Second).String(), "--log-level", "info",
			"--raft-heartbeat-timeout", "2s", "--raft-election-timeout", "2s"}
	}
	if h.cfg.Scenario == ScenarioFederation {
		// Six replicas, two workers and the harness on one machine: Raft's
		// 200 ms defaults would elect again and again under load, and a
		// new parent leader routes by model only after its first PeerInfo.
		return []string{"--failure-timeout", h.cfg.FailureTimeout.String(), "--log-level", "info",
			"--raft-heartbeat-timeout", "1s", "--raft-election-timeout", "1s"}
	}
	return []string{"--failure-timeout", h.cfg.FailureTimeout.String(), "--log-level", "info"}
}

func (h *harness) startCluster(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	c, err := localcluster.Start(sctx, localcluster.Config{
		BinDir: h.cfg.BinDir, Dir: filepath.Join(h.cfg.OutDir, "cluster"), Replicas: len(h.shape.replicas),
		CoordArgs: h.coordArgs(), Placement: h.net, StartTimeout: 80 * time.Second,
		TLS: h.cfg.TLS, TLSNames: append([]string{stragglerID, rangeStragglerID, ghostID}, h.shape.workers...),
	})
	if err != nil {
		return fmt.Errorf("%w: starting the cluster: %v", ErrHarness, err)
	}
	h.c = c
	if p, ok := h.net.(*network.Proxy); ok {
		p.SetProcesses(func() map[int]string { return processes(c) })
	}
	return nil
}

func (h *harness) stopCluster() {
	// Workers first, so that they can deregister while a leader serves.
	var wg sync.WaitGroup
	for _, w := range h.c.Workers() {
		wg.Go(func() { _ = w.Stop(10 * time.Second) })
	}
	wg.Wait()
	h.c.Stop()
	h.mu.Lock()
	for _, c := range h.clients {
		_ = c.Close()
	}
	h.clients = nil
	h.mu.Unlock()
}

// writer opens raw/NAME.jsonl for the harness process name.
func (h *harness) writer(name string) (*history.Writer, error) {
	w, err := history.Create(filepath.Join(h.raw, name+".jsonl"), name)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHarness, err)
	}
	h.mu.Lock()
	h.writers = append(h.writers, w)
	h.mu.Unlock()
	return w, nil
}

// client returns a new sequential workload client named name, with the
// "cli" identity.
func (h *harness) client(name string) (*workload.Client, error) {
	return h.clientAs(name, h.runIdentity())
}

// clientAs returns a new sequential workload client named name that
// presents the certificate of identity (with TLS): a client that claims
// and reports as a worker must be that worker's identity.
func (h *harness) clientAs(name, identity string) (*workload.Client, error) {
	tlsConf, err := h.tlsConfig(identity)
	if err != nil {
		return nil, fmt.Errorf("%w: client %s: %v", ErrHarness, name, err)
	}
	w, err := h.writer(name)
	if err != nil {
		return nil, err
	}
	cc := coordclient.DefaultConfig()
	cc.TLS = tlsConf
	cc.Addrs = h.c.GRPCAddrs()
	cc.CallTimeout = 3 * time.Second
	cc.RetryMin, cc.RetryMax = 50*time.Millisecond, 500*time.Millisecond
	c, err := coordclient.New(cc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHarness, err)
	}
	h.mu.Lock()
	h.clients = append(h.clients, c)
	h.mu.Unlock()
	return workload.NewClient(c, w), nil
}

// startWorker starts worker id with the mock backend, its history in raw/.
func (h *harness) startWorker(id string, args ...string) error {
	base := []string{"--backend", "mock", "--log-level", "info", "--history", filepath.Join(h.raw, id+".jsonl")}
	if _, err := h.c.StartWorker(id, append(base, args...)...); err != nil {
		return fmt.Errorf("%w: %v", ErrHarness, err)
	}
	return nil
}

// waitComplete waits, within the completion bound from now, until every
// chunk is acknowledged (sub) and the runs are complete; it records the
// completion time.
func (h *harness) waitComplete(ctx context.Context, subDone <-chan struct{}) {
	cctx, cancel := context.WithTimeout(ctx, h.cfg.CompletionBound)
	defer cancel()
	if subDone != nil {
		select {
		case <-subDone:
		case <-cctx.Done():
			h.note("the submitter did not get every chunk acknowledged within %v of the last heal", h.cfg.CompletionBound)
			return
		}
	}
	cl, err := h.client("complete")
	if err != nil {
		h.note("%v", err)
		return
	}
	if err := workload.WaitComplete(cctx, cl, h.totals); err != nil {
		h.note("%v", err)
		return
	}
	h.completed = history.Now()
}

// finalRead reads every item of every run.
func (h *harness) finalRead(ctx context.Context) {
	cl, err := h.client("final")
	if err != nil {
		h.finalErr = err.Error()
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var items []history.Item
	raw := map[string][]*rolloutv1.ResultItem{}
	for run := range h.totals {
		for {
			res, err := cl.ReadAll(rctx, run)
			if err == nil {
				items = append(items, history.FromResults(run, res)...)
				raw[run] = res
				break
			}
			if rctx.Err() != nil {
				h.finalErr = fmt.Sprintf("reading run %s: %v", run, err)
				return
			}
			workload.Sleep(rctx, 500*time.Millisecond)
		}
	}
	h.final, h.finalRaw = items, raw
	h.readTenants(rctx, cl)
	if h.stores != nil {
		h.storeIn = h.stores.check(ctx, raw)
		h.rangeIn = h.stores.checkRanges(ctx, raw, h.totals)
	}
}

// finish closes the histories, merges them, checks and writes the report.
// It returns runErr, or its own failure to read the histories or write the
// report.
func (h *harness) finish(wall time.Time, runErr error) (*Result, error) {
	h.mu.Lock()
	writers := h.writers
	h.writers = nil
	h.mu.Unlock()
	for _, w := range writers {
		if err := w.Close(); err != nil {
			h.note("history %s: %v", w.Process(), err)
		}
	}
	if h.c != nil {
		// Keep the process logs, drop the data directories unless asked.
		_ = os.Rename(filepath.Join(h.cfg.OutDir, "cluster", "logs"), filepath.Join(h.cfg.OutDir, "logs"))
		if h.fed != nil {
			// The parent's logs beside the peer's.
			_ = os.Rename(filepath.Join(h.cfg.OutDir, "cluster-"+fedParent, "logs"), filepath.Join(h.cfg.OutDir, "logs", "cluster-"+fedParent))
		}
		if !h.cfg.KeepData {
			_ = os.RemoveAll(filepath.Join(h.cfg.OutDir, "cluster-"+fedParent))
			_ = os.RemoveAll(filepath.Join(h.cfg.OutDir, "cluster"))
			_ = os.RemoveAll(filepath.Join(h.cfg.OutDir, "store"))
		}
	}
	events, err := history.ReadDir(h.raw)
	if err == nil {
		err = history.WriteFile(filepath.Join(h.cfg.OutDir, "history.jsonl"), events)
	}
	if err == nil {
		_ = os.RemoveAll(h.raw)
	} else if runErr == nil {
		// Checks over a history that could not be read prove nothing.
		runErr = fmt.Errorf("%w: the histories (kept in %s): %v", ErrHarness, h.raw, err)
	}
	in := checker.Input{
		Events: h.fedEvents(events), Final: h.final, FinalErr: h.finalErr, Totals: h.totals,
		LastHeal: h.lastHeal, Completed: h.completed, Bound: h.cfg.CompletionBound, VisualizeDir: h.cfg.OutDir,
		Hostile: h.cfg.hostile() && runErr == nil, Store: h.storeIn,
		Flood: checker.FloodInput{Problems: h.replicaProblems(filepath.Join(h.cfg.OutDir, "logs"))},
	}
	if h.stores != nil && len(h.storeIn.Runs) == 0 {
		in.Store = checker.StoreInput{Runs: h.stores.runs, Err: "not read: the run ended before the final read"}
	}
	in.Ranges = h.rangeIn
	in.Tenants = h.tenantsInput()
	if h.fed != nil {
		in.Federation = h.fed.input
		// What the federation checkers judged, for the reader of the report.
		if b, err := json.MarshalIndent(in.Federation, "", " "); err == nil {
			_ = os.WriteFile(filepath.Join(h.cfg.OutDir, "federation.json"), b, 0o644)
		}
		if in.Federation.Parent == "" {
			in.Federation = checker.FedInput{Parent: fedParent, Peer: fedPeer, Err: "not read: the run ended before the final read"}
		}
	}
	if h.stores != nil && len(h.rangeIn) == 0 {
		for _, run := range h.stores.ranged {
			in.Ranges = append(in.Ranges, checker.RangeRun{Run: run, Err: "not read: the run ended before the final read"})
		}
	}
	if in.FinalErr == "" && h.final == nil {
		in.FinalErr = "not read: the run ended before the final read"
	}
	if in.LastHeal == 0 {
		in.LastHeal = h.start
	}
	res := &Result{Check: checker.Check(in)}
	s := report.Summary{
		Outcome: report.Pass, Scenario: string(h.cfg.Scenario), Seed: h.cfg.Seed, Start: h.start,
		Network: string(h.cfg.Net), NetworkNote: h.cfg.NetNote, TLS: h.cfg.TLS, Wall: time.Since(wall).Seconds(),
		Ops: res.Check.Ops, Plan: h.plan, Verdicts: res.Check.Verdicts, Visualizations: res.Check.Visualizations,
		FaultCount: map[string]int{}, Hostile: res.Check.Hostile,
	}
	if h.net != nil {
		s.Network = string(h.net.Mode())
	}
	if h.inj != nil {
		s.Faults = h.inj.Applied()
		for _, f := range s.Faults {
			if f.Err == "" || strings.HasPrefix(f.Err, "heal:") {
				s.FaultCount[string(f.Step.Kind)]++
			}
		}
		s.Failovers = h.inj.Failovers()
		s.FailoverStats = report.Stats(s.Failovers)
	}
	h.mu.Lock()
	if h.floods.Attempted+h.floods.SlowAttempted+h.floods.Calls > 0 {
		h.notes = append(h.notes, "flood, all floods together: "+h.floods.String())
	}
	if h.attacks > 0 {
		s.FaultCount[string(nemesis.Hostile)] = h.attacks
	}
	h.mu.Unlock()
	if h.w != nil {
		s.Leaders = h.w.Leaders()
		s.LeaderChanges = max(len(s.Leaders)-1, 0)
	}
	var kinds []string
	for _, k := range h.cfg.Nemeses {
		kinds = append(kinds, string(k))
	}
	s.Settings = [][2]string{
		{"replicas", strings.Join(h.shape.replicas, " ")},
		{"workers", strings.Join(h.shape.workers, " ")},
		{"binaries", h.cfg.BinDir},
		{"failure timeout", h.cfg.FailureTimeout.String()},
		{"completion bound", h.cfg.CompletionBound.String()},
	}
	if h.cfg.Scenario == ScenarioChaos {
		s.Settings = append(s.Settings, [2]string{"duration", h.cfg.Duration.String()}, [2]string{"nemeses", strings.Join(kinds, ",")},
			[2]string{"runs x items", strconv.Itoa(h.cfg.Runs) + " x " + strconv.Itoa(h.cfg.ItemsPerRun)},
			[2]string{"range runs x indexes", strconv.Itoa(h.cfg.RangeRuns) + " x " + strconv.Itoa(h.cfg.ItemsPerRun)})
		if h.cfg.Tenants > 0 {
			s.Settings = append(s.Settings, [2]string{"tenants", tenantsNote(h.cfg.Tenants)})
		}
		if h.stores != nil {
			s.Settings = append(s.Settings, [2]string{"object stores", h.stores.describe()})
		}
	}
	if h.cfg.Scenario == ScenarioFederation {
		s.Settings = append(s.Settings, [2]string{"duration", h.cfg.Duration.String()},
			[2]string{"clusters", fedParent + " (--peers: " + fedPeer + "; no worker), " + fedPeer + " (the workers)"},
			[2]string{"runs x items", strings.Join([]string{fedAuto1, fedAuto2, fedPinned}, ", ") + " x " + strconv.Itoa(h.cfg.ItemsPerRun) +
				"; " + fedCancel + " (cancelled), " + fedLocal + " (pinned local)"})
	}
	if runErr != nil {
		h.note("harness: %v", runErr)
	}
	h.mu.Lock()
	s.Notes = append(s.Notes, h.notes...)
	h.mu.Unlock()
	switch {
	case runErr != nil:
		s.Outcome = report.Error
	case !res.Check.OK():
		s.Outcome = report.Fail
	}
	res.Summary = s
	if err := report.Write(h.cfg.OutDir, s); err != nil && runErr == nil {
		runErr = fmt.Errorf("%w: %v", ErrHarness, err)
	}
	return res, runErr
}
