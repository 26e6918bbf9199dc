package train

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/rollout/rollout/gpu/mlp"
)

// Role is what a training item does.
type Role string

// The roles of a training run's items.
const (
	// RoleInit computes weights version 0 from the seed.
	RoleInit Role = "init"
	// RoleShard computes the gradient of one shard of a step's batch at the
	// step's input weights.
	RoleShard Role = "shard"
	// RoleReduce sums a step's shard gradients in shard order, applies the
	// SGD update and yields the step's output weights.
	RoleReduce Role = "reduce"
)

// PayloadVersion is the "v" of every payload this package writes; a
// payload of another version is refused.
const PayloadVersion = 1

// ErrInvalidPayload: an item payload is not a training payload.
var ErrInvalidPayload = errors.New("train: invalid item payload")

// ModelSpec is the model as it travels in payloads.
type ModelSpec struct {
	Layers     []int  `json:"layers"`
	Activation string `json:"activation"`
}

// Config returns the mlp.Config, validated (wrapping mlp.ErrConfig).
func (m ModelSpec) Config() (mlp.Config, error) {
	a, err := mlp.ParseActivation(m.Activation)
	if err != nil {
		return mlp.Config{}, err
	}
	c := mlp.Config{Sizes: m.Layers, Act: a}
	return c, c.Validate()
}

func specOf(c mlp.Config) ModelSpec {
	return ModelSpec{Layers: c.Sizes, Activation: mlp.ActivationName(c.Act)}
}

// Samples are labelled samples as they travel in payloads: X is the
// features, little-endian float32, row-major; Y one byte per sample, the
// label (base64 in JSON, like every []byte).
type Samples struct {
	X []byte `json:"x"`
	Y []byte `json:"y"`
}

// Decode returns the samples as mlp takes them: len(Y) rows of features
// values and their labels. The shape and every label (below classes) are
// checked, and every feature must be finite (ErrInvalidPayload).
func (s Samples) Decode(features, classes int) ([]float32, []int, error) {
	n := len(s.Y)
	if n == 0 {
		return nil, nil, fmt.Errorf("%w: no samples", ErrInvalidPayload)
	}
	if features < 1 || len(s.X) != 4*n*features {
		return nil, nil, fmt.Errorf("%w: %d feature bytes for %d samples of %d features", ErrInvalidPayload, len(s.X), n, features)
	}
	x, err := mlp.Decode(s.X)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalidPayload, err)
	}
	for i, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, nil, fmt.Errorf("%w: feature %d of sample %d is %v", ErrInvalidPayload, i%features, i/features, v)
		}
	}
	y := make([]int, n)
	for i, b := range s.Y {
		if int(b) >= classes {
			return nil, nil, fmt.Errorf("%w: label %d of sample %d is not below %d classes", ErrInvalidPayload, b, i, classes)
		}
		y[i] = int(b)
	}
	return x, y, nil
}

// encodeSamples packs rows of d (by index) as Samples.
func encodeSamples(d *Dataset, idx []int) Samples {
	x := make([]float32, 0, len(idx)*d.Features)
	y := make([]byte, len(idx))
	for i, j := range idx {
		x = append(x, d.Row(j)...)
		y[i] = byte(d.Y[j])
	}
	return Samples{X: mlp.Encode(x), Y: y}
}

// InitPayload is the init item's payload:
//
//	{"v":1,"role":"init","model":{"layers":[64,32,10],"activation":"relu"},"seed":1}
type InitPayload struct {
	Model ModelSpec `json:"model"`
	Seed  uint64    `json:"seed"`
}

// ShardPayload is a shard item's payload: step k's (1-based) shard s
// (0-based) of the batch, its samples.
//
//	{"v":1,"role":"shard","model":{…},"step":1,"shard":0,"samples":{"x":"…","y":"…"}}
type ShardPayload struct {
	Model   ModelSpec `json:"model"`
	Step    int       `json:"step"`
	Shard   int       `json:"shard"`
	Samples Samples   `json:"samples"`
}

