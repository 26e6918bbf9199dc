package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollout/rollout/internal/connlimit"
)

// ConnMetrics counts the connections of a binary's connection-limited
// listeners (package internal/connlimit): rollout_conns_refused_total{listener,
// reason} (reason per_ip, total, first_byte_timeout or accept_error) and
// rollout_conns_open{listener}. It is a connlimit.Observer.
type ConnMetrics struct {
	refused *prometheus.CounterVec
	open    *prometheus.GaugeVec
}

var _ connlimit.Observer = (*ConnMetrics)(nil)

// NewConnMetrics registers the connection metrics on reg.
func NewConnMetrics(reg prometheus.Registerer) (*ConnMetrics, error) {
	m := &ConnMetrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollout_conns_refused_total",
			Help: "Connections a listener closed because a limit was reached (reason per_ip or total, at accept) or because they sent nothing, or did not finish their TLS handshake, in time (reason first_byte_timeout), and temporary accept errors waited out (reason accept_error).",
		}, []string{"listener", "reason"}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rollout_conns_open",
			Help: "Connections a listener holds open.",
		}, []string{"listener"}),
	}
	for _, c := range []prometheus.Collector{m.refused, m.open} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ConnRefused implements connlimit.Observer.
func (m *ConnMetrics) ConnRefused(listener, reason string) {
	m.refused.WithLabelValues(listener, reason).Inc()
}

// ConnOpened implements connlimit.Observer.
func (m *ConnMetrics) ConnOpened(listener string) { m.open.WithLabelValues(listener).Inc() }

// ConnClosed implements connlimit.Observer.
func (m *ConnMetrics) ConnClosed(listener string) { m.open.WithLabelValues(listener).Dec() }
