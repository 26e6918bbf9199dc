package metrics

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/raftnode"
)

// Node is what the state collector reads of the Raft replica;
// *raftnode.Node implements it.
type Node interface {
	Stats() raftnode.Stats
	ServingTerm() (uint64, bool)
}

// Ledger is what the state collector reads of the work ledger; *fsm.Ledger
// implements it. Each method takes the ledger's read lock once, briefly.
type Ledger interface {
	RecentRuns(n int) ([]fsm.RunStatus, int)
	Workers() []fsm.WorkerStatus
	Pending() int
	Epoch() uint64
	StalledRuns() int
}

var (
	_ Node   = (*raftnode.Node)(nil)
	_ Ledger = (*fsm.Ledger)(nil)
)

// StateConfig bounds what the state collector exports.
type StateConfig struct {
	// MaxRuns is how many runs, the newest by creation, get per-run series
	// (default 100). Older runs are still counted by rollout_ledger_runs.
	MaxRuns int
	// MaxWorkers is how many workers, the first by id, get per-worker
	// series (default 1000). All are counted by rollout_ledger_workers.
	MaxWorkers int
	// Now is the clock heartbeat ages are measured with (default
	// time.Now).
	Now func() time.Time
	// Liveness, when set, reads the leader's memory of its workers
	// (liveness is leader-local): rollout_workers_live, the heartbeats
	// received, the TTL and the interval it asks of workers. Nil: those
	// series are not exported.
	Liveness func() LiveFigures
	// Overlay, when set, replaces what the ledger says of each worker by
	// what the leader last heard (its heartbeat age, backlog and rate).
	Overlay func([]fsm.WorkerStatus) []fsm.WorkerStatus
	// Tenants, when set, lists the ledger's tenants at each scrape (one
	// read of the ledger): rollout_tenants and, for the first MaxTenants
	// by name (default 1000), the per-tenant series rollout_tenant_*.
	Tenants    func() []Tenant
	MaxTenants int
}

// LiveFigures are the leader's liveness figures at a scrape.
type LiveFigures struct {
	// Serving is false on a replica that is not the serving leader: it
	// keeps no liveness, and Live, TTL and Interval are not exported.
	Serving bool
	// Live counts registered workers heard from within the TTL (or still
	// within the grace period of a new leadership).
	Live int
	// Heartbeats counts the heartbeats this replica has received.
	Heartbeats uint64
	// TTL is how long a worker may stay silent before it is declared lost;
	// Interval the heartbeat interval the leader asks (0: the workers' own).
	TTL, Interval time.Duration
}

// Defaults of StateConfig.
const (
	DefaultMaxRuns    = 100
	DefaultMaxWorkers = 1000
)

