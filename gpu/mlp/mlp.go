// Package mlp is the model math of rollout's training runs: a multilayer
// perceptron (fully connected layers, a hidden activation, softmax
// cross-entropy on the last layer) whose forward and backward passes run as
// kernels on a gpu.Device.
//
// Parameters are one flat []float32 in layer order: for each layer l (from
// the input), its weight matrix W_l (in×out, row-major) then its bias b_l
// (out). Weights and gradients travel as little-endian float32 bytes
// (Encode, Decode); a weights version is named by the blake3-256 hash of
// those bytes (Hash).
//
// Determinism: Init is a pure function of the config and the seed (its own
// PCG stream, no global randomness). Gradient, Evaluate and Update run a
// fixed sequence of kernels, sum per-sample losses in sample order and sum
// shard gradients in shard order with float32 adds on the host, so on a
// deterministic device (the cpu device) the same inputs give the same bytes
// on every call. What the training runs rely on is exactly that: a step
// executed twice (a worker killed, a coordinator restarted) yields the same
// weights.
package mlp

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"lukechampine.com/blake3"

	"github.com/rollout/rollout/gpu"
)

// Limits of a model.
const (
	// MaxLayers bounds the number of layer sizes (input, hidden…, output).
	MaxLayers = 16
	// MaxWidth bounds every layer size.
	MaxWidth = 1 << 16
	// MaxParams bounds the parameter count (16 Mi float32, 64 MiB).
	MaxParams = 1 << 24
	// MaxClasses bounds the output layer: labels travel as float32 and as
	// one byte in batch payloads.
	MaxClasses = 256
)

// Errors of this package.
var (
	// ErrConfig: a model config is invalid.
	ErrConfig = errors.New("mlp: invalid model config")
	// ErrShape: weights, gradients, inputs or labels do not fit the model.
	ErrShape = errors.New("mlp: shape mismatch")
	// ErrEncoding: bytes are not a whole number of float32 values.
	ErrEncoding = errors.New("mlp: invalid float32 encoding")
	// ErrDiverged: a loss or a parameter is NaN or infinite.
	ErrDiverged = errors.New("mlp: training diverged")
)

// Config is a model: Sizes are the layer widths from the input to the
// output (at least two: input and classes), Act the activation of every
// hidden layer (gpu.ActReLU or gpu.ActTanh; the output layer is linear and
// feeds softmax cross-entropy).
type Config struct {
	Sizes []int
	Act   gpu.Activation
}

// ParseActivation maps "relu" and "tanh" to their gpu.Activation.
func ParseActivation(s string) (gpu.Activation, error) {
	switch s {
	case "relu":
		return gpu.ActReLU, nil
	case "tanh":
		return gpu.ActTanh, nil
	}
	return 0, fmt.Errorf("%w: activation %q is not relu or tanh", ErrConfig, s)
}

// ActivationName is the inverse of ParseActivation ("" for others).
func ActivationName(a gpu.Activation) string {
	switch a {
	case gpu.ActReLU:
		return "relu"
	case gpu.ActTanh:
		return "tanh"
	}
	return ""
}

// Validate checks the config (ErrConfig).
func (c Config) Validate() error {
	if len(c.Sizes) < 2 || len(c.Sizes) > MaxLayers {
		return fmt.Errorf("%w: %d layer sizes, want 2 to %d (input, hidden…, classes)", ErrConfig, len(c.Sizes), MaxLayers)
	}
	for i, s := range c.Sizes {
		if s < 1 || s > MaxWidth {
			return fmt.Errorf("%w: layer size %d is %d, must be in [1, %d]", ErrConfig, i, s, MaxWidth)
		}
	}
	if out := c.Sizes[len(c.Sizes)-1]; out < 2 || out > MaxClasses {
		return fmt.Errorf("%w: the output layer has %d classes, must be in [2, %d]", ErrConfig, out, MaxClasses)
	}
	if c.Act != gpu.ActReLU && c.Act != gpu.ActTanh {
		return fmt.Errorf("%w: hidden activation %d is not relu or tanh", ErrConfig, c.Act)
	}
	if n := c.paramCount(); n > MaxParams {
		return fmt.Errorf("%w: %d parameters, the limit is %d", ErrConfig, n, MaxParams)
	}
	return nil
}

