package gpu

import (
	"fmt"
	"math"
)

// NewCPU returns the CPU device: every kernel in pure Go. It is the oracle
// the GPU kernels are tested against and the device of `--backend cpu`.
//
// It is deterministic: each output element is computed by one fixed
// sequence of float32 operations (Gemm sums its k products in order, ColSum
// sums rows in order, SoftmaxXent sums a row's exponentials in order), and
// explicit float32 conversions keep the compiler from fusing a multiply and
// an add, so the same inputs give bit-identical outputs on every run and
// on one GOARCH. (exp, log and tanh come from package math, whose
// implementations may differ between architectures in the last bit: compare
// results across GOARCHes with a tolerance.)
//
// The CPU device runs kernels synchronously on the caller's goroutine; like
// every Device it is used by one goroutine at a time.
func NewCPU() Device {
	return &cpuDevice{}
}

type cpuDevice struct {
	closed bool
	bufs   map[*cpuBuffer]struct{}
}

type cpuBuffer struct {
	dev  *cpuDevice
	data []float32
}

func (b *cpuBuffer) Len() int { return len(b.data) }

func (d *cpuDevice) Name() string { return "cpu" }

func (d *cpuDevice) Alloc(n int) (Buffer, error) {
	if d.closed {
		return nil, ErrClosed
	}
	if err := CheckLen(n); err != nil {
		return nil, err
	}
	b := &cpuBuffer{dev: d, data: make([]float32, n)}
	if d.bufs == nil {
		d.bufs = make(map[*cpuBuffer]struct{})
	}
	d.bufs[b] = struct{}{}
	return b, nil
}

func (d *cpuDevice) Free(b Buffer) {
	cb, ok := b.(*cpuBuffer)
	if !ok || cb == nil || cb.dev != d {
		return
	}
	delete(d.bufs, cb)
	cb.data = nil
	cb.dev = nil
}

// buf returns b's storage, or an error naming the operand when b is not a
// live buffer of d.
func (d *cpuDevice) buf(name string, b Buffer) ([]float32, error) {
	if d.closed {
		return nil, ErrClosed
	}
	cb, ok := b.(*cpuBuffer)
	if !ok || cb == nil {
		return nil, fmt.Errorf("%w: %s is not a cpu buffer (%T)", ErrBuffer, name, b)
	}
	if cb.dev != d {
		return nil, fmt.Errorf("%w: %s is freed or belongs to another device", ErrBuffer, name)
	}
	return cb.data, nil
}

func (d *cpuDevice) Upload(dst Buffer, src []float32) error {
	p, err := d.buf("dst", dst)
	if err != nil {
		return err
	}
	if len(src) != len(p) {
		return fmt.Errorf("%w: upload of %d elements into a buffer of %d", ErrShape, len(src), len(p))
	}
	copy(p, src)
	return nil
}

func (d *cpuDevice) Download(dst []float32, src Buffer) error {
	p, err := d.buf("src", src)
	if err != nil {
		return err
	}
	if len(dst) != len(p) {
		return fmt.Errorf("%w: download of a buffer of %d elements into %d", ErrShape, len(p), len(dst))
	}
	copy(dst, p)
	return nil
}

func (d *cpuDevice) bufs3(a, b, c Buffer, an, bn, cn string) (pa, pb, pc []float32, err error) {
	if pa, err = d.buf(an, a); err != nil {
		return
	}
	if pb, err = d.buf(bn, b); err != nil {
		return
	}
	pc, err = d.buf(cn, c)
	return
}

func (d *cpuDevice) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b Buffer, beta float32, c Buffer) error {
	pa, pb, pc, err := d.bufs3(a, b, c, "A", "B", "C")
	if err != nil {
		return err
	}
	if err := CheckGemm(transA, transB, m, n, k, len(pa), len(pb), len(pc)); err != nil {
		return err
	}
	GemmRef(transA, transB, m, n, k, alpha, pa, pb, beta, pc)
	return nil
}

// GemmRef is the reference GEMM on Go slices, with Device.Gemm's semantics;
// the caller has validated the shapes (CheckGemm).
func GemmRef(transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32) {
	// Element (i,p) of op(A) is a[i*ai+p*ap]; (p,j) of op(B) is b[p*bp+j*bj].
	ai, ap := k, 1
	if transA {
		ai, ap = 1, m
	}
	bp, bj := n, 1
	if transB {
		bp, bj = 1, k
	}
	// Row i of C accumulates in acc: for each p in order, acc[j] += a(i,p)·b(p,j).
	// Each element thus sums its k products in order, exactly as the
	// straightforward triple loop would, with B read along its rows.
	acc := make([]float32, n)
	for i := 0; i < m; i++ {
		clear(acc)
		for p := 0; p < k; p++ {
			av := a[i*ai+p*ap]
			row := p * bp
			if bj == 1 {
				br := b[row : row+n]
				for j, bv := range br {
					acc[j] += float32(av * bv)
				}
			} else {
				for j := range acc {
					acc[j] += float32(av * b[row+j*bj])
				}
			}
		}
		crow := c[i*n : (i+1)*n]
		for j, v := range acc {
			v = float32(alpha * v)
			if beta != 0 {
				v += float32(beta * crow[j])
			}
			crow[j] = v
		}
	}
}

