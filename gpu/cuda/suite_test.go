//go:build (linux || darwin) && (amd64 || arm64)

package cuda_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/gpu"
)

// The tolerances every device must meet against the CPU reference, with
// inputs uniform in [-1, 1] (logits in [-4, 4]). They allow for what a GPU
// does differently: fused multiply-adds, approximate exp/log (ex2.approx,
// lg2.approx, flush-to-zero), tree-ordered softmax sums.
const (
	tolGemmAbs    = 1e-5 // GEMM: |got-want| ≤ tolGemmAbs + tolGemmPerK·k
	tolGemmPerK   = 2e-6
	tolTanh       = 5e-6 // BiasAct with tanh, absolute
	tolActGrad    = 1e-6 // ActGrad with tanh, absolute (identity and ReLU: exact)
	tolSoftmax    = 1e-5 // SoftmaxXent loss and gradient, absolute
	tolSGD        = 1e-6 // SGD, absolute
	tolBiasActLin = 0    // BiasAct identity and ReLU: exact (one add, one compare)
	tolColSum     = 0    // ColSum: exact (the same in-order float32 adds)
)

// gemmShapes are m, n, k: none a multiple of the 128×128×8 tile, one
// smaller than everything, some spanning several tiles in every dimension.
// The first five have odd dimensions (the GEMM's scalar loads and stores);
// in the last three every dimension is a multiple of 4 (its 128-bit loads
// and stores), and in the one before them only some are (both paths in one
// launch).
var gemmShapes = [][3]int{{37, 29, 53}, {1, 1, 1}, {65, 3, 130}, {130, 260, 21}, {3, 129, 7}, {36, 130, 44}, {132, 68, 40}, {4, 4, 4}, {260, 136, 12}}

// matShapes are m, n for the element-wise and row kernels.
var matShapes = [][2]int{{37, 29}, {1, 1}, {65, 130}, {3, 300}, {1, 257}}

func randVec(r *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (r.Float32()*2 - 1) * scale
	}
	return v
}

// pair runs the same calls on a device under test and the CPU reference.
// When tf32 is set, the device's GEMM is the TF32 one: the reference's GEMM
// operands are rounded to TF32 first (what the tensor cores multiply), so
// the two agree to float32 rounding as for the FP32 GEMM.
type pair struct {
	t        *testing.T
	dev, cpu gpu.Device
	tf32     bool
}

// tf32 rounds x as cvt.rna.tf32.f32 does: 10 mantissa bits, to nearest,
// ties away from zero; Inf and NaN unchanged.
func tf32(x float32) float32 {
	u := math.Float32bits(x)
	if u&0x7f800000 != 0x7f800000 {
		u = (u + 0x1000) &^ 0x1fff
	}
	return math.Float32frombits(u)
}

// uploadOperand uploads a GEMM operand: as it is to the device, rounded to
// TF32 to the reference when the pair's GEMM is TF32.
func (p pair) uploadOperand(v []float32) bufs {
	p.t.Helper()
	if !p.tf32 {
		return p.upload(v)
	}
	r := make([]float32, len(v))
	for i, x := range v {
		r[i] = tf32(x)
	}
	var b bufs
	var err error
	if b.dev, err = p.dev.Alloc(len(v)); err != nil {
		p.t.Fatal(err)
	}
	if b.cpu, err = p.cpu.Alloc(len(v)); err != nil {
		p.t.Fatal(err)
	}
	if err := p.dev.Upload(b.dev, v); err != nil {
		p.t.Fatal(err)
	}
	if err := p.cpu.Upload(b.cpu, r); err != nil {
		p.t.Fatal(err)
	}
	return b
}

type bufs struct{ dev, cpu gpu.Buffer }

func (p pair) upload(v []float32) bufs {
	p.t.Helper()
	var b bufs
	var err error
	if b.dev, err = p.dev.Alloc(len(v)); err != nil {
		p.t.Fatal(err)
	}
	if b.cpu, err = p.cpu.Alloc(len(v)); err != nil {
		p.t.Fatal(err)
	}
	if err := p.dev.Upload(b.dev, v); err != nil {
		p.t.Fatal(err)
	}
	if err := p.cpu.Upload(b.cpu, v); err != nil {
		p.t.Fatal(err)
	}
	return b
}

func (p pair) free(bs ...bufs) {
	for _, b := range bs {
		p.dev.Free(b.dev)
		p.cpu.Free(b.cpu)
	}
}

