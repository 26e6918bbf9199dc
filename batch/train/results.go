package train

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/rollout/rollout/gpu/mlp"
)

// ErrInvalidResult: an item result is not a training result.
var ErrInvalidResult = errors.New("train: invalid item result")

// Metrics are a loss and an accuracy over Count samples: Loss is the mean
// cross-entropy, Accuracy the fraction classified right.
type Metrics struct {
	Loss     float64 `json:"loss"`
	Accuracy float64 `json:"accuracy"`
	Count    int     `json:"count"`
}

// MetricsOf turns mlp.Stats into Metrics.
func MetricsOf(s mlp.Stats) Metrics {
	return Metrics{Loss: s.MeanLoss(), Accuracy: s.Accuracy(), Count: s.Count}
}

func (m *Metrics) check(what string) error {
	if m == nil {
		return nil
	}
	switch {
	case math.IsNaN(m.Loss) || math.IsInf(m.Loss, 0) || m.Loss < 0:
		return fmt.Errorf("%w: %s loss %v is not a finite non-negative number", ErrInvalidResult, what, m.Loss)
	case !(m.Accuracy >= 0 && m.Accuracy <= 1):
		return fmt.Errorf("%w: %s accuracy %v is not in [0, 1]", ErrInvalidResult, what, m.Accuracy)
	case m.Count < 1:
		return fmt.Errorf("%w: %s count %d is not positive", ErrInvalidResult, what, m.Count)
	}
	return nil
}

// WeightsResult is the result of the init item (Step 0) and of step k's
// reduce item (Step k): a weights version.
//
//	{"v":1,"role":"reduce","step":3,"weights":"<base64 float32 LE>","blake3":"<hex>",
//	 "train":{"loss":0.41,"accuracy":0.88,"count":64},
//	 "eval":{"loss":0.35,"accuracy":0.91,"count":359}}
//
// Blake3 is mlp.Hash of the weights: the version's content address. Train
// (reduce only) is the step's batch at the step's input weights (the
// shards' totals); Eval (checkpoint steps only) is the held-out set at the
// new weights.
type WeightsResult struct {
	Role    Role     `json:"-"`
	Step    int      `json:"step"`
	Weights []byte   `json:"weights"`
	Blake3  string   `json:"blake3"`
	Train   *Metrics `json:"train,omitempty"`
	Eval    *Metrics `json:"eval,omitempty"`
}

// ShardResult is the result of step k's shard s: the gradient of the
// summed loss of its samples at the step's input weights (named by their
// blake3), and the samples' totals.
//
//	{"v":1,"role":"shard","step":3,"shard":1,"weights_blake3":"<hex>","grad":"<base64 float32 LE>",
//	 "loss_sum":10.5,"correct":14,"count":16}
type ShardResult struct {
	Step          int     `json:"step"`
	Shard         int     `json:"shard"`
	WeightsBlake3 string  `json:"weights_blake3"`
	Grad          []byte  `json:"grad"`
	LossSum       float64 `json:"loss_sum"`
	Correct       int     `json:"correct"`
	Count         int     `json:"count"`
}

// Encode returns the result's JSON (see WeightsResult). The role must be
// RoleInit or RoleReduce and every metric finite.
func (r *WeightsResult) Encode() ([]byte, error) {
	if r.Role != RoleInit && r.Role != RoleReduce {
		return nil, fmt.Errorf("%w: a weights result's role is %q", ErrInvalidResult, r.Role)
	}
	if err := r.Train.check("train"); err != nil {
		return nil, err
	}
	if err := r.Eval.check("eval"); err != nil {
		return nil, err
	}
	return encodeWithHeader(r.Role, r)
}

// Encode returns the result's JSON (see ShardResult); the loss must be
// finite.
func (r *ShardResult) Encode() ([]byte, error) {
	if math.IsNaN(r.LossSum) || math.IsInf(r.LossSum, 0) {
		return nil, fmt.Errorf("%w: shard loss sum is %v", ErrInvalidResult, r.LossSum)
	}
	return encodeWithHeader(RoleShard, r)
}

// Result is a decoded training item result: Role, and Weights (init,
// reduce) or Shard.
type Result struct {
	Role    Role
	Weights *WeightsResult
	Shard   *ShardResult
}

