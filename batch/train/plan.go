package train

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"lukechampine.com/blake3"

	"github.com/rollout/rollout/internal/limits"
)

// Kind is the RunSpec.kind of a training run.
const Kind = "train"

// ErrTooLarge: a config's items or results would exceed the ledger's
// limits.
var ErrTooLarge = errors.New("train: config exceeds the ledger's limits")

// Size bounds (see CheckLimits).
const (
	// ResultOverheadBytes bounds what a result holds besides its base64
	// float32 vector: the header, step numbers, a blake3 hex digest and up
	// to six float64 and int fields with their keys.
	ResultOverheadBytes = 1024
	// PayloadOverheadBytes bounds what a payload holds besides its base64
	// samples: the header, the model (at most 16 sizes of 5 digits) and the
	// step numbers and learning rate.
	PayloadOverheadBytes = 1024
	// ClaimHeadroomBytes is left free in a gRPC message besides one reduce
	// item's payload and its dependencies' results (the other claim reply
	// fields).
	ClaimHeadroomBytes = 64 << 10
	// MaxItems bounds a run's items (1 + steps·(shards+1)).
	MaxItems = 1 << 20
)

func base64Len(n int) int { return 4 * ((n + 2) / 3) }

// MaxResultBytes is the largest result any item of the run can have: a
// weights or gradient vector of NumParams float32 in base64, plus
// ResultOverheadBytes.
func (c *Config) MaxResultBytes() int {
	return base64Len(4*c.Model.NumParams()) + ResultOverheadBytes
}

// maxShardSamples is the largest shard: shards split the batch as evenly
// as possible.
func (c *Config) maxShardSamples() int { return (c.BatchSize + c.Shards - 1) / c.Shards }

func (c *Config) samplesBytes(n int) int {
	return base64Len(4*n*c.Model.Inputs()) + base64Len(n)
}

// MaxPayloadBytes is the largest payload of the run: the largest shard's
// samples, or a checkpoint reduce's held-out set, plus
// PayloadOverheadBytes.
func (c *Config) MaxPayloadBytes() int {
	heldOut := dataSets[c.DataSet].heldOut
	return max(c.samplesBytes(c.maxShardSamples()), c.samplesBytes(heldOut)) + PayloadOverheadBytes
}

// ReduceClaimBytes bounds what a worker receives for one reduce item: its
// payload and its shards+1 dependencies' results.
func (c *Config) ReduceClaimBytes() int {
	return c.MaxPayloadBytes() + (c.Shards+1)*c.MaxResultBytes()
}

// NumItems is the run's item count: init, then shards+1 per step.
func (c *Config) NumItems() int { return 1 + c.Steps*(c.Shards+1) }

// CheckLimits refuses (ErrTooLarge, naming the numbers) a config whose
// largest result exceeds l.MaxResultBytes, whose largest payload exceeds
// l.MaxPayloadBytes, whose reduce items' claims (payload and dependency
// results) would not fit in l.MaxMessageBytes less ClaimHeadroomBytes, or
// that has more than MaxItems items.
func (c *Config) CheckLimits(l limits.Limits) error { return c.CheckLimitsFor(l, false) }

// CheckLimitsFor is CheckLimits for a run with an object store when store
// is true: its results (weights, gradients) are objects in the store and
// its items carry references to them, so neither the per-result limit nor
// the reduce claim's size bounds the model; the payload and item-count
// limits still apply.
func (c *Config) CheckLimitsFor(l limits.Limits, store bool) error {
	p := c.Model.NumParams()
	switch r := c.MaxResultBytes(); {
	case store:
	case r > l.MaxResultBytes:
		return fmt.Errorf("%w: the model has %d parameters, so a weights or gradient result is up to %d bytes (%d base64 + %d), over the ledger's per-result limit of %d bytes; make the model smaller (at most about %d parameters)",
			ErrTooLarge, p, r, base64Len(4*p), ResultOverheadBytes, l.MaxResultBytes, (l.MaxResultBytes-ResultOverheadBytes)*3/16)
	}
	if pl := c.MaxPayloadBytes(); pl > l.MaxPayloadBytes {
		return fmt.Errorf("%w: a payload is up to %d bytes (%d samples per shard, %d held-out samples, of %d features), over the ledger's per-payload limit of %d bytes; use more shards or a smaller batch",
			ErrTooLarge, pl, c.maxShardSamples(), dataSets[c.DataSet].heldOut, c.Model.Inputs(), l.MaxPayloadBytes)
	}
	if cl, lim := c.ReduceClaimBytes(), l.MaxMessageBytes-ClaimHeadroomBytes; cl > lim && !store {
		return fmt.Errorf("%w: a reduce item carries its payload and %d dependency results of up to %d bytes: %d bytes, over the %d bytes a message leaves (%d less %d); use fewer shards or a smaller model",
			ErrTooLarge, c.Shards+1, c.MaxResultBytes(), cl, lim, l.MaxMessageBytes, ClaimHeadroomBytes)
	}
	if n := c.NumItems(); n > MaxItems {
		return fmt.Errorf("%w: %d steps of %d shards are %d items, the limit is %d", ErrTooLarge, c.Steps, c.Shards, n, MaxItems)
	}
	return nil
}

