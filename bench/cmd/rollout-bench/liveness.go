package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/client/localcluster"
)

// Liveness is the liveness stage (issue 29): what registered workers cost
// the leader while they only say "still here", what busy ones cost, and
// whether a leader's death expires anybody who keeps heartbeating.
//
// The cluster always runs over mutual TLS (whatever --tls says): every
// simulated worker holds its own certificate from the cluster's CA, with
// its worker id as Common Name, as the server requires of worker RPCs.
type Liveness struct {
	// FailureTimeout is the replicas' --failure-timeout.
	FailureTimeoutS float64 `json:"failure_timeout_s"`
	// NoWorkers is the window before any worker registered: the leader's
	// own floor, against which the fleet's cost reads.
	NoWorkers *LivenessIdle `json:"no_workers,omitempty"`
	// Idle has one measurement per fleet size (--liveness-workers).
	Idle []LivenessIdle `json:"idle"`
	// Busy is the busy-fleet measurement (--liveness-busy-workers), nil
	// when none of the idle sizes equals it.
	Busy *LivenessBusy `json:"busy,omitempty"`
	// WorkerKill and LeaderKill are measured at the largest idle size.
	WorkerKill *LivenessWorkerKill `json:"worker_kill,omitempty"`
	LeaderKill *LivenessLeaderKill `json:"leader_kill,omitempty"`
}

// LivenessIdle is a steady window with Workers registered, heartbeating,
// idle simulated workers and nothing else happening.
type LivenessIdle struct {
	Workers int `json:"workers"`
	// RegisterS is how long registering the workers added since the
	// previous size took (TLS handshakes and Register commands).
	RegisterS float64 `json:"register_s"`
	WindowS   float64 `json:"window_s"`
	// LeaderCPUPct is the leader process's user+system CPU over the
	// window as a percentage of one core (/proc/PID/stat; the simulator
	// runs in the bench's own process and is not counted).
	LeaderCPUPct float64 `json:"leader_cpu_pct"`
	// SimCPUPct is the bench process's own CPU over the window (the
	// simulated fleet, mostly), in % of one core: the simulator shares
	// the machine's cores with the replicas.
	SimCPUPct float64 `json:"sim_cpu_pct"`
	// LeaderRSS is the leader's resident set at the end of the window.
	LeaderRSS int64 `json:"leader_rss_bytes"`
	// EntriesPerS is the leader's last log index delta over the window
	// (every entry: commands, no-ops, configuration), per second.
	EntriesPerS float64 `json:"entries_per_s"`
	// HeartbeatsPerS is the Heartbeat RPCs the leader handled per second
	// (rollout_grpc_server_handled_total); SimHeartbeatsPerS the
	// heartbeats the fleet had answered per second.
	HeartbeatsPerS    float64 `json:"heartbeats_per_s"`
	SimHeartbeatsPerS float64 `json:"sim_heartbeats_per_s"`
	// IntervalMS is the heartbeat interval the fleet used at the end of
	// the window; Asked says a reply asked for it (else it is the worker
	// default).
	IntervalMS float64 `json:"interval_ms"`
	Asked      bool    `json:"interval_asked"`
	// TTLMS is the TTL the leader's replies announced (0: a coordinator
	// that announces none: its --failure-timeout).
	TTLMS float64 `json:"ttl_ms,omitempty"`
	// HeartbeatErrors and Reregistered count, over the window, heartbeats
	// that failed and heartbeats answered "not registered".
	HeartbeatErrors int64 `json:"heartbeat_errors"`
	Reregistered    int64 `json:"reregistered"`
	// LeaderChanged says the leader changed during the window kept (its
	// CPU and RPC figures then mix two processes); Elections counts the
	// terms that passed during every window measured at this size (a
	// window with an election is measured again, up to three times).
	LeaderChanged bool   `json:"leader_changed,omitempty"`
	Elections     uint64 `json:"elections"`
	// LoadAvg is the machine's 1-minute load average at the window's end
	// (/proc/loadavg): the replicas, the simulator and whatever else runs.
	LoadAvg float64 `json:"load_avg_1m"`
}

