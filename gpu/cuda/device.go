//go:build (linux || darwin) && (amd64 || arm64)

package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"github.com/rollout/rollout/gpu"
	"github.com/rollout/rollout/gpu/kernels"
)

// Open opens CUDA device ordinal through the driver named by DriverEnv
// (default libcuda.so.1), with the default Options. ctx bounds only the
// opening.
func Open(ctx context.Context, ordinal int) (gpu.Device, error) {
	return OpenWith(ctx, ordinal, Options{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, ordinal int, opt Options) (gpu.Device, error) {
	path := os.Getenv(DriverEnv)
	if path == "" {
		path = DefaultDriver
	}
	return OpenLibraryWith(ctx, path, ordinal, opt)
}

// OpenLibrary opens CUDA device ordinal through the driver library at path,
// with the default Options. The result is a *Device.
func OpenLibrary(ctx context.Context, path string, ordinal int) (gpu.Device, error) {
	return OpenLibraryWith(ctx, path, ordinal, Options{})
}

// OpenLibraryWith is OpenLibrary with options.
func OpenLibraryWith(ctx context.Context, path string, ordinal int, opt Options) (gpu.Device, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ordinal < 0 {
		return nil, fmt.Errorf("%w: device ordinal %d is negative", gpu.ErrNoDriver, ordinal)
	}
	drv, err := loadDriver(path)
	if err != nil {
		return nil, err
	}
	d := &Device{drv: drv, gemm: kernels.GemmFP32, calls: make(chan func(), 1), done: make(chan struct{}), bufs: map[*buffer]struct{}{}}
	if opt.TF32 {
		d.gemm = kernels.GemmTF32
	}
	go d.serve()
	type result struct{ err error }
	res := make(chan result, 1)
	d.calls <- func() { res <- result{d.init(ordinal)} }
	select {
	case r := <-res:
		if r.err != nil {
			d.shutdown()
			return nil, r.err
		}
	case <-ctx.Done():
		// init still runs to completion on its thread; tear down after it.
		go func() {
			if r := <-res; r.err == nil {
				_ = d.Close()
			} else {
				d.shutdown()
			}
		}()
		return nil, ctx.Err()
	}
	return d, nil
}

// Device is a CUDA context on one GPU, with rollout's kernels loaded. It
// implements gpu.Device; its methods must not be called concurrently.
type Device struct {
	drv   *driver
	gemm  kernels.GemmMath // which GEMM kernels Gemm launches
	calls chan func()
	done  chan struct{}

	// Owned by the serving goroutine (set in init, then read-only or only
	// touched inside calls).
	name    string
	ctx     uintptr
	mods    []uintptr
	fns     map[string]uintptr
	badFlag uint64 // device int: 1 + a row with a bad label, 0 when none

	// Owned by the caller's goroutine.
	bufs         map[*buffer]struct{}
	labelPending bool
	closed       bool
}

type buffer struct {
	dev *Device
	ptr uint64
	n   int
}

func (b *buffer) Len() int { return b.n }

// serve runs every driver call of the device on one locked OS thread, on
// which the device's context is current.
func (d *Device) serve() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		select {
		case fn := <-d.calls:
			fn()
		case <-d.done:
			return
		}
	}
}

// do runs fn on the device's thread and returns its error.
func (d *Device) do(fn func() error) error {
	errc := make(chan error, 1)
	d.calls <- func() { errc <- fn() }
	return <-errc
}

func (d *Device) shutdown() { close(d.done) }

