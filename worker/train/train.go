// Package train is the worker backend of training runs (RunSpec.kind
// "train"): it executes the init, shard and reduce items that package
// batch/train plans, on one gpu.Device (the cpu device or a GPU), and
// reports their results in batch/train's formats.
//
// # The epoch guard before every launch
//
// A Backend is built with the worker's view of the newest coordinator term
// (the coordclient EpochGuard's Highest). Every item runs on a view of the
// device that, immediately before every kernel launch (and before the item
// starts and before its result is returned), compares the item's Term (the
// term of the reply that delivered it) with the newest term seen: an item
// from an older term is refused with an error wrapping worker.ErrStaleItem,
// so the kernel is never launched and the worker drops the item without
// reporting it. The ledger hands it out again under the new term if it is
// still this worker's.
//
// # Checks
//
// An item of another kind fails with ErrNotTrain. Dependencies are checked
// against the plan before anything runs: their ids (batch/train's
// deterministic ids for the item's run), their roles and steps, each
// weights result's blake3 against its bytes, and each shard's gradient
// against the weights it was computed at (weights_blake3). A mismatch
// fails the item with ErrDependency naming it.
//
// Calls to the device are serialized (one item's kernels at a time), so a
// Backend is safe for any worker concurrency.
package train

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rollout/rollout/batch/train"
	"github.com/rollout/rollout/gpu"
	"github.com/rollout/rollout/gpu/mlp"
	"github.com/rollout/rollout/worker"
)

// Errors of this package.
var (
	// ErrNotTrain: the item is not of a training run (its Kind is not
	// batch/train.Kind).
	ErrNotTrain = errors.New("train backend: not a training item")
	// ErrDependency: the item's dependencies are not what its role needs.
	ErrDependency = errors.New("train backend: invalid dependencies")
	// ErrInvalidArgument: NewBackend or OpenDevice got a bad argument.
	ErrInvalidArgument = errors.New("train backend: invalid argument")
)

// Backend runs training items on one device. Create it with NewBackend.
type Backend struct {
	dev    gpu.Device
	newest func() uint64
	mu     sync.Mutex // serializes use of dev
}

var _ worker.Backend = (*Backend)(nil)

// NewBackend returns a Backend that runs items on dev, refusing items
// whose Term is older than newestTerm() before every kernel launch. The
// caller keeps ownership of dev (and closes it after the worker stops).
func NewBackend(dev gpu.Device, newestTerm func() uint64) (*Backend, error) {
	if dev == nil {
		return nil, fmt.Errorf("%w: device is nil", ErrInvalidArgument)
	}
	if newestTerm == nil {
		return nil, fmt.Errorf("%w: newestTerm is nil", ErrInvalidArgument)
	}
	return &Backend{dev: dev, newest: newestTerm}, nil
}

// Device is the backend's device.
func (b *Backend) Device() gpu.Device { return b.dev }

// Run executes one training item and returns its result (see
// batch/train's WeightsResult and ShardResult).
func (b *Backend) Run(ctx context.Context, it worker.Item) ([]byte, error) {
	if it.Kind != train.Kind {
		return nil, fmt.Errorf("%w: item %d of run %q has kind %q, this worker's backend runs only %q items",
			ErrNotTrain, it.Index, it.Run, it.Kind, train.Kind)
	}
	g := &guard{Device: b.dev, ctx: ctx, term: it.Term, newest: b.newest}
	if err := g.check("item"); err != nil {
		return nil, err
	}
	p, err := train.DecodePayload(it.Payload)
	if err != nil {
		return nil, err
	}
	var res []byte
	switch p.Role {
	case train.RoleInit:
		res, err = b.init(it, p.Init)
	case train.RoleShard:
		res, err = b.shard(g, it, p.Shard)
	case train.RoleReduce:
		res, err = b.reduce(g, it, p.Reduce)
	}
	if err != nil {
		return nil, err
	}
	if err := g.check("result"); err != nil {
		return nil, err
	}
	return res, nil
}

func (b *Backend) init(it worker.Item, p *train.InitPayload) ([]byte, error) {
	if len(it.Deps) != 0 {
		return nil, fmt.Errorf("%w: init has %d dependencies, want none", ErrDependency, len(it.Deps))
	}
	cfg, err := p.Model.Config()
	if err != nil {
		return nil, err
	}
	w, err := cfg.Init(p.Seed)
	if err != nil {
		return nil, err
	}
	return (&train.WeightsResult{Role: train.RoleInit, Step: 0, Weights: mlp.Encode(w), Blake3: mlp.Hash(w)}).Encode()
}