func (d *cpuDevice) BiasAct(act Activation, m, n int, x, bias Buffer) error {
	px, err := d.buf("x", x)
	if err != nil {
		return err
	}
	pb, err := d.buf("bias", bias)
	if err != nil {
		return err
	}
	if err := CheckBiasAct(act, m, n, len(px), len(pb)); err != nil {
		return err
	}
	for i := 0; i < m; i++ {
		row := px[i*n : (i+1)*n]
		for j := range row {
			row[j] = Act(act, row[j]+pb[j])
		}
	}
	return nil
}

// Act is the reference activation function.
func Act(act Activation, v float32) float32 {
	switch act {
	case ActReLU:
		if v > 0 {
			return v
		}
		return 0
	case ActTanh:
		return float32(math.Tanh(float64(v)))
	}
	return v
}

// ActDeriv is the reference activation derivative, given the forward
// output y = act(z).
func ActDeriv(act Activation, y float32) float32 {
	switch act {
	case ActReLU:
		if y > 0 {
			return 1
		}
		return 0
	case ActTanh:
		return 1 - float32(y*y)
	}
	return 1
}

func (d *cpuDevice) ActGrad(act Activation, n int, y, dy Buffer) error {
	py, err := d.buf("y", y)
	if err != nil {
		return err
	}
	pd, err := d.buf("dy", dy)
	if err != nil {
		return err
	}
	if err := CheckActGrad(act, n, len(py), len(pd)); err != nil {
		return err
	}
	if act == ActIdentity {
		return nil
	}
	for i := range pd {
		pd[i] *= ActDeriv(act, py[i])
	}
	return nil
}

func (d *cpuDevice) SoftmaxXent(m, n int, logits, labels, loss, grad Buffer) error {
	pz, err := d.buf("logits", logits)
	if err != nil {
		return err
	}
	pl, pw, pg, err := d.bufs3(labels, loss, grad, "labels", "loss", "grad")
	if err != nil {
		return err
	}
	if err := CheckSoftmaxXent(m, n, len(pz), len(pl), len(pw), len(pg)); err != nil {
		return err
	}
	for i := 0; i < m; i++ {
		if err := CheckLabel(i, pl[i], n); err != nil {
			return err
		}
	}
	for i := 0; i < m; i++ {
		pw[i] = SoftmaxXentRow(pz[i*n:(i+1)*n], int(pl[i]), pg[i*n:(i+1)*n])
	}
	return nil
}

// SoftmaxXentRow is the reference softmax cross-entropy of one row: it
// writes the gradient into grad and returns the loss. The row's maximum is
// subtracted before exponentiating; the exponentials are summed in order.
func SoftmaxXentRow(z []float32, label int, grad []float32) float32 {
	mx := z[0]
	for _, v := range z[1:] {
		if v > mx {
			mx = v
		}
	}
	var sum float32
	for j, v := range z {
		e := float32(math.Exp(float64(v - mx)))
		grad[j] = e
		sum += e
	}
	inv := 1 / sum
	for j := range grad {
		grad[j] *= inv
	}
	grad[label] -= 1
	return float32(math.Log(float64(sum))) - (z[label] - mx)
}

func (d *cpuDevice) ColSum(m, n int, x, out Buffer) error {
	px, err := d.buf("x", x)
	if err != nil {
		return err
	}
	po, err := d.buf("out", out)
	if err != nil {
		return err
	}
	if err := CheckColSum(m, n, len(px), len(po)); err != nil {
		return err
	}
	for j := 0; j < n; j++ {
		var s float32
		for i := 0; i < m; i++ {
			s += px[i*n+j]
		}
		po[j] = s
	}
	return nil
}

func (d *cpuDevice) SGD(n int, lr float32, w, g Buffer) error {
	pw, err := d.buf("w", w)
	if err != nil {
		return err
	}
	pg, err := d.buf("g", g)
	if err != nil {
		return err
	}
	if err := CheckSGD(n, lr, len(pw), len(pg)); err != nil {
		return err
	}
	for i := range pw {
		pw[i] -= float32(lr * pg[i])
	}
	return nil
}

func (d *cpuDevice) Sync() error {
	if d.closed {
		return ErrClosed
	}
	return nil
}

func (d *cpuDevice) Close() error {
	if d.closed {
		return nil
	}
	for b := range d.bufs {
		b.data, b.dev = nil, nil
	}
	d.bufs = nil
	d.closed = true
	return nil
}
