package main

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rollout/rollout/gpu"
)

// sgemmColMajor is BLAS sgemm's definition (alpha 1, beta 0).
func sgemmColMajor(g gemmArgs, x, y, c []float32) {
	at := func(p []float32, op int32, ld, i, j int32) float32 { // element (i,j) of op(P)
		if op == cublasOpT {
			i, j = j, i
		}
		return p[i+j*ld]
	}
	for i := int32(0); i < g.m; i++ {
		for j := int32(0); j < g.n; j++ {
			var s float32
			for p := int32(0); p < g.k; p++ {
				s += at(x, g.opX, g.ldx, i, p) * at(y, g.opY, g.ldy, p, j)
			}
			c[i+j*g.ldc] = s
		}
	}
}

// TestColMajorTrick: cuBLAS called with colMajorArgs computes our
// row-major GEMM, for every transpose combination (checked against the
// CPU reference with BLAS's definition of sgemm standing in for cuBLAS).
func TestColMajorTrick(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, s := range []shape{{m: 3, n: 5, k: 4}, {m: 7, n: 2, k: 3, transA: true}, {m: 4, n: 6, k: 5, transB: true}, {m: 5, n: 3, k: 2, transA: true, transB: true}} {
		a := make([]float32, s.m*s.k)
		b := make([]float32, s.k*s.n)
		for i := range a {
			a[i] = r.Float32()
		}
		for i := range b {
			b[i] = r.Float32()
		}
		want := make([]float32, s.m*s.n)
		gpu.GemmRef(s.transA, s.transB, s.m, s.n, s.k, 1, a, b, 0, want)
		got := make([]float32, s.m*s.n)
		sgemmColMajor(colMajorArgs(s), b, a, got)
		for i := range got {
			if math.Abs(float64(got[i]-want[i])) > 1e-5 {
				t.Fatalf("%v: element %d = %v, want %v", s, i, got[i], want[i])
			}
		}
	}
}

func TestParseShapes(t *testing.T) {
	s, err := parseShapes("2x3x4, 5x6x7:TN,1x1x1:TT")
	if err != nil || len(s) != 3 || s[1] != (shape{5, 6, 7, true, false}) || !s[2].transA || !s[2].transB {
		t.Fatalf("%v %v", s, err)
	}
	for _, bad := range []string{"2x3", "0x1x1", "2x3x4:XY", "axbxc"} {
		if _, err := parseShapes(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
