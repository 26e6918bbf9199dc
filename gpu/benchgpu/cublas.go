//go:build (linux || darwin) && (amd64 || arm64)

package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/ebitengine/purego"
)

// cublas is the part of cuBLAS the benchmark calls. Its calls must run on
// the device's thread (cuda.Device.Do), where the context is current.
type cublas struct {
	handle  uintptr
	create  func(h *uintptr) int32
	destroy func(h uintptr) int32
	sgemm   func(h uintptr, ta, tb int32, m, n, k int32, alpha *float32, a uintptr, lda int32, b uintptr, ldb int32, beta *float32, c uintptr, ldc int32) int32
	setMath func(h uintptr, mode int32) int32
}

// cublasMath_t values.
const (
	cublasDefaultMath        = 0
	cublasTF32TensorOpMath   = 3
	cublasStatusNotSupported = 15
)

// useTF32 makes the handle's SGEMM run on TF32 tensor cores (true) or in
// FP32 (false).
func (c *cublas) useTF32(on bool) error {
	mode := int32(cublasDefaultMath)
	if on {
		mode = cublasTF32TensorOpMath
	}
	if st := c.setMath(c.handle, mode); st != 0 {
		return fmt.Errorf("cublasSetMathMode(%d): status %d", mode, st)
	}
	return nil
}

func openCublas() (*cublas, error) {
	paths := []string{"libcublas.so.12", "libcublas.so.13", "libcublas.so.11", "libcublas.so"}
	if p := os.Getenv("ROLLOUT_CUBLAS"); p != "" {
		paths = []string{p}
	}
	var lib uintptr
	var errs []error
	for _, p := range paths {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err == nil {
			lib = h
			break
		}
		errs = append(errs, err)
	}
	if lib == 0 {
		msg := ""
		for i, e := range errs {
			if i > 0 {
				msg += "; "
			}
			msg += e.Error()
		}
		return nil, errors.New(msg)
	}
	c := &cublas{}
	for _, s := range []struct {
		name string
		fn   any
	}{{"cublasCreate_v2", &c.create}, {"cublasDestroy_v2", &c.destroy}, {"cublasSgemm_v2", &c.sgemm}, {"cublasSetMathMode", &c.setMath}} {
		sym, err := purego.Dlsym(lib, s.name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		purego.RegisterFunc(s.fn, sym)
	}
	if st := c.create(&c.handle); st != 0 {
		return nil, fmt.Errorf("cublasCreate_v2: status %d", st)
	}
	return c, nil
}

func (c *cublas) close() { c.destroy(c.handle) }

// sgemmRowMajor computes the row-major C = op(A)·op(B) (alpha 1, beta 0) as
// the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: cuBLAS's first operand is our B.
func (c *cublas) sgemmRowMajor(s shape, a, b, out uint64) error {
	alpha, beta := float32(1), float32(0)
	g := colMajorArgs(s)
	var pin runtime.Pinner
	pin.Pin(&alpha)
	pin.Pin(&beta)
	defer pin.Unpin()
	st := c.sgemm(c.handle, g.opX, g.opY, g.m, g.n, g.k,
		&alpha, uintptr(b), g.ldx, uintptr(a), g.ldy,
		&beta, uintptr(out), g.ldc)
	if st != 0 {
		return fmt.Errorf("cublasSgemm_v2: status %d", st)
	}
	return nil
}