// ReducePayload is step k's reduce item's payload: how many shards to sum
// and the samples they total (BatchSize), the learning rate, and, on a
// checkpoint step, the held-out samples to evaluate the new weights on.
//
//	{"v":1,"role":"reduce","model":{…},"step":1,"shards":4,"batch_size":64,"learning_rate":0.5,"eval":{"x":"…","y":"…"}}
type ReducePayload struct {
	Model        ModelSpec `json:"model"`
	Step         int       `json:"step"`
	Shards       int       `json:"shards"`
	BatchSize    int       `json:"batch_size"`
	LearningRate float32   `json:"learning_rate"`
	Eval         *Samples  `json:"eval,omitempty"`
}

// Payload is a decoded item payload: Role and the one of Init, Shard and
// Reduce it names.
type Payload struct {
	Role   Role
	Init   *InitPayload
	Shard  *ShardPayload
	Reduce *ReducePayload
}

// header is what every payload and result starts with.
type header struct {
	V    int  `json:"v"`
	Role Role `json:"role"`
}

// encodeWithHeader marshals v with "v" and "role" first (an error only
// for a value JSON cannot hold, such as a NaN).
func encodeWithHeader(role Role, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("train: encoding a %s object: %w", role, err)
	}
	return append(fmt.Appendf(nil, `{"v":%d,"role":%q,`, PayloadVersion, role), body[1:]...), nil
}

// strictDecode decodes b into v refusing unknown fields and trailing data;
// the header's fields are taken out first.
func strictDecode(b []byte, v any) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	delete(m, "v")
	delete(m, "role")
	rest, err := json.Marshal(m)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(rest))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// readHeader checks b is one JSON object with "v" PayloadVersion and a
// "role".
func readHeader(b []byte, what string, sentinel error) (Role, error) {
	var h header
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&h); err != nil {
		return "", fmt.Errorf("%w: not a JSON object: %v", sentinel, err)
	}
	if dec.More() {
		return "", fmt.Errorf("%w: data after the JSON object", sentinel)
	}
	if h.V != PayloadVersion {
		return "", fmt.Errorf("%w: %s version %d, want %d", sentinel, what, h.V, PayloadVersion)
	}
	return h.Role, nil
}

// DecodePayload parses and checks a training item's payload: the version,
// the role, no unknown fields, a valid model, step and shard numbers in
// range. Errors wrap ErrInvalidPayload. Sample contents are checked by
// Samples.Decode.
func DecodePayload(b []byte) (*Payload, error) {
	role, err := readHeader(b, "payload", ErrInvalidPayload)
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) (*Payload, error) {
		return nil, fmt.Errorf("%w: %s payload: "+format, append([]any{ErrInvalidPayload, role}, args...)...)
	}
	p := &Payload{Role: role}
	var model *ModelSpec
	switch role {
	case RoleInit:
		p.Init = &InitPayload{}
		err, model = strictDecode(b, p.Init), &p.Init.Model
	case RoleShard:
		p.Shard = &ShardPayload{}
		err, model = strictDecode(b, p.Shard), &p.Shard.Model
	case RoleReduce:
		p.Reduce = &ReducePayload{}
		err, model = strictDecode(b, p.Reduce), &p.Reduce.Model
	default:
		return nil, fmt.Errorf("%w: role %q is not init, shard or reduce", ErrInvalidPayload, role)
	}
	if err != nil {
		return bad("%v", err)
	}
	if _, err := model.Config(); err != nil {
		return bad("%v", err)
	}
	switch role {
	case RoleShard:
		s := p.Shard
		if s.Step < 1 || s.Step > MaxSteps || s.Shard < 0 || s.Shard >= MaxShards {
			return bad("step %d shard %d out of range", s.Step, s.Shard)
		}
	case RoleReduce:
		r := p.Reduce
		switch {
		case r.Step < 1 || r.Step > MaxSteps:
			return bad("step %d is not in [1, %d]", r.Step, MaxSteps)
		case r.Shards < 1 || r.Shards > MaxShards:
			return bad("shards %d is not in [1, %d]", r.Shards, MaxShards)
		case r.BatchSize < r.Shards:
			return bad("batch_size %d is below shards %d", r.BatchSize, r.Shards)
		case !(r.LearningRate > 0 && r.LearningRate <= MaxLearningRate):
			return bad("learning_rate %v is not in (0, %d]", r.LearningRate, MaxLearningRate)
		}
	}
	return p, nil
}