// compare downloads b from both devices and returns a description of the
// first element off by more than tol(i, want), or "".
func (p pair) compare(b bufs, tol func(want float32) float64) string {
	p.t.Helper()
	got := make([]float32, b.dev.Len())
	want := make([]float32, b.cpu.Len())
	if err := p.dev.Download(got, b.dev); err != nil {
		p.t.Fatal(err)
	}
	if err := p.cpu.Download(want, b.cpu); err != nil {
		p.t.Fatal(err)
	}
	for i := range got {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if !(d <= tol(want[i])) { // NaN fails
			return fmt.Sprintf("element %d: got %v, want %v (|diff| %.3g > %.3g)", i, got[i], want[i], d, tol(want[i]))
		}
	}
	return ""
}

func abs(t float64) func(float32) float64 { return func(float32) float64 { return t } }

// gemmMismatch runs every transpose combination of one GEMM shape on both
// devices and returns the first mismatch, or "".
func gemmMismatch(p pair, r *rand.Rand, m, n, k int) string {
	p.t.Helper()
	for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		for _, ab := range [][2]float32{{1.5, -2}, {1, 0}} {
			a, b, c := p.uploadOperand(randVec(r, m*k, 1)), p.uploadOperand(randVec(r, k*n, 1)), p.upload(randVec(r, m*n, 1))
			for _, d := range []gpu.Device{p.dev, p.cpu} {
				pick := func(x bufs) gpu.Buffer {
					if d == p.dev {
						return x.dev
					}
					return x.cpu
				}
				if err := d.Gemm(tr[0], tr[1], m, n, k, ab[0], pick(a), pick(b), ab[1], pick(c)); err != nil {
					p.t.Fatalf("%s: gemm %dx%dx%d: %v", d.Name(), m, n, k, err)
				}
			}
			msg := p.compare(c, abs(tolGemmAbs+tolGemmPerK*float64(k)))
			p.free(a, b, c)
			if msg != "" {
				return fmt.Sprintf("gemm m=%d n=%d k=%d transA=%v transB=%v alpha=%v beta=%v: %s", m, n, k, tr[0], tr[1], ab[0], ab[1], msg)
			}
		}
	}
	return ""
}

// runGemmTF32 checks dev's TF32 GEMM (a device opened with
// cuda.Options{TF32: true}) on every shape and transpose against the CPU
// reference on TF32-rounded operands, and that it does round: a product the
// FP32 GEMM gets exactly, the TF32 one gets as TF32 says.
func runGemmTF32(t *testing.T, dev gpu.Device) {
	require.Contains(t, dev.Name(), "TF32")
	cpu := gpu.NewCPU()
	defer cpu.Close()
	p := pair{t: t, dev: dev, cpu: cpu, tf32: true}
	r := rand.New(rand.NewPCG(11, 11))
	for _, s := range gemmShapes {
		if msg := gemmMismatch(p, r, s[0], s[1], s[2]); msg != "" {
			t.Error(msg)
		}
	}
	// 1 + 2^-12 is 1 in TF32 (the dropped bits are below half an ulp);
	// 1 + 2^-10 + 2^-11 rounds up, away from zero, to 1 + 2^-9.
	for _, c := range [][2]float32{{1 + 0x1p-12, 1}, {1 + 0x1p-10 + 0x1p-11, 1 + 0x1p-9}, {-(1 + 0x1p-10 + 0x1p-11), -(1 + 0x1p-9)}} {
		a, b, out := p.upload([]float32{c[0]}), p.upload([]float32{1}), p.upload([]float32{7})
		require.NoError(t, dev.Gemm(false, false, 1, 1, 1, 1, a.dev, b.dev, 0, out.dev))
		got := make([]float32, 1)
		require.NoError(t, dev.Download(got, out.dev))
		require.Equal(t, c[1], got[0], "TF32 GEMM of %v·1", c[0])
		p.free(a, b, out)
	}
}