// RegisterState registers on reg a collector that reads node and ledger at
// every scrape (see the package documentation).
func RegisterState(reg prometheus.Registerer, node Node, ledger Ledger, cfg StateConfig) error {
	if node == nil || ledger == nil {
		return fmt.Errorf("%w: node and ledger are required", ErrInvalidConfig)
	}
	if cfg.MaxRuns < 0 || cfg.MaxWorkers < 0 || cfg.MaxTenants < 0 {
		return fmt.Errorf("%w: MaxRuns, MaxWorkers and MaxTenants must be >= 0", ErrInvalidConfig)
	}
	if cfg.MaxTenants == 0 {
		cfg.MaxTenants = DefaultMaxTenants
	}
	if cfg.MaxRuns == 0 {
		cfg.MaxRuns = DefaultMaxRuns
	}
	if cfg.MaxWorkers == 0 {
		cfg.MaxWorkers = DefaultMaxWorkers
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return reg.Register(&stateCollector{node: node, ledger: ledger, cfg: cfg, d: newStateDescs()})
}

// stateDescs are the state collector's metric descriptions, built per
// collector (no package-level state).
type stateDescs struct {
	descRaftState, descServing, descTerm, descCommit, descApplied, descLastLog, descSnapshot, descLeaderChanges *prometheus.Desc
	descEpoch, descRuns, descPending, descStalled, descItems, descRunTotal, descRunFailures, descRunFinished    *prometheus.Desc
	descWorkers, descWorkerRunning, descWorkerBacklog, descWorkerRate, descWorkerCompleted, descWorkerAge       *prometheus.Desc
	descWorkersLive, descHeartbeats, descTTL, descInterval                                                      *prometheus.Desc
	tenants                                                                                                     tenantDescs
}

func newStateDescs() stateDescs {
	return stateDescs{
		tenants: newTenantDescs(),
		descRaftState: prometheus.NewDesc("rollout_raft_state",
			"1 for the Raft state this replica is in (follower, candidate, leader, shutdown), 0 for the others.", []string{"state"}, nil),
		descServing: prometheus.NewDesc("rollout_raft_serving_leader",
			"1 while this replica is the serving leader (its epoch entry is applied), else 0.", nil, nil),
		descTerm: prometheus.NewDesc("rollout_raft_term",
			"Raft's current term (the epoch) on this replica.", nil, nil),
		descCommit: prometheus.NewDesc("rollout_raft_commit_index",
			"Highest log index known committed.", nil, nil),
		descApplied: prometheus.NewDesc("rollout_raft_applied_index",
			"Highest log index the ledger has applied on this replica.", nil, nil),
		descLastLog: prometheus.NewDesc("rollout_raft_last_log_index",
			"Last index in this replica's log.", nil, nil),
		descSnapshot: prometheus.NewDesc("rollout_raft_last_snapshot_index",
			"Index of the latest snapshot.", nil, nil),
		descLeaderChanges: prometheus.NewDesc("rollout_raft_leader_changes_total",
			"Times this replica saw a new leader.", nil, nil),

		descEpoch: prometheus.NewDesc("rollout_ledger_epoch",
			"The ledger's epoch (the term of the last leader's epoch entry).", nil, nil),
		descRuns: prometheus.NewDesc("rollout_ledger_runs",
			"Runs the ledger holds (all of them, exported or not).", nil, nil),
		descPending: prometheus.NewDesc("rollout_ledger_pending_items",
			"Pending items over all runs.", nil, nil),
		descStalled: prometheus.NewDesc("rollout_ledger_runs_stalled",
			"Runs stalled on a missing or changed input object, or isolated because their store is unreachable (their items wait; see docs/RECOVERY.md).", nil, nil),
		descItems: prometheus.NewDesc("rollout_ledger_items",
			"Items of a run by state (pending, running, done, dead); only the newest runs are exported.", []string{"run", "state"}, nil),
		descRunTotal: prometheus.NewDesc("rollout_ledger_run_items",
			"Items submitted to a run.", []string{"run"}, nil),
		descRunFailures: prometheus.NewDesc("rollout_ledger_run_failed_attempts_total",
			"Failed attempts over a run's life.", []string{"run"}, nil),
		descRunFinished: prometheus.NewDesc("rollout_ledger_run_finished",
			"1 when every item of the run is done or dead, else 0.", []string{"run"}, nil),
		descWorkers: prometheus.NewDesc("rollout_ledger_workers",
			"Registered workers by state: live, or lost (silent past the failure timeout).", []string{"state"}, nil),
		descWorkerRunning: prometheus.NewDesc("rollout_ledger_worker_running_items",
			"Items the ledger says a worker owns.", []string{"worker"}, nil),
		descWorkerBacklog: prometheus.NewDesc("rollout_ledger_worker_backlog_items",
			"A worker's backlog (queued and executing) from its last heartbeat.", []string{"worker"}, nil),
		descWorkerRate: prometheus.NewDesc("rollout_ledger_worker_items_per_second",
			"A worker's measured throughput from its last heartbeat.", []string{"worker"}, nil),
		descWorkerCompleted: prometheus.NewDesc("rollout_ledger_worker_completed_items_total",
			"Items a worker completed, as the ledger counted them.", []string{"worker"}, nil),
		descWorkerAge: prometheus.NewDesc("rollout_ledger_worker_heartbeat_age_seconds",
			"Seconds since the leader last heard from a worker (its memory; the ledger's last command from it where the leader has not heard from it).", []string{"worker"}, nil),
		descWorkersLive: prometheus.NewDesc("rollout_workers_live",
			"Registered workers the serving leader heard from within the TTL (or still in a new leadership's grace period); only the serving leader exports it.", nil, nil),
		descHeartbeats: prometheus.NewDesc("rollout_heartbeats_received_total",
			"Worker heartbeats this replica answered (plain RPCs held in the leader's memory, never Raft entries); rate() gives heartbeats/s. Log entries/s is rate(rollout_raft_last_log_index).", nil, nil),
		descTTL: prometheus.NewDesc("rollout_worker_ttl_seconds",
			"How long a worker may stay silent before the leader declares it lost: the failure timeout, grown with the fleet; only the serving leader exports it.", nil, nil),
		descInterval: prometheus.NewDesc("rollout_worker_heartbeat_interval_seconds",
			"The heartbeat interval the leader asks of each worker (0: the workers' own); only the serving leader exports it.", nil, nil),
	}
}

// stateCollector reads node and ledger at scrape time.
type stateCollector struct {
	node   Node
	ledger Ledger
	cfg    StateConfig
	d      stateDescs
}

func (s *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		s.d.descRaftState, s.d.descServing, s.d.descTerm, s.d.descCommit, s.d.descApplied, s.d.descLastLog, s.d.descSnapshot, s.d.descLeaderChanges,
		s.d.descEpoch, s.d.descRuns, s.d.descPending, s.d.descStalled, s.d.descItems, s.d.descRunTotal, s.d.descRunFailures, s.d.descRunFinished,
		s.d.descWorkers, s.d.descWorkerRunning, s.d.descWorkerBacklog, s.d.descWorkerRate, s.d.descWorkerCompleted, s.d.descWorkerAge,
		s.d.descWorkersLive, s.d.descHeartbeats, s.d.descTTL, s.d.descInterval,
	} {
		ch <- d
	}
	if s.cfg.Tenants != nil {
		for _, d := range s.d.tenants.all() {
			ch <- d
		}
	}
}

