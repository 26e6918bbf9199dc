package gpu_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rollout/rollout/gpu"
)

func upload(t *testing.T, d gpu.Device, v []float32) gpu.Buffer {
	t.Helper()
	b, err := d.Alloc(len(v))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Upload(b, v); err != nil {
		t.Fatal(err)
	}
	return b
}

func download(t *testing.T, d gpu.Device, b gpu.Buffer) []float32 {
	t.Helper()
	out := make([]float32, b.Len())
	if err := d.Download(out, b); err != nil {
		t.Fatal(err)
	}
	return out
}

func randSlice(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()*2 - 1
	}
	return v
}

// gemm64 is an independent float64 GEMM on the transposed layouts.
func gemm64(transA, transB bool, m, n, k int, alpha float64, a, b []float32, beta float64, c []float32) []float64 {
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				av := a[i*k+p]
				if transA {
					av = a[p*m+i]
				}
				bv := b[p*n+j]
				if transB {
					bv = b[j*k+p]
				}
				s += float64(av) * float64(bv)
			}
			out[i*n+j] = alpha*s + beta*float64(c[i*n+j])
		}
	}
	return out
}

func TestCPUGemmAgainstFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	d := gpu.NewCPU()
	defer d.Close()
	for _, sh := range [][3]int{{1, 1, 1}, {37, 29, 53}, {65, 3, 130}, {2, 70, 1}} {
		m, n, k := sh[0], sh[1], sh[2]
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			a, b, c := randSlice(r, m*k), randSlice(r, k*n), randSlice(r, m*n)
			want := gemm64(tr[0], tr[1], m, n, k, 0.5, a, b, -2, c)
			ba, bb, bc := upload(t, d, a), upload(t, d, b), upload(t, d, c)
			if err := d.Gemm(tr[0], tr[1], m, n, k, 0.5, ba, bb, -2, bc); err != nil {
				t.Fatal(err)
			}
			got := download(t, d, bc)
			for i := range got {
				if diff := math.Abs(float64(got[i]) - want[i]); diff > 1e-5*float64(k)+1e-6 {
					t.Fatalf("%v trans=%v: C[%d] = %v, want %v", sh, tr, i, got[i], want[i])
				}
			}
		}
	}
}

// TestGemmRefSumsInOrder: GemmRef gives bit for bit what the plain triple
// loop gives, k summed in order with float32 rounding after each step.
func TestGemmRefSumsInOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	m, n, k := 13, 11, 67
	for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		a, b, c := randSlice(r, m*k), randSlice(r, k*n), randSlice(r, m*n)
		want := append([]float32(nil), c...)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var acc float32
				for p := 0; p < k; p++ {
					av, bv := a[i*k+p], b[p*n+j]
					if tr[0] {
						av = a[p*m+i]
					}
					if tr[1] {
						bv = b[j*k+p]
					}
					acc += float32(av * bv)
				}
				want[i*n+j] = float32(0.75*acc) + float32(0.5*want[i*n+j])
			}
		}
		gpu.GemmRef(tr[0], tr[1], m, n, k, 0.75, a, b, 0.5, c)
		if !equal(c, want) {
			t.Fatalf("trans=%v: GemmRef differs from the in-order triple loop", tr)
		}
	}
}

func TestCPUGemmKnownValues(t *testing.T) {
	d := gpu.NewCPU()
	defer d.Close()
	// A = [1 2 3; 4 5 6] (2×3), B = [7 8; 9 10; 11 12] (3×2): AB = [58 64; 139 154].
	a := upload(t, d, []float32{1, 2, 3, 4, 5, 6})
	b := upload(t, d, []float32{7, 8, 9, 10, 11, 12})
	c := upload(t, d, []float32{1, 1, 1, 1})
	if err := d.Gemm(false, false, 2, 2, 3, 1, a, b, 1, c); err != nil {
		t.Fatal(err)
	}
	if got, want := download(t, d, c), []float32{59, 65, 140, 155}; !equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// Aᵀ·A with A as given (3×3 result via transA: op(A) = Aᵀ is 3×2, op(B)=A is 2×3).
	c2, _ := d.Alloc(9)
	if err := d.Gemm(true, false, 3, 3, 2, 1, a, a, 0, c2); err != nil {
		t.Fatal(err)
	}
	if got, want := download(t, d, c2), []float32{17, 22, 27, 22, 29, 36, 27, 36, 45}; !equal(got, want) {
		t.Fatalf("AᵀA: got %v, want %v", got, want)
	}
}

