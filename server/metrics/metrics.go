// Package metrics is the Prometheus metric set of one coordinator replica
// (rollout-coord --metrics-addr). It has two halves:
//
//   - Coordinator counts events as they happen, through the observer hooks
//     of the layers below, which know nothing of Prometheus: it is a
//     raftnode.Observer (apply time, group-commit batches, commit latency),
//     a server.CommandObserver (claims, reports, steals, CAS misses,
//     expirations, as the ledger decided them for the commands this replica
//     proposed) and a gRPC interceptor (requests by method and code).
//   - RegisterState adds a collector that reads state at scrape time: the
//     Raft node's Stats (state, term, indexes, leader changes) and the
//     ledger's read API (items by state per run, workers by state, per-worker
//     backlog and throughput).
//
// Nothing here is package-level state: every metric lives in the registry
// the caller passes (never prometheus.DefaultRegisterer), so tests and
// several replicas in one process keep their numbers apart.
//
// Label sets are bounded. No item id is ever a label. Runs are labelled by
// name, but only the newest Config.MaxRuns runs (default 100) are exported;
// workers by id, only the first Config.MaxWorkers by id (default 1000).
// gRPC methods are the service's own (unknown methods never reach the
// interceptor), codes the 17 gRPC codes, commands the ledger's command
// types. See docs/OBSERVABILITY.md for the list of metrics.
package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/raftnode"
	"github.com/rollout/rollout/server"
)

// ErrInvalidConfig wraps a bad StateConfig.
var ErrInvalidConfig = errors.New("metrics: invalid config")

// Coordinator counts a replica's events. Create it with New; hand it to
// raftnode.Config.Observer and server.Config.Observer, and add its
// interceptors to the gRPC server.
type Coordinator struct {
	applySeconds  prometheus.Histogram
	batchCommands prometheus.Histogram
	batchBytes    prometheus.Histogram
	commitSeconds prometheus.Histogram
	commitErrors  prometheus.Counter

	commands     *prometheus.CounterVec // command, result
	claimed      prometheus.Counter
	reports      *prometheus.CounterVec // outcome, result
	steals       prometheus.Counter
	stolen       prometheus.Counter
	casMisses    *prometheus.CounterVec // command
	expired      prometheus.Counter
	expiredItems prometheus.Counter
	removed      prometheus.Counter
	submitted    *prometheus.CounterVec // result

	grpcHandled *prometheus.CounterVec // method, code
	grpcSeconds *prometheus.HistogramVec
}

var (
	_ raftnode.Observer      = (*Coordinator)(nil)
	_ server.CommandObserver = (*Coordinator)(nil)
)

// New builds the event metrics and registers them on reg.
func New(reg prometheus.Registerer) (*Coordinator, error) {
	c := &Coordinator{
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rollout_raft_apply_duration_seconds",
			Help:    "Time the ledger took to apply one Raft log entry on this replica.",
			Buckets: prometheus.ExponentialBuckets(5e-6, 4, 10), // 5us .. 1.3s
		}),
		batchCommands: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rollout_raft_batch_commands",
			Help:    "Commands per log entry the leader proposed (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11), // 1 .. 1024
		}),
		batchBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rollout_raft_batch_bytes",
			Help:    "Summed command bytes per log entry the leader proposed (group commit).",
			Buckets: prometheus.ExponentialBuckets(64, 4, 10), // 64B .. 16MiB
		}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rollout_raft_commit_duration_seconds",
			Help:    "Time from handing a batch to Raft until it was applied on the leader (or failed).",
			Buckets: prometheus.ExponentialBuckets(1e-4, 3, 11), // 100us .. 5.9s
		}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_raft_commit_failures_total",
			Help: "Batches Raft failed to commit (leadership lost, timeout, shutdown).",
		}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_ledger_commands_total",
			Help: "Ledger commands this replica proposed, by command type and result (ok, or error when the ledger refused it).",
		}, []string{"command", "result"}),
		claimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_ledger_claimed_items_total",
			Help: "Items handed to workers by Claim.",
		}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_ledger_reports_total",
			Help: "Item and range reports from workers, by outcome (done, failed, nack, held, range) and the ledger's answer (applied, duplicate, cas_miss, conflict, not_found, invalid).",
		}, []string{"outcome", "result"}),
		steals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_ledger_steals_total",
			Help: "Steal commands that moved at least one item from a busy worker to an idle one.",
		}),
		stolen: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_ledger_stolen_items_total",
			Help: "Items moved by steals.",
		}),
		casMisses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_ledger_cas_misses_total",
			Help: "Commands refused because the item was not in the state they expected (a stolen, expired or re-pended item), by command type.",
		}, []string{"command"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_ledger_expired_workers_total",
			Help: "Workers the failure scan declared lost (silent past the failure timeout).",
		}),
		expiredItems: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_ledger_expired_items_total",
			Help: "Items re-pended because their worker expired.",
		}),
		removed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_ledger_removed_workers_total",
			Help: "Lost workers removed from the ledger after the retention.",
		}),
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_ledger_submitted_items_total",
			Help: "Items named by SubmitItems, by what the ledger did with them (created, already_pending, already_running, already_done, retried, dead).",
		}, []string{"result"}),
		grpcHandled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_grpc_server_handled_total",
			Help: "gRPC requests this replica completed, by full method name and status code.",
		}, []string{"method", "code"}),
		grpcSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rollout_grpc_server_handling_seconds",
			Help:    "Time this replica took to answer a gRPC request (long-polls included), by full method name.",
			Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10), // 100us .. 26s
		}, []string{"method"}),
	}
	for _, col := range []prometheus.Collector{
		c.applySeconds, c.batchCommands, c.batchBytes, c.commitSeconds, c.commitErrors,
		c.commands, c.claimed, c.reports, c.steals, c.stolen, c.casMisses, c.expired, c.expiredItems, c.removed, c.submitted,
		c.grpcHandled, c.grpcSeconds,
	} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// ObserveApply implements raftnode.Observer.