// init runs on the device thread: driver, device, context, modules.
func (d *Device) init(ordinal int) error {
	drv := d.drv
	if code := drv.cuInit(0); code != cudaSuccess {
		err := drv.check("cuInit", code)
		if code == cudaErrNoDevice {
			return fmt.Errorf("%w: %s: no CUDA-capable device (%w)", gpu.ErrNoDriver, drv.path, err)
		}
		return fmt.Errorf("%w: %s: %w", gpu.ErrNoDriver, drv.path, err)
	}
	var count int32
	if err := drv.check("cuDeviceGetCount", drv.cuDeviceGetCount(&count)); err != nil {
		return fmt.Errorf("%w: %v", gpu.ErrNoDriver, err)
	}
	if ordinal >= int(count) {
		return fmt.Errorf("%w: device ordinal %d, but %s has %d device(s)", gpu.ErrNoDriver, ordinal, drv.path, count)
	}
	var dev int32
	if err := drv.check("cuDeviceGet", drv.cuDeviceGet(&dev, int32(ordinal))); err != nil {
		return fmt.Errorf("%w: %v", gpu.ErrNoDriver, err)
	}
	nameBuf := make([]byte, 256)
	if err := drv.check("cuDeviceGetName", drv.cuDeviceGetName(&nameBuf[0], int32(len(nameBuf)), dev)); err != nil {
		return err
	}
	d.name = fmt.Sprintf("cuda:%d %s", ordinal, cString(&nameBuf[0], len(nameBuf)))
	if d.gemm == kernels.GemmTF32 {
		d.name += " (GEMM: TF32 tensor cores)"
	}
	if err := drv.check("cuCtxCreate_v2", drv.cuCtxCreate(&d.ctx, 0, dev)); err != nil {
		return err
	}
	d.fns = map[string]uintptr{}
	for _, k := range kernels.All {
		if _, ok := d.fns[k.Name]; ok {
			continue
		}
		mod, err := d.loadModule(k.Module)
		if err != nil {
			d.release()
			return err
		}
		for _, k2 := range kernels.All {
			if k2.Module != k.Module {
				continue
			}
			var fn uintptr
			if err := drv.check("cuModuleGetFunction", drv.cuModuleGetFunction(&fn, mod, k2.Name)); err != nil {
				d.release()
				return fmt.Errorf("kernel %s: %w", k2.Name, err)
			}
			d.fns[k2.Name] = fn
		}
	}
	if err := drv.check("cuMemAlloc_v2", drv.cuMemAlloc(&d.badFlag, 4)); err != nil {
		d.release()
		return err
	}
	if err := drv.check("cuMemsetD32_v2", drv.cuMemsetD32(d.badFlag, 0, 1)); err != nil {
		d.release()
		return err
	}
	return nil
}

// loadModule JIT-loads one PTX module, returning the JIT's error log in the
// error when the driver refuses it.
func (d *Device) loadModule(name string) (uintptr, error) {
	img := kernels.PTX(name)
	if img == nil {
		return 0, fmt.Errorf("cuda: no PTX module %q", name)
	}
	return d.loadImage(img)
}

func (d *Device) loadImage(img []byte) (uintptr, error) {
	const logSize = 8192
	errLog := make([]byte, logSize)
	infoLog := make([]byte, logSize)
	opts := []uint32{jitErrorLogBuffer, jitErrorLogBufferBytes, jitInfoLogBuffer, jitInfoLogBufferBytes}
	vals := []uintptr{uintptr(unsafe.Pointer(&errLog[0])), logSize, uintptr(unsafe.Pointer(&infoLog[0])), logSize}
	var pin runtime.Pinner
	pin.Pin(&errLog[0])
	pin.Pin(&infoLog[0])
	pin.Pin(&img[0])
	pin.Pin(&opts[0])
	pin.Pin(&vals[0])
	defer pin.Unpin()
	var mod uintptr
	code := d.drv.cuModuleLoadDataEx(&mod, unsafe.Pointer(&img[0]), uint32(len(opts)), unsafe.Pointer(&opts[0]), unsafe.Pointer(&vals[0]))
	if code != cudaSuccess {
		err := d.drv.check("cuModuleLoadDataEx", code)
		var e *Error
		if errors.As(err, &e) {
			e.Log = strings.TrimSpace(cString(&errLog[0], logSize))
		}
		return 0, err
	}
	d.mods = append(d.mods, mod)
	return mod, nil
}

// release frees the device-thread resources (flag, modules, context).
func (d *Device) release() {
	if d.badFlag != 0 {
		d.drv.cuMemFree(d.badFlag)
		d.badFlag = 0
	}
	for _, m := range d.mods {
		d.drv.cuModuleUnload(m)
	}
	d.mods = nil
	if d.ctx != 0 {
		d.drv.cuCtxDestroy(d.ctx)
		d.ctx = 0
	}
}

// Name describes the device: "cuda:ORDINAL DEVICE-NAME", followed by "
// (GEMM: TF32 tensor cores)" when it was opened with Options.TF32.
func (d *Device) Name() string { return d.name }