// LivenessBusy is a window in which BusyWorkers rollout-worker processes
// (mock backend) run a range run while IdleWorkers simulated workers keep
// heartbeating: the log should grow with the work's progress, not with
// the registered workers.
type LivenessBusy struct {
	BusyWorkers int     `json:"busy_workers"`
	IdleWorkers int     `json:"idle_workers"`
	Concurrency int     `json:"concurrency"`
	MockLatency float64 `json:"mock_latency_ms"`
	WindowS     float64 `json:"window_s"`
	ItemsPerS   float64 `json:"items_per_s"`
	EntriesPerS float64 `json:"entries_per_s"`
	// WorkRPCsPerS is the Claim, Report, ReportRange and Steal RPCs the
	// leader handled per second (the calls that move work);
	// HeartbeatsPerS the Heartbeat RPCs.
	WorkRPCsPerS   float64 `json:"work_rpcs_per_s"`
	HeartbeatsPerS float64 `json:"heartbeats_per_s"`
	LeaderCPUPct   float64 `json:"leader_cpu_pct"`
	// RunFinished says the run finished inside the window (which then
	// covers idle time too).
	RunFinished bool `json:"run_finished,omitempty"`
	// LeaderChanged and Elections as in LivenessIdle.
	LeaderChanged bool   `json:"leader_changed,omitempty"`
	Elections     uint64 `json:"elections"`
}

// LivenessWorkerKill is one simulated worker stopped as by SIGKILL (its
// heartbeats stop, its connection closes, no Deregister).
type LivenessWorkerKill struct {
	Workers int    `json:"workers"`
	Worker  string `json:"worker"`
	// Declared says the worker's expiry was seen within the wait
	// (--liveness-expiry-wait, at least twice the limit); when it was
	// not, DeclaredMS is the wait and SinceLastMS 0.
	Declared bool `json:"declared"`
	// DeclaredMS is the time from the stop to the worker's expiry event
	// seen committed (Events, polled every 100 ms); SinceLastMS the time
	// from its last answered heartbeat to the expiry event's stamped
	// time.
	DeclaredMS  float64 `json:"declared_ms"`
	SinceLastMS float64 `json:"since_last_heartbeat_ms"`
	// TTLMS is the failure timeout in force (the TTL the leader announced,
	// at least --failure-timeout); LimitMS is it plus one second (the
	// target).
	TTLMS   float64 `json:"ttl_ms"`
	LimitMS float64 `json:"limit_ms"`
	// Elections counts the terms between the stop and the expiry, or the
	// end of the wait (a new leader gives every worker a full grace
	// period).
	Elections uint64 `json:"elections"`
}

// LivenessLeaderKill is the leader SIGKILLed with Workers registered.
type LivenessLeaderKill struct {
	Workers int `json:"workers"`
	// Killed is when the leader was killed.
	Killed time.Time `json:"killed"`
	// ServingMS is the time from the kill to a new leader answering a
	// linearizable read in a newer term.
	ServingMS float64 `json:"serving_ms"`
	// WatchS is how long after the new leader served the expiries were
	// counted (at least the failure timeout plus the scan interval).
	WatchS float64 `json:"watch_s"`
	// Elections counts the terms after the first serving one during the
	// watch: each new leader restarts every worker's grace period, so a
	// watch with elections may end before any wrong expiry could come due.
	Elections uint64 `json:"elections"`
	// Expired counts the worker-expired events committed after the kill
	// that name a simulated worker still heartbeating (not the one
	// WorkerKill stopped, not a rollout-worker of the busy window); Lower
	// says the event history
	// dropped events meanwhile, so the count is a lower bound.
	Expired int  `json:"expired"`
	Lower   bool `json:"lower_bound,omitempty"`
	// ExpiredWorkers names the first 20 of them, with the events' details.
	ExpiredWorkers []string `json:"expired_workers,omitempty"`
	// Reregistered counts the fleet's heartbeats answered "not
	// registered" over the same time; HeartbeatErrors those that failed
	// after the client's retries.
	Reregistered    int64 `json:"reregistered"`
	HeartbeatErrors int64 `json:"heartbeat_errors"`
}

