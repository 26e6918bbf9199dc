package fsm

import (
	"fmt"
	"slices"

	"github.com/rollout/rollout/internal/limits"
)

// Models and the workers that serve them.
//
// A run's model is its RunSpec.model. A worker registers the models it
// serves (RegisterWorkerCmd.models); Claim and Steal give it items of runs
// whose model is one of them, so that a worker in front of one model's
// server never receives an item of another model. A worker that names no
// model serves every model, and a run that names no model (RunSpec.model
// empty: training runs, raw API runs) is served by every worker: there is
// nothing to route on. Models combine with kinds: a worker takes an item
// when it runs the run's kind and serves the run's model.
//
// The claim queue is indexed by (kind, model) (kinds.go), so a claim skips
// the items of runs whose model the worker does not serve a queue at a
// time, never an item at a time.

// checkModels validates a Register command's models and returns them
// sorted and without repeats; nil means every model. Each is a non-empty,
// printable name of at most limits.MaxModelBytes bytes (RunSpec.model's bound).
func checkModels(models []string) ([]string, error) {
	if len(models) > limits.MaxWorkerModels {
		return nil, fmt.Errorf("%w: register names %d models, limit %d", ErrInvalidCommand, len(models), limits.MaxWorkerModels)
	}
	if len(models) == 0 {
		return nil, nil
	}
	out := make([]string, 0, len(models))
	for i, m := range models {
		if err := checkName(fmt.Sprintf("register model %d", i), m, limits.MaxModelBytes); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// serves reports whether w serves model (a run's model; "" is served by
// every worker).
func (w *worker) serves(model string) bool {
	if w.models == nil || model == "" {
		return true
	}
	_, found := slices.BinarySearch(w.models, model)
	return found
}

// takes reports whether w takes items of the runs in queue k: it runs k's
// kind and serves k's model.
func (w *worker) takes(k queueKey) bool {
	return w.runs(k.kind) && w.serves(k.model)
}

// takesAll reports whether w takes items of every run.
func (w *worker) takesAll() bool {
	return w.kinds == nil && w.models == nil
}

// takesItem reports whether w takes it (Steal's filter).
func (w *worker) takesItem(it *item) bool {
	return w.takesAll() || w.takes(keyOf(it.run))
}
