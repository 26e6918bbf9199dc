package main

import (
	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/internal/telemetry"
	"github.com/rollout/rollout/worker"
	"github.com/rollout/rollout/worker/metrics"
	"github.com/rollout/rollout/worker/openai"
)

// workerTelemetry is the worker's metrics and pprof listeners and metric
// set; without --metrics-addr it observes nothing.
type workerTelemetry struct {
	*telemetry.Endpoints
	m *metrics.Worker
}

// startTelemetry opens the listeners the flags ask for (a bad address fails
// here, before the worker starts) and builds the metric set.
func startTelemetry(f telemetry.Flags, log hclog.Logger) (*workerTelemetry, error) {
	e, err := telemetry.Start(f, log)
	if err != nil {
		return nil, err
	}
	t := &workerTelemetry{Endpoints: e}
	if e.Registry != nil {
		if t.m, err = metrics.New(e.Registry); err != nil {
			e.Close()
			return nil, err
		}
	}
	return t, nil
}

func (t *workerTelemetry) workerObserver() worker.Observer {
	if t.m == nil {
		return nil
	}
	return t.m
}

func (t *workerTelemetry) openaiObserver() openai.Observer {
	if t.m == nil {
		return nil
	}
	return t.m
}

// watch adds the scrape-time collectors of the worker's counters and, for
// the openai and exec backends, the backend's.
func (t *workerTelemetry) watch(w *worker.Worker, backend worker.Backend) error {
	if t.Registry == nil {
		return nil
	}
	if err := metrics.RegisterStats(t.Registry, w); err != nil {
		return err
	}
	if b, ok := backend.(metrics.OpenAISource); ok {
		return metrics.RegisterOpenAI(t.Registry, b)
	}
	if b, ok := backend.(metrics.ExecSource); ok {
		return metrics.RegisterExec(t.Registry, b)
	}
	return nil
}
