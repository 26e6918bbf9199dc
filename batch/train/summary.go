package train

import (
	"errors"
	"fmt"
	"slices"

	"github.com/rollout/rollout/internal/limits"
)

// ErrInvalidSummary: bytes that are not a training result summary.
var ErrInvalidSummary = errors.New("train: invalid result summary")

// MaxSummaryBytes bounds an encoded Summary (the ledger's default
// max_summary_bytes): the largest, a reduce's with both metrics, is about
// 300 bytes.
const MaxSummaryBytes = limits.MaxSummaryBytes

// Summary is the small digest of a training item's result that the ledger
// keeps with the item (ItemReport.summary) while the result itself (the
// weights or the gradient) lives in the run's store: what the CLI and the
// dashboard show without reading the store.
//
//	{"v":1,"role":"reduce","step":3,"blake3":"<hex>",
//	 "train":{"loss":0.41,"accuracy":0.88,"count":64},"eval":{...}}
//	{"v":1,"role":"shard","step":3,"shard":1,"blake3":"<hex of the input weights>",
//	 "train":{"loss":0.65,"accuracy":0.87,"count":16}}
//	{"v":1,"role":"init","step":0,"blake3":"<hex>"}
//
// Blake3 is the weights version's hash (init, reduce) or the hash of the
// weights a shard's gradient was computed at. Train is a reduce's step
// batch metrics, or a shard's own (mean loss, accuracy, count); Eval is a
// checkpoint reduce's held-out metrics.
type Summary struct {
	Role   Role     `json:"-"`
	Step   int      `json:"step"`
	Shard  int      `json:"shard,omitempty"`
	Blake3 string   `json:"blake3"`
	Train  *Metrics `json:"train,omitempty"`
	Eval   *Metrics `json:"eval,omitempty"`
}

// SummaryOf returns the summary of a decoded result.
func SummaryOf(r *Result) (*Summary, error) {
	switch {
	case r == nil:
		return nil, fmt.Errorf("%w: no result", ErrInvalidResult)
	case r.Weights != nil:
		w := r.Weights
		return &Summary{Role: r.Role, Step: w.Step, Blake3: w.Blake3, Train: w.Train, Eval: w.Eval}, nil
	case r.Shard != nil:
		s := r.Shard
		m := &Metrics{Loss: s.LossSum / float64(s.Count), Accuracy: float64(s.Correct) / float64(s.Count), Count: s.Count}
		return &Summary{Role: RoleShard, Step: s.Step, Shard: s.Shard, Blake3: s.WeightsBlake3, Train: m}, nil
	}
	return nil, fmt.Errorf("%w: a result of role %q holds nothing", ErrInvalidResult, r.Role)
}

// EncodeSummary decodes a training item's result (DecodeResult) and
// returns its Summary's JSON.
func EncodeSummary(result []byte) ([]byte, error) {
	r, err := DecodeResult(result)
	if err != nil {
		return nil, err
	}
	s, err := SummaryOf(r)
	if err != nil {
		return nil, err
	}
	return s.Encode()
}

// Encode returns the summary's JSON; its metrics must be finite and in
// range and the whole at most MaxSummaryBytes.
func (s *Summary) Encode() ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	b, err := encodeWithHeader(s.Role, s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSummary, err)
	}
	if len(b) > MaxSummaryBytes {
		return nil, fmt.Errorf("%w: %d bytes, over %d", ErrInvalidSummary, len(b), MaxSummaryBytes)
	}
	return b, nil
}

func (s *Summary) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s summary: "+format, append([]any{ErrInvalidSummary, s.Role}, args...)...)
	}
	switch s.Role {
	case RoleInit:
		if s.Step != 0 || s.Shard != 0 || s.Train != nil || s.Eval != nil {
			return bad("init is step 0 with no metrics")
		}
	case RoleReduce:
		if s.Step < 1 || s.Step > MaxSteps || s.Shard != 0 || s.Train == nil {
			return bad("step %d is not in [1, %d], or a shard number or the train metrics are wrong", s.Step, MaxSteps)
		}
	case RoleShard:
		if s.Step < 1 || s.Step > MaxSteps || s.Shard < 0 || s.Shard >= MaxShards || s.Train == nil || s.Eval != nil {
			return bad("step %d shard %d out of range, or metrics missing", s.Step, s.Shard)
		}
	default:
		return fmt.Errorf("%w: role %q is not init, shard or reduce", ErrInvalidSummary, s.Role)
	}
	if len(s.Blake3) != 64 {
		return bad("blake3 %q is not a blake3-256 hex digest", s.Blake3)
	}
	for _, m := range []struct {
		what string
		m    *Metrics
	}{{"train", s.Train}, {"eval", s.Eval}} {
		if err := m.m.check(m.what); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidSummary, err)
		}
	}
	return nil
}

// DecodeSummary parses and checks a summary written by Encode: the version,
// the role, no unknown fields, numbers in range. Errors wrap
// ErrInvalidSummary.
func DecodeSummary(b []byte) (*Summary, error) {
	if len(b) > MaxSummaryBytes {
		return nil, fmt.Errorf("%w: %d bytes, over %d", ErrInvalidSummary, len(b), MaxSummaryBytes)
	}
	role, err := readHeader(b, "summary", ErrInvalidSummary)
	if err != nil {
		return nil, err
	}
	s := &Summary{}
	if err := strictDecode(b, s); err != nil {
		return nil, fmt.Errorf("%w: %s summary: %v", ErrInvalidSummary, role, err)
	}
	s.Role = role
	if err := s.check(); err != nil {
		return nil, err
	}
	return s, nil
}

// StepsFromSummaries is StepsFromResults over the items' summaries: the
// run's finished steps in step order, one per reduce summary (empty
// summaries, of items not done, are skipped; init and shard summaries are
// checked and skipped).
func StepsFromSummaries(summaries [][]byte) ([]Step, error) {
	var steps []Step
	for i, b := range summaries {
		if len(b) == 0 {
			continue
		}
		s, err := DecodeSummary(b)
		if err != nil {
			return nil, fmt.Errorf("summary %d: %w", i, err)
		}
		if s.Role != RoleReduce {
			continue
		}
		steps = append(steps, Step{Step: s.Step, Blake3: s.Blake3, Train: *s.Train, Eval: s.Eval})
	}
	slices.SortStableFunc(steps, func(a, b Step) int { return a.Step - b.Step })
	var out []Step
	for i, s := range steps {
		if i > 0 && s.Step == steps[i-1].Step {
			if s.Blake3 != steps[i-1].Blake3 {
				return nil, fmt.Errorf("%w: step %d has two summaries (weights %s and %s)", ErrInvalidSummary, s.Step, steps[i-1].Blake3, s.Blake3)
			}
			continue
		}
		out = append(out, s)
	}
	return out, nil
}