func (s *stateCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}

	st := s.node.Stats()
	for _, name := range []string{"follower", "candidate", "leader", "shutdown"} {
		gauge(s.d.descRaftState, boolValue(strings.EqualFold(st.State, name)), name)
	}
	_, serving := s.node.ServingTerm()
	gauge(s.d.descServing, boolValue(serving))
	gauge(s.d.descTerm, float64(st.Term))
	gauge(s.d.descCommit, float64(st.CommitIndex))
	gauge(s.d.descApplied, float64(st.AppliedIndex))
	gauge(s.d.descLastLog, float64(st.LastLogIndex))
	gauge(s.d.descSnapshot, float64(st.LastSnapshotIndex))
	counter(s.d.descLeaderChanges, float64(st.LeaderChanges))

	gauge(s.d.descEpoch, float64(s.ledger.Epoch()))
	gauge(s.d.descPending, float64(s.ledger.Pending()))
	gauge(s.d.descStalled, float64(s.ledger.StalledRuns()))
	runs, total := s.ledger.RecentRuns(s.cfg.MaxRuns)
	gauge(s.d.descRuns, float64(total))
	for _, r := range runs {
		gauge(s.d.descItems, float64(r.Pending), r.Name, "pending")
		gauge(s.d.descItems, float64(r.Running), r.Name, "running")
		gauge(s.d.descItems, float64(r.Done), r.Name, "done")
		gauge(s.d.descItems, float64(r.Dead), r.Name, "dead")
		gauge(s.d.descRunTotal, float64(r.Total), r.Name)
		counter(s.d.descRunFailures, float64(r.Failures), r.Name)
		gauge(s.d.descRunFinished, boolValue(r.Total > 0 && r.Done+r.Dead == r.Total), r.Name)
	}

	if s.cfg.Liveness != nil {
		lf := s.cfg.Liveness()
		counter(s.d.descHeartbeats, float64(lf.Heartbeats))
		if lf.Serving {
			gauge(s.d.descWorkersLive, float64(lf.Live))
			gauge(s.d.descTTL, lf.TTL.Seconds())
			gauge(s.d.descInterval, lf.Interval.Seconds())
		}
	}
	workers := s.ledger.Workers()
	if s.cfg.Overlay != nil {
		workers = s.cfg.Overlay(workers)
	}
	live, lost := 0, 0
	now := s.cfg.Now()
	for i, w := range workers {
		if w.Lost {
			lost++
		} else {
			live++
		}
		if i >= s.cfg.MaxWorkers {
			continue
		}
		gauge(s.d.descWorkerRunning, float64(w.Running), w.ID)
		gauge(s.d.descWorkerBacklog, float64(w.Backlog), w.ID)
		gauge(s.d.descWorkerRate, w.ItemsPerSec, w.ID)
		counter(s.d.descWorkerCompleted, float64(w.Completed), w.ID)
		if !w.LastHeartbeat.IsZero() {
			gauge(s.d.descWorkerAge, max(now.Sub(w.LastHeartbeat).Seconds(), 0), w.ID)
		}
	}
	gauge(s.d.descWorkers, float64(live), "live")
	gauge(s.d.descWorkers, float64(lost), "lost")
	if s.cfg.Tenants != nil {
		collectTenants(s.d.tenants, s.cfg.Tenants(), s.cfg.MaxTenants, gauge)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
