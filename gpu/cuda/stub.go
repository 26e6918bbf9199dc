//go:build !((linux || darwin) && (amd64 || arm64))

package cuda

import (
	"context"
	"fmt"
	"runtime"

	"github.com/rollout/rollout/gpu"
)

// Open reports that this platform has no CUDA driver loader.
func Open(ctx context.Context, ordinal int) (gpu.Device, error) {
	return OpenLibrary(ctx, "", ordinal)
}

// OpenWith reports that this platform has no CUDA driver loader.
func OpenWith(ctx context.Context, ordinal int, opt Options) (gpu.Device, error) {
	return OpenLibrary(ctx, "", ordinal)
}

// OpenLibraryWith reports that this platform has no CUDA driver loader.
func OpenLibraryWith(ctx context.Context, path string, ordinal int, opt Options) (gpu.Device, error) {
	return OpenLibrary(ctx, path, ordinal)
}

// OpenLibrary reports that this platform has no CUDA driver loader.
func OpenLibrary(ctx context.Context, path string, ordinal int) (gpu.Device, error) {
	return nil, fmt.Errorf("%w: CUDA driver loading is not supported on %s/%s", gpu.ErrNoDriver, runtime.GOOS, runtime.GOARCH)
}

// DriverVersion reports that this platform has no CUDA driver loader.
func DriverVersion(path string) (int, error) {
	return 0, fmt.Errorf("%w: CUDA driver loading is not supported on %s/%s", gpu.ErrNoDriver, runtime.GOOS, runtime.GOARCH)
}

// Device exists on every platform so that code using it builds; on this
// platform Open never returns one.
type Device struct{ gpu.Device }

// DevicePtr reports that there is no driver.
func (d *Device) DevicePtr(b gpu.Buffer) (uint64, error) {
	return 0, fmt.Errorf("%w: no CUDA device on %s/%s", gpu.ErrNoDriver, runtime.GOOS, runtime.GOARCH)
}

// Do reports that there is no driver.
func (d *Device) Do(fn func() error) error {
	return fmt.Errorf("%w: no CUDA device on %s/%s", gpu.ErrNoDriver, runtime.GOOS, runtime.GOARCH)
}