func TestCPUGemmBetaZeroIgnoresC(t *testing.T) {
	d := gpu.NewCPU()
	defer d.Close()
	nan := float32(math.NaN())
	a := upload(t, d, []float32{2})
	b := upload(t, d, []float32{3})
	c := upload(t, d, []float32{nan})
	if err := d.Gemm(false, false, 1, 1, 1, 1, a, b, 0, c); err != nil {
		t.Fatal(err)
	}
	if got := download(t, d, c); got[0] != 6 {
		t.Fatalf("beta=0 with NaN in C: got %v, want 6", got[0])
	}
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestCPUBiasActAndGrad(t *testing.T) {
	d := gpu.NewCPU()
	defer d.Close()
	x := []float32{-1, 0.5, 2, -3, 0, 1}
	bias := []float32{0.5, -1, 0}
	cases := []struct {
		act  gpu.Activation
		want []float32
	}{
		{gpu.ActIdentity, []float32{-0.5, -0.5, 2, -2.5, -1, 1}},
		{gpu.ActReLU, []float32{0, 0, 2, 0, 0, 1}},
		{gpu.ActTanh, []float32{float32(math.Tanh(-0.5)), float32(math.Tanh(-0.5)), float32(math.Tanh(2)), float32(math.Tanh(-2.5)), float32(math.Tanh(-1)), float32(math.Tanh(1))}},
	}
	for _, tc := range cases {
		bx, bb := upload(t, d, x), upload(t, d, bias)
		if err := d.BiasAct(tc.act, 2, 3, bx, bb); err != nil {
			t.Fatal(err)
		}
		y := download(t, d, bx)
		if !equal(y, tc.want) {
			t.Fatalf("%v: got %v, want %v", tc.act, y, tc.want)
		}
		dy := []float32{1, 2, 3, 4, 5, 6}
		bdy := upload(t, d, dy)
		if err := d.ActGrad(tc.act, 6, bx, bdy); err != nil {
			t.Fatal(err)
		}
		g := download(t, d, bdy)
		for i := range g {
			var want float32
			switch tc.act {
			case gpu.ActIdentity:
				want = dy[i]
			case gpu.ActReLU:
				if y[i] > 0 {
					want = dy[i]
				}
			case gpu.ActTanh:
				want = dy[i] * (1 - y[i]*y[i])
			}
			if math.Abs(float64(g[i]-want)) > 1e-6 {
				t.Fatalf("%v grad[%d] = %v, want %v", tc.act, i, g[i], want)
			}
		}
	}
}

func TestCPUSoftmaxXent(t *testing.T) {
	d := gpu.NewCPU()
	defer d.Close()
	// Large logits check the max subtraction (exp(1000) overflows).
	logits := []float32{1, 2, 3, 1000, 1000, 999}
	labels := []float32{2, 0}
	bz, bl := upload(t, d, logits), upload(t, d, labels)
	loss, _ := d.Alloc(2)
	grad, _ := d.Alloc(6)
	if err := d.SoftmaxXent(2, 3, bz, bl, loss, grad); err != nil {
		t.Fatal(err)
	}
	gl, gg := download(t, d, loss), download(t, d, grad)
	for r, row := range [][]float64{{1, 2, 3}, {1, 1, 0}} {
		var s float64
		for _, v := range row {
			s += math.Exp(v)
		}
		lab := int(labels[r])
		if want := math.Log(s) - row[lab]; math.Abs(float64(gl[r])-want) > 1e-6 {
			t.Fatalf("loss[%d] = %v, want %v", r, gl[r], want)
		}
		var gsum float64
		for j, v := range row {
			want := math.Exp(v) / s
			if j == lab {
				want--
			}
			gsum += float64(gg[r*3+j])
			if math.Abs(float64(gg[r*3+j])-want) > 1e-6 {
				t.Fatalf("grad[%d,%d] = %v, want %v", r, j, gg[r*3+j], want)
			}
		}
		if math.Abs(gsum) > 1e-6 {
			t.Fatalf("row %d gradient sums to %v, want 0", r, gsum)
		}
	}
}

func TestCPUSoftmaxXentBadLabelChangesNothing(t *testing.T) {
	d := gpu.NewCPU()
	defer d.Close()
	for _, bad := range []float32{3, -1, 0.5, float32(math.NaN())} {
		bz, bl := upload(t, d, []float32{1, 2, 3, 4, 5, 6}), upload(t, d, []float32{0, bad})
		loss := upload(t, d, []float32{7, 7})
		grad := upload(t, d, []float32{7, 7, 7, 7, 7, 7})
		err := d.SoftmaxXent(2, 3, bz, bl, loss, grad)
		if !errors.Is(err, gpu.ErrLabel) {
			t.Fatalf("label %v: err = %v, want ErrLabel", bad, err)
		}
		if got := download(t, d, loss); !equal(got, []float32{7, 7}) {
			t.Fatalf("label %v: loss changed to %v", bad, got)
		}
		if got := download(t, d, grad); !equal(got, []float32{7, 7, 7, 7, 7, 7}) {
			t.Fatalf("label %v: grad changed to %v", bad, got)
		}
	}
}

func TestCPUColSumAndSGD(t *testing.T) {
	d := gpu.NewCPU()
	defer d.Close()
	x := upload(t, d, []float32{1, 2, 3, 4, 5, 6})
	out, _ := d.Alloc(3)
	if err := d.ColSum(2, 3, x, out); err != nil {
		t.Fatal(err)
	}
	if got := download(t, d, out); !equal(got, []float32{5, 7, 9}) {
		t.Fatalf("colsum = %v", got)
	}
	w := upload(t, d, []float32{1, 2, 3})
	if err := d.SGD(3, 0.5, w, out); err != nil {
		t.Fatal(err)
	}
	if got := download(t, d, w); !equal(got, []float32{-1.5, -1.5, -1.5}) {
		t.Fatalf("sgd = %v", got)
	}
}

// TestCPUDeterministic: the same inputs give bit-identical outputs.
func TestCPUDeterministic(t *testing.T) {
	run := func() []float32 {
		r := rand.New(rand.NewPCG(7, 7))
		d := gpu.NewCPU()
		defer d.Close()
		m, n, k := 33, 17, 129
		a, b := upload(t, d, randSlice(r, m*k)), upload(t, d, randSlice(r, k*n))
		c, _ := d.Alloc(m * n)
		bias := upload(t, d, randSlice(r, n))
		if err := d.Gemm(false, false, m, n, k, 1, a, b, 0, c); err != nil {
			t.Fatal(err)
		}
		if err := d.BiasAct(gpu.ActTanh, m, n, c, bias); err != nil {
			t.Fatal(err)
		}
		labels := make([]float32, m)
		for i := range labels {
			labels[i] = float32(i % n)
		}
		bl := upload(t, d, labels)
		loss, _ := d.Alloc(m)
		grad, _ := d.Alloc(m * n)
		if err := d.SoftmaxXent(m, n, c, bl, loss, grad); err != nil {
			t.Fatal(err)
		}
		cs, _ := d.Alloc(n)
		if err := d.ColSum(m, n, grad, cs); err != nil {
			t.Fatal(err)
		}
		return append(append(download(t, d, grad), download(t, d, loss)...), download(t, d, cs)...)
	}
	if a, b := run(), run(); !equal(a, b) {
		t.Fatal("two runs differ")
	}
}

func TestCPUErrors(t *testing.T) {
	d := gpu.NewCPU()
	other := gpu.NewCPU()
	defer other.Close()
	a, _ := d.Alloc(6)
	b, _ := d.Alloc(6)
	c, _ := d.Alloc(4)
	foreign, _ := other.Alloc(6)
	freed, _ := d.Alloc(6)
	d.Free(freed)
	d.Free(freed) // twice: no-op
	d.Free(nil)

	cases := []struct {
		name string
		err  error
		want error
	}{
		{"alloc negative", func() error { _, err := d.Alloc(-1); return err }(), gpu.ErrShape},
		{"gemm shape", d.Gemm(false, false, 2, 2, 4, 1, a, b, 0, c), gpu.ErrShape},
		{"gemm zero dim", d.Gemm(false, false, 0, 2, 3, 1, a, b, 0, c), gpu.ErrShape},
		{"gemm foreign", d.Gemm(false, false, 2, 2, 3, 1, foreign, b, 0, c), gpu.ErrBuffer},
		{"gemm freed", d.Gemm(false, false, 2, 2, 3, 1, a, freed, 0, c), gpu.ErrBuffer},
		{"gemm nil", d.Gemm(false, false, 2, 2, 3, 1, a, nil, 0, c), gpu.ErrBuffer},
		{"biasact bias", d.BiasAct(gpu.ActReLU, 2, 3, a, c), gpu.ErrShape},
		{"biasact act", d.BiasAct(gpu.Activation(9), 2, 3, a, b), gpu.ErrShape},
		{"actgrad", d.ActGrad(gpu.ActReLU, 6, a, c), gpu.ErrShape},
		{"softmax", d.SoftmaxXent(2, 3, a, c, c, b), gpu.ErrShape},
		{"colsum", d.ColSum(3, 2, a, c), gpu.ErrShape},
		{"sgd", d.SGD(6, 1, a, c), gpu.ErrShape},
		{"upload", d.Upload(a, make([]float32, 5)), gpu.ErrShape},
		{"download", d.Download(make([]float32, 7), a), gpu.ErrShape},
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); !errors.Is(err, gpu.ErrClosed) {
		t.Fatalf("Sync after Close: %v", err)
	}
	if _, err := d.Alloc(1); !errors.Is(err, gpu.ErrClosed) {
		t.Fatalf("Alloc after Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// BenchmarkCPUGemm: a training-sized GEMM (batch 256, 64 inputs, 128 hidden).
func BenchmarkCPUGemm(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	d := gpu.NewCPU()
	defer d.Close()
	m, n, k := 256, 128, 64
	x, _ := d.Alloc(m * k)
	w, _ := d.Alloc(k * n)
	y, _ := d.Alloc(m * n)
	_ = d.Upload(x, randSlice(r, m*k))
	_ = d.Upload(w, randSlice(r, k*n))
	b.SetBytes(int64(4 * (m*k + k*n + m*n)))
	for b.Loop() {
		if err := d.Gemm(false, false, m, n, k, 1, x, w, 0, y); err != nil {
			b.Fatal(err)
		}
	}
}