func (c *Coordinator) ObserveApply(_ uint64, took time.Duration) {
	c.applySeconds.Observe(took.Seconds())
}

// ObserveBatch implements raftnode.Observer.
func (c *Coordinator) ObserveBatch(commands, size int) {
	c.batchCommands.Observe(float64(commands))
	c.batchBytes.Observe(float64(size))
}

// ObserveCommit implements raftnode.Observer.
func (c *Coordinator) ObserveCommit(took time.Duration, err error) {
	c.commitSeconds.Observe(took.Seconds())
	if err != nil {
		c.commitErrors.Inc()
	}
}

// ObserveCommand implements server.CommandObserver.
func (c *Coordinator) ObserveCommand(cmd *fsmpb.Command, r fsm.Result) {
	name := fsm.CommandLabel(cmd) // the oneof field's name, from the ledger's command table
	result := "ok"
	if r.Err != nil {
		result = "error"
		if errors.Is(r.Err, fsm.ErrCASMiss) {
			c.casMisses.WithLabelValues(name).Inc()
		}
	}
	c.commands.WithLabelValues(name, result).Inc()
	switch cmd.GetCmd().(type) {
	case *fsmpb.Command_Claim:
		c.claimed.Add(float64(indexes(r.Items)))
	case *fsmpb.Command_Complete:
		c.reports.WithLabelValues("done", reportResult(r)).Inc()
	case *fsmpb.Command_CompleteMany:
		if r.Err != nil {
			c.reports.WithLabelValues("done", reportResult(r)).Add(float64(len(cmd.GetCompleteMany().GetIds())))
		}
		for _, each := range r.Each {
			if errors.Is(each.Err, fsm.ErrCASMiss) {
				c.casMisses.WithLabelValues("complete").Inc()
			}
			c.reports.WithLabelValues("done", reportResult(each)).Inc()
		}
	case *fsmpb.Command_Fail:
		c.reports.WithLabelValues("failed", reportResult(r)).Inc()
	case *fsmpb.Command_Nack:
		c.reports.WithLabelValues("nack", reportResult(r)).Inc()
	case *fsmpb.Command_Hold:
		c.reports.WithLabelValues("held", reportResult(r)).Inc()
	case *fsmpb.Command_Steal:
		if len(r.Items) > 0 {
			c.steals.Inc()
			c.stolen.Add(float64(indexes(r.Items)))
		}
	case *fsmpb.Command_Expire:
		c.expired.Add(float64(len(r.Expired)))
		c.expiredItems.Add(float64(r.Repended))
		c.removed.Add(float64(len(r.Removed)))
	case *fsmpb.Command_ReportRange:
		c.reports.WithLabelValues("range", reportResult(r)).Inc()
	case *fsmpb.Command_Submit, *fsmpb.Command_SubmitRanges:
		s := r.Submit
		for _, v := range []struct {
			result string
			n      uint64
		}{
			{"created", s.Created}, {"already_pending", s.AlreadyPending}, {"already_running", s.AlreadyRunning},
			{"already_done", s.AlreadyDone}, {"retried", s.Retried}, {"dead", s.Dead},
		} {
			if v.n > 0 {
				c.submitted.WithLabelValues(v.result).Add(float64(v.n))
			}
		}
	}
}

// indexes counts the indexes of claimed or stolen work: an item is one, a
// range its count.
func indexes(items []fsm.Item) uint64 {
	n := uint64(0)
	for _, it := range items {
		n += max(it.Count, 1)
	}
	return n
}

// reportResult is the ledger's answer to a report as a label value.
func reportResult(r fsm.Result) string {
	switch {
	case r.Err == nil && r.Duplicate:
		return "duplicate"
	case r.Err == nil:
		return "applied"
	case errors.Is(r.Err, fsm.ErrCASMiss):
		return "cas_miss"
	case errors.Is(r.Err, fsm.ErrConflict):
		return "conflict"
	case errors.Is(r.Err, fsm.ErrRunNotFound), errors.Is(r.Err, fsm.ErrItemNotFound):
		return "not_found"
	}
	return "invalid"
}

// UnaryServerInterceptor counts and times unary requests. Put it first
// among the server's interceptors so that refusals (authorization,
// admission) are counted too.
func (c *Coordinator) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		c.observeRPC(info.FullMethod, start, err)
		return resp, err
	}
}

// StreamServerInterceptor counts and times streaming requests (health
// watches, reflection).
func (c *Coordinator) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		c.observeRPC(info.FullMethod, start, err)
		return err
	}
}

func (c *Coordinator) observeRPC(method string, start time.Time, err error) {
	c.grpcHandled.WithLabelValues(method, status.Code(err).String()).Inc()
	c.grpcSeconds.WithLabelValues(method).Observe(time.Since(start).Seconds())
}

// ServerOptions returns the interceptors as gRPC server options, chained
// so that they run before any interceptor added after them.
func (c *Coordinator) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(c.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(c.StreamServerInterceptor()),
	}
}