// Alloc returns a zeroed buffer of n float32s in device memory.
func (d *Device) Alloc(n int) (gpu.Buffer, error) {
	if d.closed {
		return nil, gpu.ErrClosed
	}
	if err := gpu.CheckLen(n); err != nil {
		return nil, err
	}
	b := &buffer{dev: d, n: n}
	if n > 0 {
		err := d.do(func() error {
			if err := d.drv.check("cuMemAlloc_v2", d.drv.cuMemAlloc(&b.ptr, uintptr(n)*4)); err != nil {
				return err
			}
			return d.drv.check("cuMemsetD32_v2", d.drv.cuMemsetD32(b.ptr, 0, uintptr(n)))
		})
		if err != nil {
			if b.ptr != 0 {
				d.do(func() error { d.drv.cuMemFree(b.ptr); return nil })
			}
			return nil, fmt.Errorf("alloc %d floats: %w", n, err)
		}
	}
	d.bufs[b] = struct{}{}
	return b, nil
}

// Free releases b; nil, a freed buffer or another device's buffer is a no-op.
func (d *Device) Free(b gpu.Buffer) {
	cb, ok := b.(*buffer)
	if !ok || cb == nil || cb.dev != d || d.closed {
		return
	}
	delete(d.bufs, cb)
	if cb.ptr != 0 {
		ptr := cb.ptr
		_ = d.do(func() error { return d.drv.check("cuMemFree_v2", d.drv.cuMemFree(ptr)) })
	}
	cb.dev, cb.ptr = nil, 0
}

func (d *Device) buf(name string, b gpu.Buffer) (*buffer, error) {
	if d.closed {
		return nil, gpu.ErrClosed
	}
	cb, ok := b.(*buffer)
	if !ok || cb == nil {
		return nil, fmt.Errorf("%w: %s is not a cuda buffer (%T)", gpu.ErrBuffer, name, b)
	}
	if cb.dev != d {
		return nil, fmt.Errorf("%w: %s is freed or belongs to another device", gpu.ErrBuffer, name)
	}
	return cb, nil
}

// Upload copies src into dst.
func (d *Device) Upload(dst gpu.Buffer, src []float32) error {
	b, err := d.buf("dst", dst)
	if err != nil {
		return err
	}
	if len(src) != b.n {
		return fmt.Errorf("%w: upload of %d elements into a buffer of %d", gpu.ErrShape, len(src), b.n)
	}
	if b.n == 0 {
		return nil
	}
	return d.do(func() error {
		err := d.drv.check("cuMemcpyHtoD_v2", d.drv.cuMemcpyHtoD(b.ptr, unsafe.Pointer(&src[0]), uintptr(b.n)*4))
		runtime.KeepAlive(src)
		return err
	})
}

// Download waits for the queued work, copies src into dst and reports the
// queued work's errors (a bad SoftmaxXent label among them).
func (d *Device) Download(dst []float32, src gpu.Buffer) error {
	b, err := d.buf("src", src)
	if err != nil {
		return err
	}
	if len(dst) != b.n {
		return fmt.Errorf("%w: download of a buffer of %d elements into %d", gpu.ErrShape, b.n, len(dst))
	}
	if b.n > 0 {
		err = d.do(func() error {
			err := d.drv.check("cuMemcpyDtoH_v2", d.drv.cuMemcpyDtoH(unsafe.Pointer(&dst[0]), b.ptr, uintptr(b.n)*4))
			runtime.KeepAlive(dst)
			return err
		})
		if err != nil {
			return err
		}
	}
	return d.labelErr()
}

// Sync waits for the queued work and reports its first error.
func (d *Device) Sync() error {
	if d.closed {
		return gpu.ErrClosed
	}
	if err := d.do(func() error { return d.drv.check("cuCtxSynchronize", d.drv.cuCtxSynchronize()) }); err != nil {
		return err
	}
	return d.labelErr()
}

