// Package metrics is the Prometheus metric set of one worker
// (rollout-worker --metrics-addr). It has two halves:
//
//   - Worker counts events as they happen: it is a worker.Observer
//     (coordinator call latency, report latency among them; item execution
//     time; drains and their outcome) and an openai.Observer (HTTP
//     requests by status code, request duration).
//   - RegisterStats, RegisterOpenAI and RegisterExec add collectors that
//     read the worker's, the openai backend's and the exec backend's own
//     counters (worker.Stats, openai.Stats, exec.Stats) at scrape time:
//     items claimed, completed, failed, nacked, stolen, dropped; stale-term
//     replies the epoch guard rejected; in-flight items, backlog,
//     throughput; openai retries; exec programs started, killed, running.
//
// Nothing here is package-level state: every metric lives in the registry
// the caller passes. Label sets are bounded: coordinator operations, item
// outcomes, notice providers (aws, gcp, signal, shutdown, other) and HTTP
// status codes (100-599, "none" when no response came, "other"). The worker
// id is not a label: each worker process exports its own metrics, and
// Prometheus adds the instance. See docs/OBSERVABILITY.md for the list.
package metrics

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/exec"
	"github.com/rollout/rollout/worker/openai"
)

// ErrInvalidArgument is returned for a nil source.
var ErrInvalidArgument = errors.New("metrics: invalid argument")

// Worker counts a worker's events. Create it with New and hand it to
// worker.Config.Observer (and openai.Config.Observer).
type Worker struct {
	callSeconds *prometheus.HistogramVec // op, result
	itemSeconds *prometheus.HistogramVec // outcome
	drainsStart *prometheus.CounterVec   // provider
	drains      *prometheus.CounterVec   // provider, outcome
	draining    prometheus.Gauge
	drainNacked prometheus.Counter
	drainCancel prometheus.Counter
	drainUnrep  prometheus.Counter

	openaiRequests *prometheus.CounterVec // code
	openaiSeconds  prometheus.Histogram
}

var (
	_ worker.Observer = (*Worker)(nil)
	_ openai.Observer = (*Worker)(nil)
)