// Item ids: blake3-256 of "rollout-train/v1", the run name and the item's
// role name, each preceded by its length. Role names: "init",
// "step/<k>/shard/<s>", "step/<k>/reduce".
func itemID(run, role string) []byte {
	h := blake3.New(32, nil)
	for _, part := range []string{"rollout-train/v1", run, role} {
		var n [8]byte
		for i := range n {
			n[i] = byte(uint64(len(part)) >> (8 * i))
		}
		h.Write(n[:])
		h.Write([]byte(part))
	}
	return h.Sum(nil)
}

// InitID is the id of run's init item (weights version 0).
func InitID(run string) []byte { return itemID(run, "init") }

// ShardID is the id of step k's (1-based) shard s (0-based).
func ShardID(run string, step, shard int) []byte {
	return itemID(run, fmt.Sprintf("step/%d/shard/%d", step, shard))
}

// ReduceID is the id of step k's reduce item (weights version k).
func ReduceID(run string, step int) []byte { return itemID(run, fmt.Sprintf("step/%d/reduce", step)) }

// WeightsID is the id of the item whose result is weights version k:
// InitID for 0, ReduceID(k) after.
func WeightsID(run string, version int) []byte {
	if version == 0 {
		return InitID(run)
	}
	return ReduceID(run, version)
}

// Item is one item of a training run, ready to submit.
type Item struct {
	ID    []byte
	Index uint64
	Role  Role
	// Step is 0 for init, else the 1-based step; Shard is the shard's
	// number (0 for the others).
	Step, Shard int
	Payload     []byte
	// DependsOn lists the ids of the items it depends on, in the order
	// their results come in: a shard depends on the step's input weights
	// item; a reduce on the input weights item, then shards 0..S-1.
	DependsOn [][]byte
}

// Plan is a training run's items. Item i of Len is a pure function of the
// config and the data set: indexes are 0 for init and, for step k and
// shard s, 1+(k-1)(S+1)+s, the reduce at s = S.
//
// Step k's batch: global positions (k-1)·B … k·B-1 over an endless
// sequence of epochs; position p is sample perm_e[p mod N] of the training
// set, e = p div N, where perm_e is a permutation of the N training
// samples drawn from a PCG stream seeded (seed, BatchStream+e). Shard s
// takes positions s·B/S … (s+1)·B/S-1 of the step's B (integer division),
// so shard sizes differ by at most one.
type Plan struct {
	cfg            *Config
	train, heldOut *Dataset
	perms          map[int][]int
}

// BatchStream is the second PCG word of epoch permutations (plus the
// epoch number).
const BatchStream = 0x62617463682f7631 // "batch/v1"