// paramCount is NumParams without validation (sizes bounded by MaxWidth
// and MaxLayers cannot overflow an int64).
func (c Config) paramCount() int64 {
	var n int64
	for l := 1; l < len(c.Sizes); l++ {
		n += int64(c.Sizes[l-1])*int64(c.Sizes[l]) + int64(c.Sizes[l])
	}
	return n
}

// NumParams is the length of the flat parameter vector.
func (c Config) NumParams() int { return int(c.paramCount()) }

// Inputs is the width of the input layer, Classes that of the output.
func (c Config) Inputs() int  { return c.Sizes[0] }
func (c Config) Classes() int { return c.Sizes[len(c.Sizes)-1] }

// layer l (1-based) parameters: W at off, b at off+in*out.
type layer struct{ in, out, w, b int }

func (c Config) layers() []layer {
	ls := make([]layer, 0, len(c.Sizes)-1)
	off := 0
	for l := 1; l < len(c.Sizes); l++ {
		in, out := c.Sizes[l-1], c.Sizes[l]
		ls = append(ls, layer{in: in, out: out, w: off, b: off + in*out})
		off += in*out + out
	}
	return ls
}

// initStream is the second PCG word of Init's stream (the first is the
// seed); changing it changes every run's weights.
const initStream = 0x726f6c6c6f75742d // "rollout-"

// Init returns weights version 0 for seed: every weight of layer l drawn
// uniformly from [-lim, lim) with lim = sqrt(6/in) for ReLU (He) and
// sqrt(6/(in+out)) for tanh (Glorot), in parameter order from one PCG
// stream seeded with (seed, initStream); biases zero. An invalid config is
// an error (ErrConfig).
func (c Config) Init(seed uint64) ([]float32, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(seed, initStream))
	w := make([]float32, c.NumParams())
	for _, l := range c.layers() {
		fan := float64(l.in)
		if c.Act == gpu.ActTanh {
			fan = float64(l.in + l.out)
		}
		lim := math.Sqrt(6 / fan)
		for i := range l.in * l.out {
			// 2u-1 is exact in float64; one rounding to float32 after
			// one multiply: no fused operation can change the result.
			u := 2*r.Float64() - 1
			w[l.w+i] = float32(u * lim)
		}
	}
	return w, nil
}

// Encode returns v as little-endian float32 bytes.
func Encode(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

// Decode parses little-endian float32 bytes (ErrEncoding when the length
// is not a multiple of 4).
func Decode(b []byte) ([]float32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not a multiple of 4", ErrEncoding, len(b))
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}

// Hash is the content address of a weights version: the blake3-256 of
// Encode(w), in lower-case hex.
func Hash(w []float32) string {
	sum := blake3.Sum256(Encode(w))
	return hex.EncodeToString(sum[:])
}

// Stats are a batch's totals: Loss is the sum of the per-sample
// cross-entropy losses (summed in sample order in float64), Correct the
// samples whose largest logit (the first on a tie) is their label, Count
// the samples.
type Stats struct {
	Loss    float64
	Correct int
	Count   int
}

// MeanLoss is Loss/Count (0 for no samples).
func (s Stats) MeanLoss() float64 {
	if s.Count == 0 {
		return 0
	}
	return s.Loss / float64(s.Count)
}

// Accuracy is Correct/Count (0 for no samples).
func (s Stats) Accuracy() float64 {
	if s.Count == 0 {
		return 0
	}
	return float64(s.Correct) / float64(s.Count)
}

// checkBatch validates weights, inputs (n×Inputs, row-major) and labels.
func (c Config) checkBatch(w, x []float32, labels []int) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if len(w) != c.NumParams() {
		return fmt.Errorf("%w: %d weights, the model has %d parameters", ErrShape, len(w), c.NumParams())
	}
	n := len(labels)
	if n == 0 {
		return fmt.Errorf("%w: empty batch", ErrShape)
	}
	if len(x) != n*c.Inputs() {
		return fmt.Errorf("%w: %d input values for %d samples of %d features", ErrShape, len(x), n, c.Inputs())
	}
	for i, y := range labels {
		if y < 0 || y >= c.Classes() {
			return fmt.Errorf("%w: label %d of sample %d is not in [0, %d)", ErrShape, y, i, c.Classes())
		}
	}
	return nil
}

// pass holds one batch's device buffers.
type pass struct {
	dev  gpu.Device
	bufs []gpu.Buffer
}

func (p *pass) alloc(n int) (gpu.Buffer, error) {
	b, err := p.dev.Alloc(n)
	if err != nil {
		return nil, err
	}
	p.bufs = append(p.bufs, b)
	return b, nil
}