// New builds the event metrics and registers them on reg.
func New(reg prometheus.Registerer) (*Worker, error) {
	m := &Worker{
		callSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rollout_worker_call_duration_seconds",
			Help: "Duration of the worker's calls to the coordinator (the client's retries included), by operation " +
				"(Register, Claim, Report, Heartbeat, Steal, OwnedItems, Deregister) and result (ok, error). op=\"Report\" is the report latency.",
			Buckets: prometheus.ExponentialBuckets(5e-4, 3, 11), // 0.5ms .. 30s
		}, []string{"op", "result"}),
		itemSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rollout_worker_item_duration_seconds",
			Help:    "Time the backend took for one item, by the outcome the worker reports (done, failed, nack, held).",
			Buckets: prometheus.ExponentialBuckets(1e-3, 3, 12), // 1ms .. 177s
		}, []string{"outcome"}),
		drainsStart: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_worker_drains_started_total",
			Help: "Drains begun, by the notice's provider (aws, gcp, signal, shutdown, other).",
		}, []string{"provider"}),
		drains: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_worker_drains_total",
			Help: "Drains finished, by provider and outcome (within_deadline, missed_deadline).",
		}, []string{"provider", "outcome"}),
		draining: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rollout_worker_draining",
			Help: "1 while the worker drains, else 0.",
		}),
		drainNacked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_worker_drain_nacked_items_total",
			Help: "Items a drain handed back (nacks the ledger applied while draining).",
		}),
		drainCancel: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_worker_drain_cancelled_items_total",
			Help: "In-flight items a drain cancelled because they did not fit its budget.",
		}),
		drainUnrep: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_worker_drain_unreported_items_total",
			Help: "Items whose outcome the ledger had not confirmed when a drain ended (deregistration re-pends them).",
		}),
		openaiRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_openai_requests_total",
			Help: "HTTP requests the openai backend sent (retries included), by status code (\"none\" when no response came).",
		}, []string{"code"}),
		openaiSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rollout_openai_request_duration_seconds",
			Help:    "Duration of one HTTP request of the openai backend, response body included.",
			Buckets: prometheus.ExponentialBuckets(1e-2, 3, 10), // 10ms .. 197s
		}),
	}
	for _, c := range []prometheus.Collector{
		m.callSeconds, m.itemSeconds, m.drainsStart, m.drains, m.draining, m.drainNacked, m.drainCancel, m.drainUnrep,
		m.openaiRequests, m.openaiSeconds,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ObserveCall implements worker.Observer.
func (m *Worker) ObserveCall(op string, took time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.callSeconds.WithLabelValues(op, result).Observe(took.Seconds())
}

// ObserveItem implements worker.Observer.
func (m *Worker) ObserveItem(took time.Duration, outcome rolloutv1.Outcome) {
	m.itemSeconds.WithLabelValues(outcomeLabel(outcome)).Observe(took.Seconds())
}

// ObserveDrainStart implements worker.Observer.
func (m *Worker) ObserveDrainStart(n worker.Notice) {
	m.drainsStart.WithLabelValues(providerLabel(n.Provider)).Inc()
	m.draining.Set(1)
}

// ObserveDrain implements worker.Observer.
func (m *Worker) ObserveDrain(rep worker.DrainReport) {
	outcome := "within_deadline"
	if !rep.WithinDeadline() {
		outcome = "missed_deadline"
	}
	m.drains.WithLabelValues(providerLabel(rep.Notice.Provider), outcome).Inc()
	m.drainNacked.Add(float64(len(rep.Nacked)))
	m.drainCancel.Add(float64(rep.Cancelled))
	m.drainUnrep.Add(float64(rep.Unreported))
	m.draining.Set(0)
}

// ObserveRequest implements openai.Observer.
func (m *Worker) ObserveRequest(status int, took time.Duration) {
	m.openaiRequests.WithLabelValues(codeLabel(status)).Inc()
	m.openaiSeconds.Observe(took.Seconds())
}

func outcomeLabel(o rolloutv1.Outcome) string {
	switch o {
	case rolloutv1.Outcome_OUTCOME_DONE:
		return "done"
	case rolloutv1.Outcome_OUTCOME_FAILED:
		return "failed"
	case rolloutv1.Outcome_OUTCOME_NACK:
		return "nack"
	case rolloutv1.Outcome_OUTCOME_HELD:
		return "held"
	}
	return "other"
}

func providerLabel(p string) string {
	switch p {
	case worker.ProviderAWS, worker.ProviderGCP, worker.ProviderSignal, worker.ProviderShutdown:
		return p
	}
	return "other"
}

func codeLabel(status int) string {
	switch {
	case status == 0:
		return "none"
	case status >= 100 && status <= 599:
		return strconv.Itoa(status)
	}
	return "other"
}

// StatsSource is what RegisterStats reads; *worker.Worker implements it.
type StatsSource interface {
	Stats() worker.Stats
}

var _ StatsSource = (*worker.Worker)(nil)

// RegisterStats registers on reg a collector that reads src.Stats() at
// every scrape.
func RegisterStats(reg prometheus.Registerer, src StatsSource) error {
	if src == nil {
		return ErrInvalidArgument
	}
	return reg.Register(newStatsCollector(src))
}

// OpenAISource is what RegisterOpenAI reads; *openai.Backend implements it.
type OpenAISource interface {
	Stats() openai.Stats
}

var _ OpenAISource = (*openai.Backend)(nil)

// RegisterOpenAI registers on reg a collector that reads the openai
// backend's counters at every scrape.
func RegisterOpenAI(reg prometheus.Registerer, src OpenAISource) error {
	if src == nil {
		return ErrInvalidArgument
	}
	return reg.Register(newOpenAICollector(src))
}

// ExecSource is what RegisterExec reads; *exec.Backend implements it.
type ExecSource interface {
	Stats() exec.Stats
}

var _ ExecSource = (*exec.Backend)(nil)

// RegisterExec registers on reg a collector that reads the exec backend's
// counters at every scrape.
func RegisterExec(reg prometheus.Registerer, src ExecSource) error {
	if src == nil {
		return ErrInvalidArgument
	}
	return reg.Register(newExecCollector(src))
}