// DecodeResult parses and checks any training result: the version and
// role, no unknown fields, float32 vectors whole, a weights result's
// blake3 equal to the hash of its weights, metrics finite and in range, a
// shard's counts consistent. Errors wrap ErrInvalidResult.
func DecodeResult(b []byte) (*Result, error) {
	role, err := readHeader(b, "result", ErrInvalidResult)
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) (*Result, error) {
		return nil, fmt.Errorf("%w: %s result: "+format, append([]any{ErrInvalidResult, role}, args...)...)
	}
	switch role {
	case RoleInit, RoleReduce:
		w := &WeightsResult{}
		if err := strictDecode(b, w); err != nil {
			return bad("%v", err)
		}
		w.Role = role
		v, err := mlp.Decode(w.Weights)
		switch {
		case err != nil:
			return bad("%v", err)
		case len(v) == 0:
			return bad("no weights")
		case w.Blake3 != mlp.Hash(v):
			return bad("blake3 %q is not the hash of its weights (%s)", w.Blake3, mlp.Hash(v))
		case role == RoleInit && (w.Step != 0 || w.Train != nil || w.Eval != nil):
			return bad("init is step 0 with no metrics")
		case role == RoleReduce && (w.Step < 1 || w.Step > MaxSteps || w.Train == nil):
			return bad("step %d is not in [1, %d] or train metrics are missing", w.Step, MaxSteps)
		}
		if err := w.Train.check("train"); err != nil {
			return nil, err
		}
		if err := w.Eval.check("eval"); err != nil {
			return nil, err
		}
		return &Result{Role: role, Weights: w}, nil
	case RoleShard:
		s := &ShardResult{}
		if err := strictDecode(b, s); err != nil {
			return bad("%v", err)
		}
		switch {
		case s.Step < 1 || s.Step > MaxSteps || s.Shard < 0 || s.Shard >= MaxShards:
			return bad("step %d shard %d out of range", s.Step, s.Shard)
		case len(s.Grad) == 0 || len(s.Grad)%4 != 0:
			return bad("gradient of %d bytes is not a whole float32 vector", len(s.Grad))
		case len(s.WeightsBlake3) != 64:
			return bad("weights_blake3 %q is not a blake3-256 hex digest", s.WeightsBlake3)
		case s.Count < 1 || s.Correct < 0 || s.Correct > s.Count:
			return bad("correct %d of count %d", s.Correct, s.Count)
		case math.IsNaN(s.LossSum) || math.IsInf(s.LossSum, 0) || s.LossSum < 0:
			return bad("loss_sum %v is not a finite non-negative number", s.LossSum)
		}
		return &Result{Role: role, Shard: s}, nil
	}
	return nil, fmt.Errorf("%w: role %q is not init, shard or reduce", ErrInvalidResult, role)
}

// Step is one training step as the CLI and the dashboard show it: the
// step's batch loss and accuracy at its input weights (Train), the
// held-out evaluation of its output weights on checkpoint steps (Eval),
// and the output weights' blake3.
type Step struct {
	Step   int      `json:"step"`
	Blake3 string   `json:"blake3"`
	Train  Metrics  `json:"train"`
	Eval   *Metrics `json:"eval,omitempty"`
}

// StepsFromResults decodes the results of a training run's items (in any
// order; nil or empty results, those of items not done, are skipped) and
// returns its finished steps in step order: one per reduce result. Init and
// shard results are checked and skipped. A result that does not decode is
// an error naming its position; two different results for one step are an
// error.
func StepsFromResults(results [][]byte) ([]Step, error) {
	var steps []Step
	for i, b := range results {
		if len(b) == 0 {
			continue
		}
		r, err := DecodeResult(b)
		if err != nil {
			return nil, fmt.Errorf("result %d: %w", i, err)
		}
		if r.Role != RoleReduce {
			continue
		}
		w := r.Weights
		steps = append(steps, Step{Step: w.Step, Blake3: w.Blake3, Train: *w.Train, Eval: w.Eval})
	}
	slices.SortStableFunc(steps, func(a, b Step) int { return a.Step - b.Step })
	var out []Step
	for i, s := range steps {
		if i > 0 && s.Step == steps[i-1].Step {
			if s.Blake3 != steps[i-1].Blake3 {
				return nil, fmt.Errorf("%w: step %d has two results (weights %s and %s)", ErrInvalidResult, s.Step, steps[i-1].Blake3, s.Blake3)
			}
			continue
		}
		out = append(out, s)
	}
	return out, nil
}