// NewPlan returns the plan of cfg over the data set d (which must be the
// set cfg names: its shapes are checked). cfg is checked with Validate (a
// Config built by hand, not parsed, may be out of range).
func NewPlan(cfg *Config, d *Digits) (*Plan, error) {
	if cfg == nil {
		return nil, fmt.Errorf("%w: no config", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	shape := dataSets[cfg.DataSet]
	switch {
	case d == nil || d.Train == nil || d.HeldOut == nil:
		return nil, fmt.Errorf("%w: no data", ErrNoData)
	case d.Train.Len() != shape.train || d.HeldOut.Len() != shape.heldOut ||
		d.Train.Features != cfg.Model.Inputs() || d.HeldOut.Features != cfg.Model.Inputs():
		return nil, fmt.Errorf("%w: the data set has %d+%d samples of %d features, the config wants %d+%d of %d",
			ErrNoData, d.Train.Len(), d.HeldOut.Len(), d.Train.Features, shape.train, shape.heldOut, cfg.Model.Inputs())
	}
	for _, ds := range []*Dataset{d.Train, d.HeldOut} {
		if err := ds.check(cfg.Model.Classes()); err != nil {
			return nil, err
		}
	}
	return &Plan{cfg: cfg, train: d.Train, heldOut: d.HeldOut, perms: map[int][]int{}}, nil
}

// Len is the number of items (Config.NumItems).
func (p *Plan) Len() int { return p.cfg.NumItems() }

// Config is the plan's config.
func (p *Plan) Config() *Config { return p.cfg }

// perm returns epoch e's permutation (cached).
func (p *Plan) perm(e int) []int {
	if pm, ok := p.perms[e]; ok {
		return pm
	}
	pm := rand.New(rand.NewPCG(p.cfg.Seed, BatchStream+uint64(e))).Perm(p.train.Len())
	if len(p.perms) > 4 {
		clear(p.perms)
	}
	p.perms[e] = pm
	return pm
}

// ShardSamples returns the training-set indexes of step k's (1-based)
// shard s (0-based); a step or shard out of range is an error.
func (p *Plan) ShardSamples(step, shard int) ([]int, error) {
	if step < 1 || step > p.cfg.Steps || shard < 0 || shard >= p.cfg.Shards {
		return nil, fmt.Errorf("train: step %d shard %d is not in the plan (steps 1..%d, shards 0..%d)", step, shard, p.cfg.Steps, p.cfg.Shards-1)
	}
	b, s, n := p.cfg.BatchSize, p.cfg.Shards, p.train.Len()
	lo, hi := shard*b/s, (shard+1)*b/s
	idx := make([]int, 0, hi-lo)
	for j := lo; j < hi; j++ {
		pos := (step-1)*b + j
		idx = append(idx, p.perm(pos / n)[pos%n])
	}
	return idx, nil
}

// IsCheckpoint reports whether step k's reduce evaluates the held-out set:
// every CheckpointInterval steps, and the last step.
func (c *Config) IsCheckpoint(step int) bool {
	return step%c.CheckpointInterval == 0 || step == c.Steps
}

// Item returns item i (0 ≤ i < Len). A Plan is not safe for concurrent
// use.
func (p *Plan) Item(i int) (Item, error) {
	c := p.cfg
	if i < 0 || i >= p.Len() {
		return Item{}, fmt.Errorf("train: item %d is not in [0, %d)", i, p.Len())
	}
	run, model := c.Name, specOf(c.Model)
	if i == 0 {
		pl, err := encodeWithHeader(RoleInit, &InitPayload{Model: model, Seed: c.Seed})
		return Item{ID: InitID(run), Index: 0, Role: RoleInit, Payload: pl}, err
	}
	step, s := (i-1)/(c.Shards+1)+1, (i-1)%(c.Shards+1)
	prev := WeightsID(run, step-1)
	if s < c.Shards {
		idx, err := p.ShardSamples(step, s)
		if err != nil {
			return Item{}, err
		}
		pl, err := encodeWithHeader(RoleShard, &ShardPayload{Model: model, Step: step, Shard: s,
			Samples: encodeSamples(p.train, idx)})
		return Item{ID: ShardID(run, step, s), Index: uint64(i), Role: RoleShard, Step: step, Shard: s,
			Payload: pl, DependsOn: [][]byte{prev}}, err
	}
	rp := &ReducePayload{Model: model, Step: step, Shards: c.Shards, BatchSize: c.BatchSize, LearningRate: c.LearningRate}
	if c.IsCheckpoint(step) {
		all := make([]int, p.heldOut.Len())
		for j := range all {
			all[j] = j
		}
		ev := encodeSamples(p.heldOut, all)
		rp.Eval = &ev
	}
	deps := [][]byte{prev}
	for sh := range c.Shards {
		deps = append(deps, ShardID(run, step, sh))
	}
	pl, err := encodeWithHeader(RoleReduce, rp)
	return Item{ID: ReduceID(run, step), Index: uint64(i), Role: RoleReduce, Step: step,
		Payload: pl, DependsOn: deps}, err
}
