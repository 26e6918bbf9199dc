package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollout/rollout/server"
)

// Peer is one federation peer as the leader sees it at a scrape
// (rollout_peer_*): whether its last poll succeeded, how long ago the last
// successful one completed (negative: never), the handles of the ledger
// routed to it by state, and the forwards to it that failed since this
// replica started.
type Peer struct {
	Name          string
	Reachable     bool
	LastPollAge   time.Duration
	ClockSkew     time.Duration
	Handles       map[string]int
	ForwardErrors uint64
}

// RegisterPeers adds the collector of the peers list reads at each scrape
// (a replica started with --peers; the list is empty on a follower).
func RegisterPeers(reg prometheus.Registerer, list func() []Peer) error {
	if list == nil {
		return fmt.Errorf("%w: the peers list is required", ErrInvalidConfig)
	}
	return reg.Register(&peerCollector{list: list, d: newPeerDescs()})
}

type peerDescs struct {
	reachable, handles, forwardErrors, pollAge, skew *prometheus.Desc
}

func newPeerDescs() peerDescs {
	return peerDescs{
		reachable: prometheus.NewDesc("rollout_peer_reachable",
			"1 when the leader's last poll of the peer cluster succeeded, else 0 (leader only).", []string{"peer"}, nil),
		handles: prometheus.NewDesc("rollout_peer_handles",
			"Runs of this ledger handed to the peer, by handle state (pending, acknowledged, finished, cancelled, lost, refused).", []string{"peer", "state"}, nil),
		forwardErrors: prometheus.NewDesc("rollout_peer_forward_errors_total",
			"Calls forwarded to the peer (submits, cancels, deletes) that failed, since this replica started.", []string{"peer"}, nil),
		pollAge: prometheus.NewDesc("rollout_peer_last_poll_age_seconds",
			"Seconds since the leader's last successful poll of the peer (absent before the first).", []string{"peer"}, nil),
		skew: prometheus.NewDesc("rollout_peer_clock_skew_seconds",
			"The peer's clock minus this leader's, as of the last poll.", []string{"peer"}, nil),
	}
}

type peerCollector struct {
	list func() []Peer
	d    peerDescs
}

func (c *peerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.d.reachable, c.d.handles, c.d.forwardErrors, c.d.pollAge, c.d.skew} {
		ch <- d
	}
}

func (c *peerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.list() {
		up := 0.0
		if p.Reachable {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.d.reachable, prometheus.GaugeValue, up, p.Name)
		for state, n := range p.Handles {
			ch <- prometheus.MustNewConstMetric(c.d.handles, prometheus.GaugeValue, float64(n), p.Name, state)
		}
		ch <- prometheus.MustNewConstMetric(c.d.forwardErrors, prometheus.CounterValue, float64(p.ForwardErrors), p.Name)
		if p.LastPollAge >= 0 {
			ch <- prometheus.MustNewConstMetric(c.d.pollAge, prometheus.GaugeValue, p.LastPollAge.Seconds(), p.Name)
			ch <- prometheus.MustNewConstMetric(c.d.skew, prometheus.GaugeValue, p.ClockSkew.Seconds(), p.Name)
		}
	}
}

// ServerPeers returns a RegisterPeers list that reads svc's peers.
func ServerPeers(svc *server.Server) func() []Peer {
	return func() []Peer {
		figs := svc.PeerFigures()
		out := make([]Peer, len(figs))
		for i, f := range figs {
			out[i] = Peer{Name: f.Name, Reachable: f.Reachable, LastPollAge: f.LastPollAge, ClockSkew: f.ClockSkew,
				Handles: f.Handles, ForwardErrors: f.ForwardErrors}
		}
		return out
	}
}
