package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// statMetric is one series read from worker.Stats.
type statMetric struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(s *statsView) float64
}

// statsView is the snapshot one scrape reads.
type statsView struct {
	claimed, adopted, stolen, completed, failed, nacked, dropped uint64
	conflicts, invalid, reportErrors, reregistered, stale, term  uint64
	queued, executing, held, holdTarget                          int
	rate                                                         float64
	storeReads, storeWrites                                      uint64
}

// statsCollector reads worker.Stats at scrape time.
type statsCollector struct {
	src     StatsSource
	metrics []statMetric
}

func newStatsCollector(src StatsSource) *statsCollector {
	counter := func(name, help string, v func(s *statsView) float64) statMetric {
		return statMetric{prometheus.NewDesc(name, help, nil, nil), prometheus.CounterValue, v}
	}
	gauge := func(name, help string, v func(s *statsView) float64) statMetric {
		return statMetric{prometheus.NewDesc(name, help, nil, nil), prometheus.GaugeValue, v}
	}
	return &statsCollector{src: src, metrics: []statMetric{
		counter("rollout_worker_claimed_items_total", "Items received from Claim.",
			func(s *statsView) float64 { return float64(s.claimed) }),
		counter("rollout_worker_adopted_items_total", "Items adopted from OwnedItems (owned by the ledger's account but not held, e.g. after a failover).",
			func(s *statsView) float64 { return float64(s.adopted) }),
		counter("rollout_worker_stolen_items_total", "Items received from Steal.",
			func(s *statsView) float64 { return float64(s.stolen) }),
		counter("rollout_worker_completed_items_total", "Done reports the ledger applied.",
			func(s *statsView) float64 { return float64(s.completed) }),
		counter("rollout_worker_failed_items_total", "Failed reports the ledger applied.",
			func(s *statsView) float64 { return float64(s.failed) }),
		counter("rollout_worker_nacked_items_total", "Nacks (items handed back) the ledger applied.",
			func(s *statsView) float64 { return float64(s.nacked) }),
		counter("rollout_worker_dropped_items_total", "Items dropped because the ledger says they are no longer this worker's (stolen, expired, CAS miss).",
			func(s *statsView) float64 { return float64(s.dropped) }),
		counter("rollout_worker_conflicts_total", "Done reports refused because another result stands.",
			func(s *statsView) float64 { return float64(s.conflicts) }),
		counter("rollout_worker_invalid_reports_total", "Reports the coordinator refused as malformed.",
			func(s *statsView) float64 { return float64(s.invalid) }),
		counter("rollout_worker_report_errors_total", "Report calls that failed and were retried.",
			func(s *statsView) float64 { return float64(s.reportErrors) }),
		counter("rollout_worker_reregistrations_total", "Registrations after the first (the worker was evicted or expired).",
			func(s *statsView) float64 { return float64(s.reregistered) }),
		counter("rollout_worker_stale_replies_rejected_total", "Coordinator replies the epoch guard rejected because their term was older than the newest seen.",
			func(s *statsView) float64 { return float64(s.stale) }),
		gauge("rollout_worker_term", "The highest term (epoch) the worker has seen.",
			func(s *statsView) float64 { return float64(s.term) }),
		gauge("rollout_worker_queued_items", "Items held and waiting for an executor.",
			func(s *statsView) float64 { return float64(s.queued) }),
		gauge("rollout_worker_in_flight_items", "Items executing on the backend now.",
			func(s *statsView) float64 { return float64(s.executing) }),
		gauge("rollout_worker_backlog_items", "Queued plus in-flight items (the backlog the worker heartbeats).",
			func(s *statsView) float64 { return float64(s.queued + s.executing) }),
		gauge("rollout_worker_held_items", "Items held: queued, in flight, or finished and not yet confirmed by the ledger.",
			func(s *statsView) float64 { return float64(s.held) }),
		gauge("rollout_worker_hold_target_items", "How many items the worker aims to hold, sized from its throughput.",
			func(s *statsView) float64 { return float64(s.holdTarget) }),
		counter("rollout_worker_store_reads_total", "Ranged reads of payloads and dependency results from runs' object stores.",
			func(s *statsView) float64 { return float64(s.storeReads) }),
		counter("rollout_worker_store_writes_total", "Result objects written to runs' object stores (one per run per report flush).",
			func(s *statsView) float64 { return float64(s.storeWrites) }),
		gauge("rollout_worker_items_per_second", "Measured backend throughput (done and failed items) over the sliding window.",
			func(s *statsView) float64 { return s.rate }),
	}}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics {
		ch <- m.desc
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Stats()
	v := &statsView{
		claimed: st.Claimed, adopted: st.Adopted, stolen: st.Stolen,
		completed: st.Completed, failed: st.Failed, nacked: st.Nacked, dropped: st.Dropped,
		conflicts: st.Conflicts, invalid: st.Invalid, reportErrors: st.ReportErrors, reregistered: st.Reregistered,
		stale: st.StaleRepliesRejected, term: st.Term,
		queued: st.Queued, executing: st.Executing, held: st.Held, holdTarget: st.HoldTarget,
		rate: st.ItemsPerSec, storeReads: st.StoreReads, storeWrites: st.StoreWrites,
	}
	for _, m := range c.metrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(v))
	}
}