// labelErr reads and clears the bad-label flag when a SoftmaxXent ran since
// the last look.
func (d *Device) labelErr() error {
	if !d.labelPending {
		return nil
	}
	var row int32
	err := d.do(func() error {
		if err := d.drv.check("cuMemcpyDtoH_v2", d.drv.cuMemcpyDtoH(unsafe.Pointer(&row), d.badFlag, 4)); err != nil {
			return err
		}
		if row != 0 {
			return d.drv.check("cuMemsetD32_v2", d.drv.cuMemsetD32(d.badFlag, 0, 1))
		}
		return nil
	})
	if err != nil {
		return err
	}
	d.labelPending = false
	if row != 0 {
		return fmt.Errorf("%w: softmaxxent: row %d has a label that is not an integer in [0, n); that call wrote nothing", gpu.ErrLabel, row-1)
	}
	return nil
}

// launch checks args against k's signature (int32, float32, or a device
// pointer as uint64) and launches k asynchronously with its block size and
// dynamic shared memory.
func (d *Device) launch(k kernels.Kernel, grid [2]int, args ...any) error {
	if len(args) != len(k.Params) {
		return fmt.Errorf("cuda: %s: %d arguments for %d parameters", k.Name, len(args), len(k.Params))
	}
	if grid[0] <= 0 || grid[1] <= 0 || grid[0] > math.MaxInt32 || grid[1] > 65535 {
		return fmt.Errorf("%w: %s: grid %v out of range", gpu.ErrShape, k.Name, grid)
	}
	vals := make([]uint64, len(args))
	for i, a := range args {
		var want kernels.Param
		switch v := a.(type) {
		case int32:
			want, vals[i] = kernels.I32, uint64(uint32(v))
		case float32:
			want, vals[i] = kernels.F32, uint64(math.Float32bits(v))
		case uint64:
			want, vals[i] = kernels.Ptr, v
		default:
			return fmt.Errorf("cuda: %s: argument %d has Go type %T", k.Name, i, a)
		}
		if want != k.Params[i] {
			return fmt.Errorf("cuda: %s: argument %d is %v, the kernel takes %v", k.Name, i, want, k.Params[i])
		}
	}
	return d.do(func() error {
		fn, ok := d.fns[k.Name]
		if !ok {
			return fmt.Errorf("cuda: kernel %s not loaded", k.Name)
		}
		// The driver reads each parameter through a void*: ptrs[i] points at
		// vals[i] (the low bytes hold a 4-byte value: little-endian).
		ptrs := make([]unsafe.Pointer, len(vals))
		var pin runtime.Pinner
		defer pin.Unpin()
		pin.Pin(&vals[0])
		for i := range vals {
			ptrs[i] = unsafe.Pointer(&vals[i])
		}
		pin.Pin(&ptrs[0])
		code := d.drv.cuLaunchKernel(fn, uint32(grid[0]), uint32(grid[1]), 1, uint32(k.Threads), 1, 1, uint32(k.Shared), 0, unsafe.Pointer(&ptrs[0]), nil)
		return d.drv.check("cuLaunchKernel "+k.Name, code)
	})
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// Gemm launches the GEMM kernel for the device's math (Options.TF32) and the
// transposes (see gpu.Device.Gemm).
func (d *Device) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b gpu.Buffer, beta float32, c gpu.Buffer) error {
	ba, err := d.buf("A", a)
	if err != nil {
		return err
	}
	bb, err := d.buf("B", b)
	if err != nil {
		return err
	}
	bc, err := d.buf("C", c)
	if err != nil {
		return err
	}
	if err := gpu.CheckGemm(transA, transB, m, n, k, ba.n, bb.n, bc.n); err != nil {
		return err
	}
	return d.launch(kernels.GemmFor(d.gemm, transA, transB), [2]int{ceilDiv(n, kernels.GemmBN), ceilDiv(m, kernels.GemmBM)},
		int32(m), int32(n), int32(k), alpha, ba.ptr, bb.ptr, beta, bc.ptr)
}

// BiasAct launches rl_bias_act.
func (d *Device) BiasAct(act gpu.Activation, m, n int, x, bias gpu.Buffer) error {
	bx, err := d.buf("x", x)
	if err != nil {
		return err
	}
	bb, err := d.buf("bias", bias)
	if err != nil {
		return err
	}
	if err := gpu.CheckBiasAct(act, m, n, bx.n, bb.n); err != nil {
		return err
	}
	return d.launch(kernels.BiasAct, [2]int{ceilDiv(m*n, kernels.OpsThreads), 1},
		int32(act), int32(m), int32(n), bx.ptr, bb.ptr)
}

