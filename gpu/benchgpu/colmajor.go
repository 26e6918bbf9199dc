package main

// gemmArgs are a column-major sgemm call's arguments: C (m×n, leading
// dimension ldc) = opX(X)·opY(Y), X's leading dimension ldx, Y's ldy.
type gemmArgs struct {
	opX, opY int32
	m, n, k  int32
	ldx, ldy int32
	ldc      int32
}

// colMajorArgs maps the row-major C = op(A)·op(B) (m×n) to the column-major
// Cᵀ = op(B)ᵀ·op(A)ᵀ (n×m): X is our B, Y is our A. A row-major r×c matrix
// is the column-major c×r matrix with leading dimension c.
func colMajorArgs(s shape) gemmArgs {
	g := gemmArgs{opX: cublasOpN, opY: cublasOpN, m: int32(s.n), n: int32(s.m), k: int32(s.k), ldc: int32(s.n)}
	g.ldx = int32(s.n) // B row-major k×n
	if s.transB {
		g.opX, g.ldx = cublasOpT, int32(s.k) // B row-major n×k
	}
	g.ldy = int32(s.k) // A row-major m×k
	if s.transA {
		g.opY, g.ldy = cublasOpT, int32(s.m) // A row-major k×m
	}
	return g
}

const (
	cublasOpN = 0
	cublasOpT = 1
)
