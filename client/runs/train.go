package runs

import (
	"context"
	"errors"
	"fmt"
	"time"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch/train"
)

// ErrNotTraining: the run is not a training run (its kind is not
// train.Kind), or its items are not laid out as a training plan.
var ErrNotTraining = errors.New("not a training run")

// TrainShape is the layout of a training run's items (see package
// batch/train): item 0 is the init item, step k's shards are at
// 1+(k-1)(Shards+1)+s and its reduce at k(Shards+1).
type TrainShape struct {
	Shards, Steps int
}

// ReduceIndex is the index of step k's reduce item (whose result is
// weights version k); 0 (the init item) for k = 0.
func (s TrainShape) ReduceIndex(k int) uint64 { return uint64(k * (s.Shards + 1)) }

// Items is the number of items of the whole run.
func (s TrainShape) Items() uint64 { return 1 + uint64(s.Steps)*uint64(s.Shards+1) }

// Completed is the number of steps whose reduce is Done when done items
// of the run are Done and none is dead: item dependencies finish the init
// item, then each step's shards and reduce before any item of the next
// step, so done = 1 + completed·(Shards+1) + (shards of the next step).
func (s TrainShape) Completed(done uint64) int {
	if done == 0 {
		return 0
	}
	return min(int((done-1)/uint64(s.Shards+1)), s.Steps)
}

// ItemAt reads the item at index (one Results call from index, limit 1);
// nil when the run holds no item at that index.
func ItemAt(ctx context.Context, c ResultsReader, run string, index uint64, timeout time.Duration) (*rolloutv1.ResultItem, error) {
	timeout = orDefault(timeout, DefaultTimeout)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.Results(cctx, &rolloutv1.ResultsRequest{Run: run, FromIndex: index, Limit: 1})
	if isNotFound(err) {
		return nil, newNotFound(run, err)
	}
	if err != nil {
		return nil, callError(fmt.Sprintf("reading item %d", index), timeout, err)
	}
	if items := resp.GetItems(); len(items) > 0 && items[0].GetIndex() == index {
		return items[0], nil
	}
	return nil, nil
}

// DiscoverTrainShape finds a training run's layout from its counters and
// its last item: the last item the run holds is a reduce (a plan is
// submitted whole, or up to a step's reduce), which depends on the step's
// input weights and its Shards shards; Steps follows from the run's target
// (spec total, 1+Steps(Shards+1)). A run of another kind, or one whose
// items do not fit that layout, is ErrNotTraining.
func DiscoverTrainShape(ctx context.Context, c ResultsReader, rc *rolloutv1.RunCounters, timeout time.Duration) (TrainShape, error) {
	if rc.GetKind() != train.Kind {
		return TrainShape{}, fmt.Errorf("run %q: %w (kind %q)", rc.GetName(), ErrNotTraining, rc.GetKind())
	}
	if rc.GetTotal() < 3 {
		return TrainShape{}, fmt.Errorf("run %q: %w: %d items", rc.GetName(), ErrNotTraining, rc.GetTotal())
	}
	last, err := ItemAt(ctx, c, rc.GetName(), rc.GetTotal()-1, timeout)
	if err != nil {
		return TrainShape{}, err
	}
	deps := len(last.GetDependsOn())
	target := rc.Target()
	if last == nil || deps < 2 || (target-1)%uint64(deps) != 0 {
		return TrainShape{}, fmt.Errorf("run %q: %w: its items are not laid out as a training plan", rc.GetName(), ErrNotTraining)
	}
	return TrainShape{Shards: deps - 1, Steps: int((target - 1) / uint64(deps))}, nil
}

// StepResult is one finished step of a training run: its metrics and
// output weights (see train.WeightsResult).
type StepResult struct {
	train.Step
	// Weights is the step's output weights (little-endian float32; its
	// blake3 is Step.Blake3).
	Weights []byte
}

// ReadStep reads step k's reduce item and decodes its result; ok is false
// when the item is not Done yet. k = 0 reads the init item (weights
// version 0, no metrics). When the result lives in the run's store and c
// does not read it (see WithStore), the step comes from the result's
// summary in the ledger: metrics and hash, without Weights.
func ReadStep(ctx context.Context, c ResultsReader, run string, shape TrainShape, k int, timeout time.Duration) (StepResult, bool, error) {
	it, err := ItemAt(ctx, c, run, shape.ReduceIndex(k), timeout)
	if err != nil {
		return StepResult{}, false, err
	}
	if it == nil || it.GetState() != rolloutv1.ItemState_ITEM_STATE_DONE {
		return StepResult{}, false, nil
	}
	if len(it.GetResult()) == 0 && it.GetResultRef() != nil && len(it.GetSummary()) > 0 {
		s, err := train.DecodeSummary(it.GetSummary())
		if err != nil {
			return StepResult{}, false, fmt.Errorf("run %q step %d (item %d): %w", run, k, it.GetIndex(), err)
		}
		if s.Step != k || (s.Role != train.RoleReduce && s.Role != train.RoleInit) {
			return StepResult{}, false, fmt.Errorf("run %q item %d: %w: want the weights of step %d, got a %s summary", run, it.GetIndex(), ErrNotTraining, k, s.Role)
		}
		st := StepResult{Step: train.Step{Step: k, Blake3: s.Blake3, Eval: s.Eval}}
		if s.Train != nil {
			st.Train = *s.Train
		}
		return st, true, nil
	}
	r, err := train.DecodeResult(it.GetResult())
	if err != nil {
		return StepResult{}, false, fmt.Errorf("run %q step %d (item %d): %w", run, k, it.GetIndex(), err)
	}
	if r.Weights == nil || r.Weights.Step != k {
		return StepResult{}, false, fmt.Errorf("run %q item %d: %w: want the weights of step %d, got a %s result", run, it.GetIndex(), ErrNotTraining, k, r.Role)
	}
	w := r.Weights
	st := StepResult{Step: train.Step{Step: k, Blake3: w.Blake3, Eval: w.Eval}, Weights: w.Weights}
	if w.Train != nil {
		st.Train = *w.Train
	}
	return st, true, nil
}