// ActGrad launches rl_act_grad.
func (d *Device) ActGrad(act gpu.Activation, n int, y, dy gpu.Buffer) error {
	by, err := d.buf("y", y)
	if err != nil {
		return err
	}
	bd, err := d.buf("dy", dy)
	if err != nil {
		return err
	}
	if err := gpu.CheckActGrad(act, n, by.n, bd.n); err != nil {
		return err
	}
	return d.launch(kernels.ActGrad, [2]int{ceilDiv(n, kernels.OpsThreads), 1},
		int32(act), int32(n), by.ptr, bd.ptr)
}

// SoftmaxXent launches rl_check_labels then rl_softmax_xent; a bad label is
// reported by the next Download or Sync, and the softmax writes nothing.
func (d *Device) SoftmaxXent(m, n int, logits, labels, loss, grad gpu.Buffer) error {
	bz, err := d.buf("logits", logits)
	if err != nil {
		return err
	}
	bl, err := d.buf("labels", labels)
	if err != nil {
		return err
	}
	bw, err := d.buf("loss", loss)
	if err != nil {
		return err
	}
	bg, err := d.buf("grad", grad)
	if err != nil {
		return err
	}
	if err := gpu.CheckSoftmaxXent(m, n, bz.n, bl.n, bw.n, bg.n); err != nil {
		return err
	}
	d.labelPending = true
	if err := d.launch(kernels.CheckLabels, [2]int{ceilDiv(m, kernels.OpsThreads), 1},
		int32(m), int32(n), bl.ptr, d.badFlag); err != nil {
		return err
	}
	return d.launch(kernels.SoftmaxXent, [2]int{m, 1},
		int32(m), int32(n), bz.ptr, bl.ptr, bw.ptr, bg.ptr, d.badFlag)
}

// ColSum launches rl_col_sum.
func (d *Device) ColSum(m, n int, x, out gpu.Buffer) error {
	bx, err := d.buf("x", x)
	if err != nil {
		return err
	}
	bo, err := d.buf("out", out)
	if err != nil {
		return err
	}
	if err := gpu.CheckColSum(m, n, bx.n, bo.n); err != nil {
		return err
	}
	return d.launch(kernels.ColSum, [2]int{ceilDiv(n, kernels.OpsThreads), 1},
		int32(m), int32(n), bx.ptr, bo.ptr)
}

// SGD launches rl_sgd.
func (d *Device) SGD(n int, lr float32, w, g gpu.Buffer) error {
	bw, err := d.buf("w", w)
	if err != nil {
		return err
	}
	bg, err := d.buf("g", g)
	if err != nil {
		return err
	}
	if err := gpu.CheckSGD(n, lr, bw.n, bg.n); err != nil {
		return err
	}
	return d.launch(kernels.SGD, [2]int{ceilDiv(n, kernels.OpsThreads), 1},
		int32(n), lr, bw.ptr, bg.ptr)
}

// Close frees every buffer, unloads the modules, destroys the context and
// stops the device's thread. A second Close is a no-op.
func (d *Device) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	for b := range d.bufs {
		if b.ptr != 0 {
			ptr := b.ptr
			_ = d.do(func() error { d.drv.cuMemFree(ptr); return nil })
		}
		b.dev, b.ptr = nil, 0
	}
	d.bufs = nil
	err := d.do(func() error {
		err := d.drv.check("cuCtxSynchronize", d.drv.cuCtxSynchronize())
		d.release()
		return err
	})
	d.shutdown()
	return err
}

// DevicePtr returns b's device address, for code that calls other CUDA
// libraries (cuBLAS in the GEMM benchmark) on this device's context.
func (d *Device) DevicePtr(b gpu.Buffer) (uint64, error) {
	cb, err := d.buf("buffer", b)
	if err != nil {
		return 0, err
	}
	return cb.ptr, nil
}

// Do runs fn on the device's thread, where its CUDA context is current
// (for calls into other CUDA libraries), and returns fn's error.
func (d *Device) Do(fn func() error) error {
	if d.closed {
		return gpu.ErrClosed
	}
	return d.do(fn)
}