// weightsDep decodes dependency 0: weights version step-1 of run.
func weightsDep(it worker.Item, step int, cfg mlp.Config) ([]float32, string, error) {
	d := it.Deps[0]
	if want := train.WeightsID(it.Run, step-1); string(d.ID) != string(want) {
		return nil, "", fmt.Errorf("%w: dependency 0 is item %x, want weights version %d (%x)", ErrDependency, d.ID, step-1, want)
	}
	r, err := train.DecodeResult(d.Result)
	if err != nil {
		return nil, "", fmt.Errorf("%w: dependency 0 (weights version %d): %v", ErrDependency, step-1, err)
	}
	if r.Weights == nil || r.Weights.Step != step-1 {
		return nil, "", fmt.Errorf("%w: dependency 0 is not weights version %d", ErrDependency, step-1)
	}
	w, err := mlp.Decode(r.Weights.Weights)
	if err != nil {
		return nil, "", fmt.Errorf("%w: dependency 0: %v", ErrDependency, err)
	}
	if len(w) != cfg.NumParams() {
		return nil, "", fmt.Errorf("%w: weights version %d has %d parameters, the model has %d", ErrDependency, step-1, len(w), cfg.NumParams())
	}
	return w, r.Weights.Blake3, nil
}

func (b *Backend) shard(g *guard, it worker.Item, p *train.ShardPayload) ([]byte, error) {
	cfg, err := p.Model.Config()
	if err != nil {
		return nil, err
	}
	if len(it.Deps) != 1 {
		return nil, fmt.Errorf("%w: shard has %d dependencies, want 1 (the step's input weights)", ErrDependency, len(it.Deps))
	}
	w, hash, err := weightsDep(it, p.Step, cfg)
	if err != nil {
		return nil, err
	}
	x, y, err := p.Samples.Decode(cfg.Inputs(), cfg.Classes())
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	grad, st, err := cfg.Gradient(g, w, x, y)
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return (&train.ShardResult{Step: p.Step, Shard: p.Shard, WeightsBlake3: hash, Grad: mlp.Encode(grad),
		LossSum: st.Loss, Correct: st.Correct, Count: st.Count}).Encode()
}

func (b *Backend) reduce(g *guard, it worker.Item, p *train.ReducePayload) ([]byte, error) {
	cfg, err := p.Model.Config()
	if err != nil {
		return nil, err
	}
	if len(it.Deps) != 1+p.Shards {
		return nil, fmt.Errorf("%w: reduce has %d dependencies, want %d (the step's input weights and %d shards)",
			ErrDependency, len(it.Deps), 1+p.Shards, p.Shards)
	}
	w, hash, err := weightsDep(it, p.Step, cfg)
	if err != nil {
		return nil, err
	}
	grads := make([][]float32, p.Shards)
	var total mlp.Stats // the step's batch, summed in shard order
	for s := range p.Shards {
		d := it.Deps[1+s]
		if want := train.ShardID(it.Run, p.Step, s); string(d.ID) != string(want) {
			return nil, fmt.Errorf("%w: dependency %d is item %x, want step %d shard %d (%x)", ErrDependency, 1+s, d.ID, p.Step, s, want)
		}
		r, err := train.DecodeResult(d.Result)
		if err != nil {
			return nil, fmt.Errorf("%w: dependency %d (step %d shard %d): %v", ErrDependency, 1+s, p.Step, s, err)
		}
		sr := r.Shard
		switch {
		case sr == nil || sr.Step != p.Step || sr.Shard != s:
			return nil, fmt.Errorf("%w: dependency %d is not step %d shard %d's result", ErrDependency, 1+s, p.Step, s)
		case sr.WeightsBlake3 != hash:
			return nil, fmt.Errorf("%w: step %d shard %d was computed at weights %s, the step's input weights are %s",
				ErrDependency, p.Step, s, sr.WeightsBlake3, hash)
		}
		if grads[s], err = mlp.Decode(sr.Grad); err != nil {
			return nil, fmt.Errorf("%w: step %d shard %d: %v", ErrDependency, p.Step, s, err)
		}
		total.Loss += sr.LossSum
		total.Correct += sr.Correct
		total.Count += sr.Count
	}
	if total.Count != p.BatchSize {
		return nil, fmt.Errorf("%w: step %d's shards total %d samples, the batch is %d", ErrDependency, p.Step, total.Count, p.BatchSize)
	}
	trainM := train.MetricsOf(total)
	res := &train.WeightsResult{Role: train.RoleReduce, Step: p.Step, Train: &trainM}
	b.mu.Lock()
	defer b.mu.Unlock()
	nw, err := cfg.Update(g, w, grads, total.Count, p.LearningRate)
	if err != nil {
		return nil, err
	}
	if p.Eval != nil {
		x, y, err := p.Eval.Decode(cfg.Inputs(), cfg.Classes())
		if err != nil {
			return nil, err
		}
		st, err := cfg.Evaluate(g, nw, x, y)
		if err != nil {
			return nil, err
		}
		ev := train.MetricsOf(st)
		res.Eval = &ev
	}
	res.Weights, res.Blake3 = mlp.Encode(nw), mlp.Hash(nw)
	return res.Encode()
}

var _ worker.Summarizer = (*Backend)(nil)

// Summary returns the small summary of a training result that the ledger
// keeps with the item (batch/train.EncodeSummary: role, step, shard,
// weights hash, loss and accuracy), or nil when res is not a training
// result.
func (b *Backend) Summary(_ worker.Item, res []byte) []byte {
	s, err := train.EncodeSummary(res)
	if err != nil {
		return nil
	}
	return s
}