// Heartbeat and work RPC method names as the replicas' metrics label them.
var (
	heartbeatMethods = []string{rolloutv1.Coordinator_Heartbeat_FullMethodName}
	workMethods      = []string{rolloutv1.Coordinator_Claim_FullMethodName, rolloutv1.Coordinator_Report_FullMethodName,
		rolloutv1.Coordinator_ReportRange_FullMethodName, rolloutv1.Coordinator_Steal_FullMethodName}
)

// livenessSample is what the stage reads at each end of a window.
type livenessSample struct {
	at         time.Time
	leader     string
	term       uint64
	cpu        time.Duration
	selfCPU    time.Duration
	lastIndex  uint64
	heartbeats float64
	work       float64
	fleet      fleetCounts
	done       uint64
}

func (b *bench) liveness(ctx context.Context) error {
	ft := b.cfg.livenessFailureTimeout
	largest := 0
	for _, n := range b.cfg.livenessWorkers {
		largest = max(largest, n)
	}
	// Connections: each simulated worker holds one to the leader (and,
	// after a failover, one to the replica it follows); PerSourceAddr
	// share a source address. Half the replica's files by default is
	// too few for 10,000 workers: allow most of the 20,000.
	perAddr := 50
	args := []string{
		"--failure-timeout", ft.String(),
		"--max-conns-per-client", strconv.Itoa(max(100, 2*perAddr+32)),
		"--max-conns", strconv.Itoa(max(1000, 2*largest+2000)),
	}
	dir, err := b.stageDir("liveness")
	if err != nil {
		return err
	}
	cl, err := localcluster.Start(ctx, localcluster.Config{
		BinDir: b.cfg.bin, Dir: dir, Replicas: 3, TLS: true, TLSNames: harnessWorkers, CertWorkers: 64,
		CoordArgs: args, StartTimeout: b.cfg.startTimeout, Metrics: true,
	})
	if err != nil {
		return fmt.Errorf("cluster liveness: %w", err)
	}
	defer cl.Stop()
	c, err := client(cl, "cli", 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	leader, _, err := cl.WaitLeader(lctx)
	cancel()
	if err != nil {
		return err
	}
	addrs := []string{leader.GRPCAddr}
	for _, a := range cl.GRPCAddrs() {
		if a != leader.GRPCAddr {
			addrs = append(addrs, a)
		}
	}
	fl := newFleet(fleetConfig{Addrs: addrs, TLSDir: cl.TLSDir(), Interval: time.Second, Jitter: 0.2, PerSourceAddr: perAddr})
	defer fl.Close()

	lv := &Liveness{FailureTimeoutS: ft.Seconds()}
	b.res.Liveness = lv
	// The leader's floor: the same window with no worker registered
	// (Raft heartbeats to the followers, the failure scan, telemetry).
	floor, err := b.idleWindow(ctx, cl, fl, 0)
	if err != nil {
		return fmt.Errorf("no workers: %w", err)
	}
	lv.NoWorkers = &floor
	b.logf("liveness: no workers: leader CPU %.1f%% of a core, %.2f entries/s, load %.1f", floor.LeaderCPUPct, floor.EntriesPerS, floor.LoadAvg)
	for _, n := range b.cfg.livenessWorkers {
		began := time.Now()
		before := fl.Counts().Interval
		if err := fl.Grow(ctx, n); err != nil {
			return fmt.Errorf("%d workers: %w", n, err)
		}
		reg := time.Since(began)
		// Every worker hears the interval the grown fleet is asked at its
		// next heartbeat: at most the interval it had before, after the
		// growth.
		settle := max(b.cfg.livenessSettle, before+time.Second-min(reg, before))
		b.logf("liveness: %d workers registered in %.1fs; settling %v", n, reg.Seconds(), settle)
		if err := sleepCtx(ctx, settle); err != nil {
			return err
		}
		idle, err := b.idleWindow(ctx, cl, fl, n)
		if err != nil {
			return fmt.Errorf("%d idle workers: %w", n, err)
		}
		idle.RegisterS = reg.Seconds()
		lv.Idle = append(lv.Idle, idle)
		b.logf("liveness: %d idle workers: leader CPU %.1f%% of a core (simulator %.0f%%), %.2f entries/s, %.0f heartbeats/s (interval %v), RSS %s, load %.1f",
			n, idle.LeaderCPUPct, idle.SimCPUPct, idle.EntriesPerS, idle.HeartbeatsPerS, time.Duration(idle.IntervalMS*float64(time.Millisecond)), mib(idle.LeaderRSS), idle.LoadAvg)
		if n == b.cfg.livenessBusyWorkers {
			busy, err := b.busyWindow(ctx, cl, dir, fl, n)
			if err != nil {
				return fmt.Errorf("busy window: %w", err)
			}
			lv.Busy = busy
			b.logf("liveness: %d busy + %d idle workers: %.0f items/s, %.2f entries/s, %.1f work RPCs/s, %.0f heartbeats/s, leader CPU %.1f%%",
				busy.BusyWorkers, busy.IdleWorkers, busy.ItemsPerS, busy.EntriesPerS, busy.WorkRPCsPerS, busy.HeartbeatsPerS, busy.LeaderCPUPct)
		}
	}
	if largest == 0 {
		return nil
	}
	wk, err := b.workerKill(ctx, c, fl, ft)
	if err != nil {
		return fmt.Errorf("worker kill: %w", err)
	}
	lv.WorkerKill = wk
	if wk.Declared {
		b.logf("liveness: worker %s stopped: declared lost after %.0f ms (%.0f ms after its last heartbeat; limit %.0f ms; %d elections)",
			wk.Worker, wk.DeclaredMS, wk.SinceLastMS, wk.LimitMS, wk.Elections)
	} else {
		b.logf("liveness: worker %s stopped: NOT declared lost within %.0f ms (limit %.0f ms; %d elections meanwhile)",
			wk.Worker, wk.DeclaredMS, wk.LimitMS, wk.Elections)
	}
	lk, err := b.leaderKill(ctx, cl, c, fl, ft)
	if err != nil {
		return fmt.Errorf("leader kill: %w", err)
	}
	lv.LeaderKill = lk
	b.logf("liveness: leader SIGKILL with %d workers (killed at %s): serving again after %.0f ms; %d expired in the next %.0fs (%d re-registered, %d heartbeat errors) %v",
		lk.Workers, lk.Killed.Format("15:04:05.000"), lk.ServingMS, lk.Expired, lk.WatchS, lk.Reregistered, lk.HeartbeatErrors, lk.ExpiredWorkers)
	return nil
}

// sample reads the serving leader's CPU, last log index and RPC counters,
// the fleet's counters and the runs' done count.
func (b *bench) sample(ctx context.Context, cl *localcluster.Cluster, fl *fleet) (livenessSample, error) {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	leader, term, err := cl.WaitLeader(wctx)
	if err != nil {
		return livenessSample{}, err
	}
	s := livenessSample{at: time.Now(), leader: leader.ID, term: term, fleet: fl.Counts()}
	if s.cpu, err = procCPU(leader.Pid()); err != nil {
		return s, err
	}
	if s.selfCPU, err = procCPU(os.Getpid()); err != nil {
		return s, err
	}
	v := replicaView(wctx, cl, leader.ID)
	if v == nil {
		return s, fmt.Errorf("leader %s does not answer", leader.ID)
	}
	s.lastIndex = v.GetLastLogIndex()
	counts, err := methodCounts(wctx, leader.MetricsAddr)
	if err != nil {
		return s, err
	}
	for _, m := range heartbeatMethods {
		s.heartbeats += counts[m]
	}
	for _, m := range workMethods {
		s.work += counts[m]
	}
	return s, nil
}

// windowTries is how many times a window is measured at most: a window in
// which the leader changed (an election: its CPU and counters are another
// process's at each end) is measured again, and the elections are
// counted.
const windowTries = 3

// idleWindow measures --liveness-window with n idle workers, again when
// the leader changed during it (at most windowTries windows; the last is
// kept, marked LeaderChanged).
func (b *bench) idleWindow(ctx context.Context, cl *localcluster.Cluster, fl *fleet, n int) (LivenessIdle, error) {
	elections := uint64(0)
	for try := 1; ; try++ {
		r, terms, err := b.idleWindowOnce(ctx, cl, fl, n)
		elections += terms
		r.Elections = elections
		if err != nil || !r.LeaderChanged || try == windowTries {
			return r, err
		}
		b.logf("liveness: %d idle workers: the leader changed during the window (%d terms); measuring again", n, terms)
	}
}

func (b *bench) idleWindowOnce(ctx context.Context, cl *localcluster.Cluster, fl *fleet, n int) (LivenessIdle, uint64, error) {
	s0, err := b.sample(ctx, cl, fl)
	if err != nil {
		return LivenessIdle{}, 0, err
	}
	if err := sleepCtx(ctx, b.cfg.livenessWindow); err != nil {
		return LivenessIdle{}, 0, err
	}
	s1, err := b.sample(ctx, cl, fl)
	if err != nil {
		return LivenessIdle{}, 0, err
	}
	secs := s1.at.Sub(s0.at).Seconds()
	r := LivenessIdle{
		Workers: n, WindowS: secs,
		LeaderCPUPct:      100 * (s1.cpu - s0.cpu).Seconds() / secs,
		SimCPUPct:         100 * (s1.selfCPU - s0.selfCPU).Seconds() / secs,
		EntriesPerS:       float64(s1.lastIndex-s0.lastIndex) / secs,
		HeartbeatsPerS:    (s1.heartbeats - s0.heartbeats) / secs,
		SimHeartbeatsPerS: float64(s1.fleet.Heartbeats-s0.fleet.Heartbeats) / secs,
		IntervalMS:        ms(s1.fleet.Interval),
		Asked:             s1.fleet.Asked,
		TTLMS:             ms(s1.fleet.TTL),
		HeartbeatErrors:   s1.fleet.Errors - s0.fleet.Errors,
		Reregistered:      s1.fleet.Reregistered - s0.fleet.Reregistered,
		LeaderChanged:     s0.leader != s1.leader || s0.term != s1.term,
	}
	if leader := cl.Replica(s1.leader); leader != nil {
		r.LeaderRSS, _ = procRSS(leader.Pid())
	}
	r.LoadAvg = loadAvg()
	return r, s1.term - s0.term, nil
}

// busyWindow runs a range run through --liveness-busy-real rollout-worker
// processes beside the n simulated idle workers and measures a window of
// it; the workers are stopped (SIGTERM: they drain and deregister) after.
func (b *bench) busyWindow(ctx context.Context, cl *localcluster.Cluster, dir string, fl *fleet, n int) (*LivenessBusy, error) {
	const concurrency = 16
	latency := 50 * time.Millisecond
	real := b.cfg.livenessBusyReal
	// Enough items that the run outlasts every window it may take (one
	// per try) at the most these workers can do (concurrency/latency
	// items/s each).
	capacity := float64(real*concurrency) / latency.Seconds()
	items := int(capacity*(windowTries*b.cfg.livenessWindow.Seconds()+20)) + 1000
	input, err := b.inputFile(items, "lv")
	if err != nil {
		return nil, err
	}
	if _, err := b.runCLI(ctx, cl, "submit", "--input", input, "--run", "busy", storeFlag(dir)); err != nil {
		return nil, err
	}
	ws, err := startWorkers(cl, real, concurrency, latency)
	if err != nil {
		return nil, err
	}
	defer func() {
		// Together, each with a grace past the drain's budget (25 s).
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Add(1)
			go func() { defer wg.Done(); _ = w.Stop(30 * time.Second) }()
		}
		wg.Wait()
	}()
	c, err := client(cl, "cli", 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// Wait until the work flows.
	t0, err := runTotals(ctx, c, 10*time.Second)
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		t, err := runTotals(ctx, c, 10*time.Second)
		if err == nil && t.done > t0.done+uint64(capacity/10) {
			break
		}
		if time.Now().After(deadline) {
			return nil, errors.New("no progress within 30s of starting the workers")
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return nil, err
		}
	}
	var (
		r         *LivenessBusy
		elections uint64
		d1        totals
	)
	for try := 1; ; try++ {
		s0, err := b.sample(ctx, cl, fl)
		if err != nil {
			return nil, err
		}
		d0, err := runTotals(ctx, c, 10*time.Second)
		if err != nil {
			return nil, err
		}
		if err := sleepCtx(ctx, b.cfg.livenessWindow); err != nil {
			return nil, err
		}
		s1, err := b.sample(ctx, cl, fl)
		if err != nil {
			return nil, err
		}
		if d1, err = runTotals(ctx, c, 10*time.Second); err != nil {
			return nil, err
		}
		secs := s1.at.Sub(s0.at).Seconds()
		elections += s1.term - s0.term
		r = &LivenessBusy{
			BusyWorkers: real, IdleWorkers: n, Concurrency: concurrency, MockLatency: ms(latency), WindowS: secs,
			ItemsPerS:      float64(d1.done-d0.done) / secs,
			EntriesPerS:    float64(s1.lastIndex-s0.lastIndex) / secs,
			WorkRPCsPerS:   (s1.work - s0.work) / secs,
			HeartbeatsPerS: (s1.heartbeats - s0.heartbeats) / secs,
			LeaderCPUPct:   100 * (s1.cpu - s0.cpu).Seconds() / secs,
			LeaderChanged:  s0.leader != s1.leader || s0.term != s1.term,
			Elections:      elections,
		}
		if !r.LeaderChanged || try == windowTries || d1.pending == 0 {
			break
		}
		b.logf("liveness: busy window: the leader changed during the window (%d terms); measuring again", s1.term-s0.term)
	}
	if d1.pending == 0 && d1.running == 0 {
		r.RunFinished = true
		b.logf("liveness: busy window: the run finished inside the window: its figures cover idle time too")
	}
	// Cancel the rest of the run so that the next sizes measure idle
	// workers again.
	if _, err := b.runCLI(ctx, cl, "cancel", "--run", "busy"); err != nil {
		b.logf("liveness: cancel busy run: %v", err)
	}
	return r, nil
}

