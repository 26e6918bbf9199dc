package main

import (
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/internal/telemetry"
	"github.com/rollout/rollout/raftnode"
	"github.com/rollout/rollout/server"
	"github.com/rollout/rollout/server/metrics"
)

// coordTelemetry is a replica's metrics and pprof listeners and metric set;
// without --metrics-addr it observes nothing.
type coordTelemetry struct {
	*telemetry.Endpoints
	m *metrics.Coordinator
}

// startTelemetry opens the listeners the flags ask for (a bad address fails
// here, before anything else starts) and builds the metric set.
func startTelemetry(f telemetry.Flags, log hclog.Logger) (*coordTelemetry, error) {
	e, err := telemetry.Start(f, log)
	if err != nil {
		return nil, err
	}
	t := &coordTelemetry{Endpoints: e}
	if e.Registry != nil {
		if t.m, err = metrics.New(e.Registry); err != nil {
			e.Close()
			return nil, err
		}
	}
	return t, nil
}

func (t *coordTelemetry) raftObserver() raftnode.Observer {
	if t.m == nil {
		return nil
	}
	return t.m
}

func (t *coordTelemetry) commandObserver() server.CommandObserver {
	if t.m == nil {
		return nil
	}
	return t.m
}

// grpcOptions are the metric interceptors, to go before every other one.
func (t *coordTelemetry) grpcOptions() []grpc.ServerOption {
	if t.m == nil {
		return nil
	}
	return t.m.ServerOptions()
}

// watch adds the scrape-time collector of node's and ledger's state (the
// tenants' included), and of the leader's memory of its workers (svc).
func (t *coordTelemetry) watch(node *raftnode.Node, ledger *fsm.Ledger, svc *server.Server) error {
	if t.Registry == nil {
		return nil
	}
	if err := metrics.RegisterPeers(t.Registry, metrics.ServerPeers(svc)); err != nil {
		return err
	}
	return metrics.RegisterState(t.Registry, node, ledger, metrics.StateConfig{
		Tenants: metrics.LedgerTenants(ledger),
		Liveness: func() metrics.LiveFigures {
			l := svc.Liveness()
			return metrics.LiveFigures{Serving: l.Serving, Live: l.Live, Heartbeats: l.Heartbeats, TTL: l.TTL, Interval: l.Interval}
		},
		Overlay: svc.WorkerViews,
	})
}
