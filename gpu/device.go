// Package gpu runs rollout's training kernels on a device: an NVIDIA GPU
// through the CUDA driver API (loaded at run time without cgo), or the CPU
// (the same kernels in pure Go, which are also the tests' oracle).
//
// All matrices are row-major float32. A Device is used by one goroutine at a
// time; its buffers belong to it and must not be passed to another Device.
package gpu

import "errors"

// ErrNoDriver is returned (wrapped, with the reason) when the CUDA driver
// cannot be loaded or lacks a symbol, or when no GPU is present. It is never
// a panic.
var ErrNoDriver = errors.New("gpu: no CUDA driver")

// Buffer is an array of float32 in a device's memory.
type Buffer interface {
	// Len is the number of float32 elements.
	Len() int
}

// Activation selects the nonlinearity of BiasAct and ActGrad.
type Activation uint8

// The activations.
const (
	ActIdentity Activation = iota
	ActReLU
	ActTanh
)

// Device runs the kernels. Methods validate shapes against buffer lengths
// and return an error (never panic) on a mismatch. Launches may be
// asynchronous: Download and Sync wait for the work queued before them and
// report its errors.
type Device interface {
	// Name describes the device, e.g. "cpu" or "cuda:0 NVIDIA H100 80GB HBM3".
	Name() string
	// Alloc returns a zeroed buffer of n elements.
	Alloc(n int) (Buffer, error)
	// Free releases a buffer; freeing nil or twice is a no-op.
	Free(b Buffer)
	// Upload copies src into dst (len(src) == dst.Len()).
	Upload(dst Buffer, src []float32) error
	// Download copies src into dst (len(dst) == src.Len()).
	Download(dst []float32, src Buffer) error

	// Gemm computes C = alpha·op(A)·op(B) + beta·C, where op(A) is m×k
	// (A is k×m when transA), op(B) is k×n (B is n×k when transB) and C is
	// m×n. The k products are summed in order; when beta is 0, C's prior
	// contents are not read (BLAS convention: a NaN there does not spread).
	Gemm(transA, transB bool, m, n, k int, alpha float32, a, b Buffer, beta float32, c Buffer) error
	// BiasAct sets x[i,j] = act(x[i,j] + bias[j]) for an m×n x, in place.
	BiasAct(act Activation, m, n int, x, bias Buffer) error
	// ActGrad sets dy[i] *= act'(z[i]) for n elements, where y = act(z) is
	// the forward output given in y (ReLU: y > 0; tanh: 1 - y²).
	ActGrad(act Activation, n int, y, dy Buffer) error
	// SoftmaxXent takes m rows of n logits and m labels (class indexes
	// stored as float32), and writes loss[i] = -log softmax(logits[i])[label[i]]
	// and grad[i,j] = softmax(logits[i])[j] - [j == label[i]]. A label outside
	// [0, n) (or not an integer) is an error wrapping ErrLabel, returned by
	// this call or, on a device that checks labels on the device, by the
	// next Download or Sync; either way that call writes no output.
	SoftmaxXent(m, n int, logits, labels, loss, grad Buffer) error
	// ColSum sets out[j] = Σ_i x[i,j] for an m×n x, summing i in order.
	ColSum(m, n int, x, out Buffer) error
	// SGD sets w[i] -= lr·g[i] for n elements.
	SGD(n int, lr float32, w, g Buffer) error

	// Sync waits for all queued work and returns its first error.
	Sync() error
	// Close frees every buffer and releases the device.
	Close() error
}