// openaiCollector reads openai.Stats at scrape time.
type openaiCollector struct {
	src              OpenAISource
	retries, results *prometheus.Desc
}

func newOpenAICollector(src OpenAISource) *openaiCollector {
	return &openaiCollector{
		src: src,
		retries: prometheus.NewDesc("rollout_openai_retries_total",
			"Requests the openai backend retried after a connection error, 429 or 5xx.", nil, nil),
		results: prometheus.NewDesc("rollout_openai_items_total",
			"Items the openai backend finished, by result (succeeded, failed; cancelled ones are not counted).", []string{"result"}, nil),
	}
}

func (c *openaiCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.retries
	ch <- c.results
}

func (c *openaiCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Stats()
	ch <- prometheus.MustNewConstMetric(c.retries, prometheus.CounterValue, float64(st.Retries))
	ch <- prometheus.MustNewConstMetric(c.results, prometheus.CounterValue, float64(st.Succeeded), "succeeded")
	ch <- prometheus.MustNewConstMetric(c.results, prometheus.CounterValue, float64(st.Failed), "failed")
}

// execCollector reads exec.Stats at scrape time.
type execCollector struct {
	src                              ExecSource
	started, exited, killed, answers *prometheus.Desc
	running, held                    *prometheus.Desc
}

func newExecCollector(src ExecSource) *execCollector {
	return &execCollector{
		src: src,
		started: prometheus.NewDesc("rollout_exec_programs_started_total",
			"Programs the exec backend started, restarts included.", nil, nil),
		exited: prometheus.NewDesc("rollout_exec_programs_exited_total",
			"Programs of the exec backend that ended, however (crash, kill, stop).", nil, nil),
		killed: prometheus.NewDesc("rollout_exec_programs_killed_total",
			"Programs the exec backend killed, by reason (timeout: an item had no answer in time; protocol: the program broke the line protocol).", []string{"reason"}, nil),
		answers: prometheus.NewDesc("rollout_exec_answers_total",
			"Answers the exec backend's programs gave, by kind (result, error).", []string{"kind"}, nil),
		running: prometheus.NewDesc("rollout_exec_programs_running",
			"Programs of the exec backend running now.", nil, nil),
		held: prometheus.NewDesc("rollout_exec_items_held",
			"Items the exec backend's programs hold now (sent, not yet answered).", nil, nil),
	}
}

func (c *execCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.started, c.exited, c.killed, c.answers, c.running, c.held} {
		ch <- d
	}
}

func (c *execCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Stats()
	ch <- prometheus.MustNewConstMetric(c.started, prometheus.CounterValue, float64(st.Started))
	ch <- prometheus.MustNewConstMetric(c.exited, prometheus.CounterValue, float64(st.Exited))
	ch <- prometheus.MustNewConstMetric(c.killed, prometheus.CounterValue, float64(st.Timeouts), "timeout")
	ch <- prometheus.MustNewConstMetric(c.killed, prometheus.CounterValue, float64(st.ProtocolErrors), "protocol")
	ch <- prometheus.MustNewConstMetric(c.answers, prometheus.CounterValue, float64(st.Answered), "result")
	ch <- prometheus.MustNewConstMetric(c.answers, prometheus.CounterValue, float64(st.Errors), "error")
	ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(st.Running))
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(st.Held))
}