func (p *pass) upload(v []float32) (gpu.Buffer, error) {
	b, err := p.alloc(len(v))
	if err != nil {
		return nil, err
	}
	return b, p.dev.Upload(b, v)
}

func (p *pass) free() {
	for _, b := range p.bufs {
		p.dev.Free(b)
	}
}

// forward runs the model on x; it returns each layer's weight matrix, the
// activations of every layer (acts[0] = x, acts[L] = logits) and the
// per-sample losses and logit gradients from SoftmaxXent.
type fwd struct {
	ws         []gpu.Buffer // each layer's W
	acts       []gpu.Buffer
	loss, grad gpu.Buffer
}

func (c Config) forward(p *pass, w, x []float32, labels []int) (*fwd, error) {
	n := len(labels)
	f := &fwd{}
	in, err := p.upload(x)
	if err != nil {
		return nil, err
	}
	f.acts = []gpu.Buffer{in}
	// Each layer's W and b are sub-ranges of the flat weights; the Device
	// takes whole buffers, so they are uploaded per layer.
	ls := c.layers()
	for i, l := range ls {
		wl, err := p.upload(w[l.w : l.w+l.in*l.out])
		if err != nil {
			return nil, err
		}
		f.ws = append(f.ws, wl)
		bl, err := p.upload(w[l.b : l.b+l.out])
		if err != nil {
			return nil, err
		}
		z, err := p.alloc(n * l.out)
		if err != nil {
			return nil, err
		}
		if err := p.dev.Gemm(false, false, n, l.out, l.in, 1, f.acts[i], wl, 0, z); err != nil {
			return nil, err
		}
		act := c.Act
		if i == len(ls)-1 {
			act = gpu.ActIdentity
		}
		if err := p.dev.BiasAct(act, n, l.out, z, bl); err != nil {
			return nil, err
		}
		f.acts = append(f.acts, z)
	}
	lab := make([]float32, n)
	for i, y := range labels {
		lab[i] = float32(y)
	}
	lb, err := p.upload(lab)
	if err != nil {
		return nil, err
	}
	if f.loss, err = p.alloc(n); err != nil {
		return nil, err
	}
	if f.grad, err = p.alloc(n * c.Classes()); err != nil {
		return nil, err
	}
	if err := p.dev.SoftmaxXent(n, c.Classes(), f.acts[len(f.acts)-1], lb, f.loss, f.grad); err != nil {
		return nil, err
	}
	return f, nil
}

// stats downloads the losses and logits and totals them.
func (c Config) stats(p *pass, f *fwd, labels []int) (Stats, error) {
	n, k := len(labels), c.Classes()
	loss := make([]float32, n)
	if err := p.dev.Download(loss, f.loss); err != nil {
		return Stats{}, err
	}
	logits := make([]float32, n*k)
	if err := p.dev.Download(logits, f.acts[len(f.acts)-1]); err != nil {
		return Stats{}, err
	}
	st := Stats{Count: n}
	for i, y := range labels {
		st.Loss += float64(loss[i])
		row := logits[i*k : (i+1)*k]
		best := 0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
		}
		if best == y {
			st.Correct++
		}
	}
	if math.IsNaN(st.Loss) || math.IsInf(st.Loss, 0) {
		return Stats{}, fmt.Errorf("%w: the batch loss is %v", ErrDiverged, st.Loss)
	}
	return st, nil
}

// Evaluate runs the model with weights w on the samples x (len(labels)
// rows of Inputs features) and returns the batch's Stats. ErrDiverged when
// the loss is not finite.
func (c Config) Evaluate(dev gpu.Device, w, x []float32, labels []int) (Stats, error) {
	if err := c.checkBatch(w, x, labels); err != nil {
		return Stats{}, err
	}
	p := &pass{dev: dev}
	defer p.free()
	f, err := c.forward(p, w, x, labels)
	if err != nil {
		return Stats{}, err
	}
	return c.stats(p, f, labels)
}