// TrainSteps reads every item of a training run (Results) and returns its
// finished steps in order (train.StepsFromResults), with the newest
// weights version's bytes (nil when not even the init item is done).
func TrainSteps(ctx context.Context, c ResultsReader, run string, cfg ResultsConfig) (steps []train.Step, newest []byte, err error) {
	var results [][]byte
	newestStep := -1
	err = Results(ctx, c, run, cfg, func(it *rolloutv1.ResultItem) error {
		if it.GetState() != rolloutv1.ItemState_ITEM_STATE_DONE {
			return nil
		}
		r, err := train.DecodeResult(it.GetResult())
		if err != nil {
			return fmt.Errorf("run %q item %d: %w", run, it.GetIndex(), err)
		}
		if r.Weights != nil && r.Weights.Step > newestStep {
			newestStep, newest = r.Weights.Step, r.Weights.Weights
		}
		results = append(results, it.GetResult())
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	steps, err = train.StepsFromResults(results)
	return steps, newest, err
}

// FollowConfig configures FollowTraining.
type FollowConfig struct {
	// Interval is the time between two status reads (0: DefaultInterval).
	Interval time.Duration
	// Timeout bounds each call (0: DefaultTimeout).
	Timeout time.Duration
	// UntilStep, when positive, ends FollowTraining once that step's
	// weights are Done instead of when the run finishes.
	UntilStep int
	// Step, when set, is called once per finished step, in step order
	// (step 0, the init weights, included).
	Step func(StepResult) error
	// Progress, when set, is called with every status read.
	Progress func(resp *rolloutv1.RunStatusResponse, rc *rolloutv1.RunCounters) error
}

// FollowTraining reads the run's status every cfg.Interval and, as steps
// finish, each new step's reduce result, telling cfg.Step about each in
// order. It returns the last counters and the last step read when the run
// is finished (every step read) or, with cfg.UntilStep, when that step is
// read. A run with dead items is not an error here: it ends when nothing
// more can run (the caller checks rc.Dead). Errors are Status's and
// ReadStep's, ctx's, or what cfg.Step or cfg.Progress return.
func FollowTraining(ctx context.Context, c Coordinator, run string, shape TrainShape, cfg FollowConfig) (*rolloutv1.RunCounters, *StepResult, error) {
	if cfg.Interval < 0 || cfg.Timeout < 0 || cfg.UntilStep < 0 || cfg.UntilStep > shape.Steps {
		return nil, nil, fmt.Errorf("%w: Interval, Timeout must not be negative and UntilStep must be in [0, %d]", ErrInvalidConfig, shape.Steps)
	}
	until := shape.Steps
	if cfg.UntilStep > 0 {
		until = cfg.UntilStep
	}
	t := time.NewTicker(orDefault(cfg.Interval, DefaultInterval))
	defer t.Stop()
	next := 0 // the next step to read
	var last *StepResult
	for {
		resp, rc, err := Status(ctx, c, run, cfg.Timeout)
		if err != nil {
			return nil, last, err
		}
		if cfg.Progress != nil {
			if err := cfg.Progress(resp, rc); err != nil {
				return nil, last, err
			}
		}
		for completed := shape.Completed(rc.GetDone()); next <= min(completed, until); next++ {
			st, ok, err := ReadStep(ctx, c, run, shape, next, cfg.Timeout)
			if err != nil {
				return nil, last, err
			}
			if !ok {
				break // counted but not read as Done yet: read it next time
			}
			last = &st
			if cfg.Step != nil {
				if err := cfg.Step(st); err != nil {
					return nil, last, err
				}
			}
		}
		if next > until {
			return rc, last, nil
		}
		if rc.Stuck() || (rc.Finished() && rc.GetDead() > 0) {
			// Dead items block everything left: nothing more will finish.
			return rc, last, nil
		}
		select {
		case <-ctx.Done():
			return nil, last, ctx.Err()
		case <-t.C:
		}
	}
}
