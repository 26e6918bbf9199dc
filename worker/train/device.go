package train

import (
	"context"
	"fmt"

	"github.com/rollout/rollout/gpu"
	"github.com/rollout/rollout/gpu/cuda"
)

// The device names OpenDevice takes (rollout-worker --backend).
const (
	// DeviceCPU is the pure-Go device (gpu.NewCPU): deterministic, the
	// kernels' oracle.
	DeviceCPU = "cpu"
	// DeviceGPU is CUDA device 0 through the driver (gpu/cuda.Open; the
	// library is libcuda.so.1 or the one cuda.DriverEnv names).
	DeviceGPU = "gpu"
)

// OpenDevice opens the device a worker runs training items on: DeviceCPU
// or DeviceGPU. A GPU that cannot be opened (no driver, a missing symbol,
// no device) is an error wrapping gpu.ErrNoDriver with the reason; it never
// falls back to the CPU. Another name is an error wrapping
// ErrInvalidArgument. The caller closes the device.
func OpenDevice(ctx context.Context, name string) (gpu.Device, error) {
	switch name {
	case DeviceCPU:
		return gpu.NewCPU(), nil
	case DeviceGPU:
		d, err := cuda.Open(ctx, 0)
		if err != nil {
			return nil, fmt.Errorf("train backend: opening the GPU: %w", err)
		}
		return d, nil
	}
	return nil, fmt.Errorf("%w: device %q is not %q or %q", ErrInvalidArgument, name, DeviceCPU, DeviceGPU)
}
