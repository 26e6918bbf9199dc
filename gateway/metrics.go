package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's Prometheus metrics (Config.Registerer). Labels
// are bounded: route is the matched pattern (or "other"), code the HTTP
// status, status one of OpenAI's batch statuses.
type metrics struct {
	requests    *prometheus.CounterVec
	seconds     *prometheus.HistogramVec
	uploadBytes prometheus.Counter
	finalized   *prometheus.CounterVec
	quota       prometheus.Counter
}

// quotaRefused counts a create refused for its tenant's queued quota.
func (m *metrics) quotaRefused() {
	if m != nil {
		m.quota.Inc()
	}
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_gateway_requests_total",
			Help: "HTTP requests the OpenAI Batch API gateway answered, by route pattern and status code.",
		}, []string{"route", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rollout_gateway_request_seconds",
			Help:    "Time to answer a request, by route pattern (uploads and creates include their checks and the submit).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"route"}),
		uploadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_gateway_upload_bytes_total",
			Help: "Bytes of input files stored (refused uploads not counted).",
		}),
		finalized: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_gateway_batches_finalized_total",
			Help: "Batches whose output and error files this gateway wrote, by final status.",
		}, []string{"status"}),
		quota: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rollout_gateway_quota_refusals_total",
			Help: "Batch creates answered 429 because the key's tenant had its max_queued items queued (rollout tenant set NAME --max-queued).",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.seconds, m.uploadBytes, m.finalized, m.quota} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, st := range []string{statusCompleted, statusCancelled, statusExpired} {
		m.finalized.WithLabelValues(st) // exported at 0 from the start
	}
	return m, nil
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// instrument counts and times every request h answers.
func (m *metrics) instrument(h http.Handler) http.Handler {
	if m == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			route := r.Pattern
			if route == "" || route == "/" {
				route = "other"
			}
			code := sw.code
			if code == 0 {
				code = http.StatusOK
			}
			m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
			m.seconds.WithLabelValues(route).Observe(time.Since(start).Seconds())
		}()
		h.ServeHTTP(sw, r)
	})
}