// Gradient returns the gradient of the summed (not averaged) cross-entropy
// loss of the batch at weights w, in the parameter layout, and the batch's
// Stats. ErrDiverged when the loss is not finite.
func (c Config) Gradient(dev gpu.Device, w, x []float32, labels []int) ([]float32, Stats, error) {
	if err := c.checkBatch(w, x, labels); err != nil {
		return nil, Stats{}, err
	}
	p := &pass{dev: dev}
	defer p.free()
	f, err := c.forward(p, w, x, labels)
	if err != nil {
		return nil, Stats{}, err
	}
	n := len(labels)
	grad := make([]float32, c.NumParams())
	ls := c.layers()
	delta := f.grad // dLoss/dz of the current layer, n×out
	for i := len(ls) - 1; i >= 0; i-- {
		l := ls[i]
		dw, err := p.alloc(l.in * l.out)
		if err != nil {
			return nil, Stats{}, err
		}
		// dW = acts[i]ᵀ · delta (in×out)
		if err := dev.Gemm(true, false, l.in, l.out, n, 1, f.acts[i], delta, 0, dw); err != nil {
			return nil, Stats{}, err
		}
		db, err := p.alloc(l.out)
		if err != nil {
			return nil, Stats{}, err
		}
		if err := dev.ColSum(n, l.out, delta, db); err != nil {
			return nil, Stats{}, err
		}
		if err := dev.Download(grad[l.w:l.w+l.in*l.out], dw); err != nil {
			return nil, Stats{}, err
		}
		if err := dev.Download(grad[l.b:l.b+l.out], db); err != nil {
			return nil, Stats{}, err
		}
		if i == 0 {
			break
		}
		prev, err := p.alloc(n * l.in)
		if err != nil {
			return nil, Stats{}, err
		}
		// dActs = delta · Wᵀ (n×in), then through the activation.
		if err := dev.Gemm(false, true, n, l.in, l.out, 1, delta, f.ws[i], 0, prev); err != nil {
			return nil, Stats{}, err
		}
		if err := dev.ActGrad(c.Act, n*l.in, f.acts[i], prev); err != nil {
			return nil, Stats{}, err
		}
		delta = prev
	}
	st, err := c.stats(p, f, labels)
	if err != nil {
		return nil, Stats{}, err
	}
	return grad, st, nil
}

// SumInOrder adds the gradients element-wise in slice order with float32
// adds (((g0+g1)+g2)+…), the order every replay of a step repeats.
func SumInOrder(grads [][]float32) ([]float32, error) {
	if len(grads) == 0 {
		return nil, fmt.Errorf("%w: no gradients to sum", ErrShape)
	}
	sum := append([]float32(nil), grads[0]...)
	for s, g := range grads[1:] {
		if len(g) != len(sum) {
			return nil, fmt.Errorf("%w: gradient %d has %d values, gradient 0 has %d", ErrShape, s+1, len(g), len(sum))
		}
		for i, v := range g {
			sum[i] += v
		}
	}
	return sum, nil
}

// Update is the reduce of a step: it sums the shard gradients in shard
// order (SumInOrder), and applies one SGD step on dev with the learning
// rate scaled by the batch: w' = w - (lr/total)·Σ grads. total is the
// number of samples the gradients were summed over. The result is new
// weights (w is not modified). ErrDiverged when a new weight is not
// finite.
func (c Config) Update(dev gpu.Device, w []float32, grads [][]float32, total int, lr float32) ([]float32, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(w) != c.NumParams() {
		return nil, fmt.Errorf("%w: %d weights, the model has %d parameters", ErrShape, len(w), c.NumParams())
	}
	if total < 1 {
		return nil, fmt.Errorf("%w: the batch total is %d, must be positive", ErrShape, total)
	}
	if !(lr > 0) || math.IsInf(float64(lr), 0) {
		return nil, fmt.Errorf("%w: learning rate %v must be positive and finite", ErrConfig, lr)
	}
	sum, err := SumInOrder(grads)
	if err != nil {
		return nil, err
	}
	if len(sum) != len(w) {
		return nil, fmt.Errorf("%w: gradients have %d values, the model has %d parameters", ErrShape, len(sum), len(w))
	}
	p := &pass{dev: dev}
	defer p.free()
	wb, err := p.upload(w)
	if err != nil {
		return nil, err
	}
	gb, err := p.upload(sum)
	if err != nil {
		return nil, err
	}
	if err := dev.SGD(len(w), lr/float32(total), wb, gb); err != nil {
		return nil, err
	}
	out := make([]float32, len(w))
	if err := dev.Download(out, wb); err != nil {
		return nil, err
	}
	for i, v := range out {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("%w: parameter %d is %v after the update", ErrDiverged, i, v)
		}
	}
	return out, nil
}