// workerKill stops the fleet's first worker and waits for its expiry.
func (b *bench) workerKill(ctx context.Context, c *coordclient.Client, fl *fleet, ft time.Duration) (*LivenessWorkerKill, error) {
	id := fleetWorkerID(1)
	after, err := lastEventSeq(ctx, c)
	if err != nil {
		return nil, err
	}
	t0, err := runTotals(ctx, c, 10*time.Second)
	if err != nil {
		return nil, err
	}
	stopped := time.Now()
	last, ok := fl.Stop(id)
	if !ok {
		return nil, fmt.Errorf("no running worker %s", id)
	}
	// The failure timeout in force: the TTL the leader announces (it
	// grows with the fleet), at least --failure-timeout.
	ttl := max(ft, fl.Counts().TTL)
	limit := ttl + time.Second
	wait := max(b.cfg.livenessExpiryWait, 2*limit)
	for deadline := stopped.Add(wait); ; {
		ev, _, err := expiredEvents(ctx, c, after)
		if err == nil {
			for _, e := range ev {
				if e.GetWorker() == id {
					return &LivenessWorkerKill{Workers: fl.Size(), Worker: id, Declared: true,
						DeclaredMS:  ms(time.Since(stopped)),
						SinceLastMS: float64(e.GetUnixMs()) - float64(last.UnixNano())/1e6,
						TTLMS:       ms(ttl), LimitMS: ms(limit), Elections: e.GetTerm() - t0.term}, nil
				}
			}
		}
		if time.Now().After(deadline) {
			r := &LivenessWorkerKill{Workers: fl.Size(), Worker: id, DeclaredMS: ms(time.Since(stopped)), TTLMS: ms(ttl), LimitMS: ms(limit)}
			if t1, err := runTotals(ctx, c, 10*time.Second); err == nil {
				r.Elections = t1.term - t0.term
			}
			return r, nil
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// leaderKill SIGKILLs the leader and counts the fleet's workers that keep
// heartbeating and were expired after the kill (the expiries of others,
// such as the worker stopped before, are not counted).
func (b *bench) leaderKill(ctx context.Context, cl *localcluster.Cluster, c *coordclient.Client, fl *fleet, ft time.Duration) (*LivenessLeaderKill, error) {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	victim, term, err := cl.WaitLeader(wctx)
	cancel()
	if err != nil {
		return nil, err
	}
	after, err := lastEventSeq(ctx, c)
	if err != nil {
		return nil, err
	}
	f0 := fl.Counts()
	killed := time.Now()
	if err := victim.Kill(); err != nil {
		return nil, err
	}
	// Serving: a linearizable read answered in a newer term.
	var (
		serving     time.Duration
		servingTerm uint64
	)
	for {
		t, err := runTotals(ctx, c, 2*time.Second)
		if err == nil && t.term > term {
			serving, servingTerm = time.Since(killed), t.term
			break
		}
		if time.Since(killed) > 60*time.Second {
			return nil, fmt.Errorf("no leader serving within 60s of killing %s", victim.ID)
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
	// Watch one failure timeout in force (the TTL the leader announced, at
	// least --failure-timeout: a new leader's grace period) and two
	// seconds more (scans, the expiry's commit).
	watch := max(ft, fl.Counts().TTL) + 2*time.Second
	if err := sleepCtx(ctx, watch); err != nil {
		return nil, err
	}
	ev, lower, err := expiredEvents(ctx, c, after)
	if err != nil {
		return nil, err
	}
	r := &LivenessLeaderKill{Workers: fl.Size(), Killed: killed.UTC(), ServingMS: ms(serving), WatchS: watch.Seconds(), Lower: lower}
	if t1, err := runTotals(ctx, c, 10*time.Second); err == nil {
		r.Elections = t1.term - servingTerm
	}
	for _, e := range ev {
		if fl.Heartbeating(e.GetWorker()) {
			r.Expired++
			if len(r.ExpiredWorkers) < 20 {
				r.ExpiredWorkers = append(r.ExpiredWorkers, fmt.Sprintf("%s at %s (term %d): %s",
					e.GetWorker(), time.UnixMilli(e.GetUnixMs()).UTC().Format("15:04:05.000"), e.GetTerm(), e.GetDetail()))
			}
		}
	}
	f1 := fl.Counts()
	r.Reregistered, r.HeartbeatErrors = f1.Reregistered-f0.Reregistered, f1.Errors-f0.Errors
	// The killed replica comes back, so that the cluster stops whole.
	if err := victim.Restart(); err != nil {
		b.logf("liveness: restart %s: %v", victim.ID, err)
	}
	return r, nil
}

// lastEventSeq is the newest event's sequence number.
func lastEventSeq(ctx context.Context, c *coordclient.Client) (uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.Events(cctx, &rolloutv1.EventsRequest{AfterSeq: 1<<63 - 1, Limit: 1})
	if err != nil {
		return 0, err
	}
	return resp.GetLastSeq(), nil
}

// expiredEvents pages through the events after seq and returns the
// worker-expired ones; lower says events after seq had already been
// dropped from the bounded history.
func expiredEvents(ctx context.Context, c *coordclient.Client, after uint64) (_ []*rolloutv1.Event, lower bool, _ error) {
	var out []*rolloutv1.Event
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := c.Events(cctx, &rolloutv1.EventsRequest{AfterSeq: after, Limit: 1000})
		cancel()
		if err != nil {
			return nil, lower, err
		}
		if resp.GetFirstSeq() > after+1 {
			lower = true
		}
		evs := resp.GetEvents()
		if len(evs) == 0 {
			return out, lower, nil
		}
		for _, e := range evs {
			if e.GetKind() == rolloutv1.EventKind_EVENT_KIND_WORKER_EXPIRED {
				out = append(out, e)
			}
			after = max(after, e.GetSeq())
		}
	}
}

// methodCounts sums rollout_grpc_server_handled_total by method (every
// status code) from a replica's /metrics.
func methodCounts(ctx context.Context, addr string) (map[string]float64, error) {
	if addr == "" {
		return nil, errors.New("the replica has no --metrics-addr")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	const prefix = "rollout_grpc_server_handled_total{"
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		labels, val, ok := strings.Cut(line, "} ")
		if !ok {
			continue
		}
		method := ""
		for _, l := range strings.Split(labels, ",") {
			if v, ok := strings.CutPrefix(l, `method="`); ok {
				method = strings.TrimSuffix(v, `"`)
			}
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", addr, sc.Text(), err)
		}
		out[method] += f
	}
	return out, sc.Err()
}

// loadAvg is the 1-minute load average, or 0 when unreadable.
func loadAvg() float64 {
	if v := load1(); v != nil {
		return *v
	}
	return 0
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
