//go:build (linux || darwin) && (amd64 || arm64)

package cuda

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rollout/rollout/gpu"
)

// CUresult values the package tells apart.
const (
	cudaSuccess     = 0
	cudaErrNoDevice = 100
)

// CUjit_option values for cuModuleLoadDataEx.
const (
	jitInfoLogBuffer       = 3
	jitInfoLogBufferBytes  = 4
	jitErrorLogBuffer      = 5
	jitErrorLogBufferBytes = 6
)

// driver is the bound driver API: the dozen calls the device needs.
type driver struct {
	path string

	cuInit              func(flags uint32) int32
	cuDriverGetVersion  func(version *int32) int32
	cuDeviceGetCount    func(count *int32) int32
	cuDeviceGet         func(dev *int32, ordinal int32) int32
	cuDeviceGetName     func(name *byte, n int32, dev int32) int32
	cuCtxCreate         func(ctx *uintptr, flags uint32, dev int32) int32
	cuCtxDestroy        func(ctx uintptr) int32
	cuCtxSynchronize    func() int32
	cuModuleLoadDataEx  func(mod *uintptr, image unsafe.Pointer, nopt uint32, opts unsafe.Pointer, vals unsafe.Pointer) int32
	cuModuleGetFunction func(fn *uintptr, mod uintptr, name string) int32
	cuModuleUnload      func(mod uintptr) int32
	cuMemAlloc          func(dptr *uint64, bytes uintptr) int32
	cuMemFree           func(dptr uint64) int32
	cuMemcpyHtoD        func(dst uint64, src unsafe.Pointer, bytes uintptr) int32
	cuMemcpyDtoH        func(dst unsafe.Pointer, src uint64, bytes uintptr) int32
	cuMemsetD32         func(dst uint64, v uint32, n uintptr) int32
	cuLaunchKernel      func(fn uintptr, gx, gy, gz, bx, by, bz, shared uint32, stream uintptr, params unsafe.Pointer, extra unsafe.Pointer) int32
	cuGetErrorName      func(code int32, s **byte) int32 // optional: nil when absent
}

// loadDriver opens the library at path and binds its entry points. Every
// failure wraps gpu.ErrNoDriver.
func loadDriver(path string) (*driver, error) {
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", gpu.ErrNoDriver, err)
	}
	d := &driver{path: path}
	syms := []struct {
		name string
		fn   any
	}{
		{"cuInit", &d.cuInit},
		{"cuDriverGetVersion", &d.cuDriverGetVersion},
		{"cuDeviceGetCount", &d.cuDeviceGetCount},
		{"cuDeviceGet", &d.cuDeviceGet},
		{"cuDeviceGetName", &d.cuDeviceGetName},
		{"cuCtxCreate_v2", &d.cuCtxCreate},
		{"cuCtxDestroy_v2", &d.cuCtxDestroy},
		{"cuCtxSynchronize", &d.cuCtxSynchronize},
		{"cuModuleLoadDataEx", &d.cuModuleLoadDataEx},
		{"cuModuleGetFunction", &d.cuModuleGetFunction},
		{"cuModuleUnload", &d.cuModuleUnload},
		{"cuMemAlloc_v2", &d.cuMemAlloc},
		{"cuMemFree_v2", &d.cuMemFree},
		{"cuMemcpyHtoD_v2", &d.cuMemcpyHtoD},
		{"cuMemcpyDtoH_v2", &d.cuMemcpyDtoH},
		{"cuMemsetD32_v2", &d.cuMemsetD32},
		{"cuLaunchKernel", &d.cuLaunchKernel},
	}
	for _, s := range syms {
		if err := bind(lib, s.name, s.fn); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", gpu.ErrNoDriver, path, err)
		}
	}
	if bind(lib, "cuGetErrorName", &d.cuGetErrorName) != nil {
		d.cuGetErrorName = nil
	}
	return d, nil
}

// bind looks up one symbol and registers it into fptr (a pointer to a func
// variable). Dlsym reports a missing symbol as an error, where purego's
// RegisterLibFunc would panic; a panic from RegisterFunc (a signature it
// cannot call) is turned into an error too.
func bind(lib uintptr, name string, fptr any) (err error) {
	sym, err := purego.Dlsym(lib, name)
	if err != nil {
		return fmt.Errorf("symbol %s: %v", name, err)
	}
	if sym == 0 {
		return fmt.Errorf("symbol %s is NULL", name)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("symbol %s: %v", name, r)
		}
	}()
	purego.RegisterFunc(fptr, sym)
	return nil
}

// Error is a failed driver call.
type Error struct {
	Call string // the driver entry point, e.g. "cuLaunchKernel"
	Code int    // the CUresult
	Name string // the driver's name for Code, e.g. "CUDA_ERROR_INVALID_VALUE", when it has one
	Log  string // the JIT error log (cuModuleLoadDataEx), when there is one
}

func (e *Error) Error() string {
	s := fmt.Sprintf("cuda: %s: error %d", e.Call, e.Code)
	if e.Name != "" {
		s += " (" + e.Name + ")"
	}
	if e.Log != "" {
		s += ": " + e.Log
	}
	return s
}

// check turns a CUresult into nil or an *Error.
func (d *driver) check(call string, code int32) error {
	if code == cudaSuccess {
		return nil
	}
	e := &Error{Call: call, Code: int(code)}
	if d.cuGetErrorName != nil {
		var p *byte
		if d.cuGetErrorName(code, &p) == cudaSuccess && p != nil {
			e.Name = cString(p, 128)
		}
	}
	return e
}

// cString copies a NUL-terminated C string of at most max bytes.
func cString(p *byte, max int) string {
	var b []byte
	for i := 0; i < max; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// DriverVersion loads the driver library at path and returns what its
// cuDriverGetVersion reports: the newest CUDA version the driver supports,
// as 1000·major + 10·minor (12020 is CUDA 12.2). It needs no device and no
// cuInit. A library that cannot be loaded or lacks a symbol is an error
// wrapping gpu.ErrNoDriver.
func DriverVersion(path string) (int, error) {
	d, err := loadDriver(path)
	if err != nil {
		return 0, err
	}
	var v int32
	if err := d.check("cuDriverGetVersion", d.cuDriverGetVersion(&v)); err != nil {
		return 0, fmt.Errorf("%w: %s: %v", gpu.ErrNoDriver, path, err)
	}
	return int(v), nil
}