// runKernelSuite checks every kernel of dev against the CPU reference.
func runKernelSuite(t *testing.T, dev gpu.Device) {
	cpu := gpu.NewCPU()
	defer cpu.Close()
	p := pair{t: t, dev: dev, cpu: cpu}
	r := rand.New(rand.NewPCG(10, 10))

	t.Run("Gemm", func(t *testing.T) {
		p := p
		p.t = t
		for _, s := range gemmShapes {
			if msg := gemmMismatch(p, r, s[0], s[1], s[2]); msg != "" {
				t.Error(msg)
			}
		}
	})
	t.Run("BiasActAndActGrad", func(t *testing.T) {
		p := p
		p.t = t
		for _, s := range matShapes {
			m, n := s[0], s[1]
			for _, act := range []gpu.Activation{gpu.ActIdentity, gpu.ActReLU, gpu.ActTanh} {
				x, bias := p.upload(randVec(r, m*n, 2)), p.upload(randVec(r, n, 1))
				for _, d := range []gpu.Device{p.dev, p.cpu} {
					xb, bb := x.cpu, bias.cpu
					if d == p.dev {
						xb, bb = x.dev, bias.dev
					}
					if err := d.BiasAct(act, m, n, xb, bb); err != nil {
						t.Fatalf("%s: biasact: %v", d.Name(), err)
					}
				}
				tol := float64(tolBiasActLin)
				if act == gpu.ActTanh {
					tol = tolTanh
				}
				if msg := p.compare(x, abs(tol)); msg != "" {
					t.Errorf("biasact %v %dx%d: %s", act, m, n, msg)
				}
				// ActGrad on the CPU's forward output, so both see the same y.
				y := make([]float32, m*n)
				if err := p.cpu.Download(y, x.cpu); err != nil {
					t.Fatal(err)
				}
				yb, dy := p.upload(y), p.upload(randVec(r, m*n, 1))
				for _, d := range []gpu.Device{p.dev, p.cpu} {
					a, b := yb.cpu, dy.cpu
					if d == p.dev {
						a, b = yb.dev, dy.dev
					}
					if err := d.ActGrad(act, m*n, a, b); err != nil {
						t.Fatalf("%s: actgrad: %v", d.Name(), err)
					}
				}
				tol = 0
				if act == gpu.ActTanh {
					tol = tolActGrad
				}
				if msg := p.compare(dy, abs(tol)); msg != "" {
					t.Errorf("actgrad %v n=%d: %s", act, m*n, msg)
				}
				p.free(x, bias, yb, dy)
			}
		}
	})
	t.Run("SoftmaxXent", func(t *testing.T) {
		p := p
		p.t = t
		for _, s := range matShapes {
			m, n := s[0], s[1]
			labels := make([]float32, m)
			for i := range labels {
				labels[i] = float32(r.IntN(n))
			}
			z, l := p.upload(randVec(r, m*n, 4)), p.upload(labels)
			loss, grad := p.upload(make([]float32, m)), p.upload(make([]float32, m*n))
			for _, d := range []gpu.Device{p.dev, p.cpu} {
				a, b, c, e := z.cpu, l.cpu, loss.cpu, grad.cpu
				if d == p.dev {
					a, b, c, e = z.dev, l.dev, loss.dev, grad.dev
				}
				if err := d.SoftmaxXent(m, n, a, b, c, e); err != nil {
					t.Fatalf("%s: softmaxxent: %v", d.Name(), err)
				}
			}
			if msg := p.compare(loss, abs(tolSoftmax)); msg != "" {
				t.Errorf("softmaxxent %dx%d loss: %s", m, n, msg)
			}
			if msg := p.compare(grad, abs(tolSoftmax)); msg != "" {
				t.Errorf("softmaxxent %dx%d grad: %s", m, n, msg)
			}
			p.free(z, l, loss, grad)
		}
	})
	t.Run("ColSumAndSGD", func(t *testing.T) {
		p := p
		p.t = t
		for _, s := range matShapes {
			m, n := s[0], s[1]
			x, out := p.upload(randVec(r, m*n, 1)), p.upload(make([]float32, n))
			w := p.upload(randVec(r, n, 1))
			for _, d := range []gpu.Device{p.dev, p.cpu} {
				a, b, c := x.cpu, out.cpu, w.cpu
				if d == p.dev {
					a, b, c = x.dev, out.dev, w.dev
				}
				if err := d.ColSum(m, n, a, b); err != nil {
					t.Fatalf("%s: colsum: %v", d.Name(), err)
				}
				if err := d.SGD(n, 0.125, c, b); err != nil {
					t.Fatalf("%s: sgd: %v", d.Name(), err)
				}
			}
			if msg := p.compare(out, abs(tolColSum)); msg != "" {
				t.Errorf("colsum %dx%d: %s", m, n, msg)
			}
			if msg := p.compare(w, abs(tolSGD)); msg != "" {
				t.Errorf("sgd n=%d: %s", n, msg)
			}
			p.free(x, out, w)
		}
	})
	if err := dev.Sync(); err != nil {
		t.Fatal(err)
	}
}
