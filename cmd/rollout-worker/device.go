package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rollout/rollout/gpu"
	"github.com/rollout/rollout/gpu/cuda"
)

// openDeviceTimeout bounds opening a GPU (driver load, context creation,
// module JIT).
const openDeviceTimeout = 2 * time.Minute

// openDevice opens the device of --backend cpu (gpu.NewCPU) or gpu (CUDA
// device ordinal through cuda.Open). A GPU that cannot be opened is an error
// naming the reason (it wraps gpu.ErrNoDriver when the driver or the
// device is missing); there is no fallback to the CPU.
func openDevice(ctx context.Context, backend string, ordinal int) (gpu.Device, error) {
	switch backend {
	case "cpu":
		return gpu.NewCPU(), nil
	case "gpu":
		if ordinal < 0 {
			return nil, usagef("--gpu-device must not be negative, got %d", ordinal)
		}
		octx, cancel := context.WithTimeout(ctx, openDeviceTimeout)
		defer cancel()
		dev, err := cuda.Open(octx, ordinal)
		if err != nil {
			hint := ""
			if errors.Is(err, gpu.ErrNoDriver) {
				hint = " (no usable NVIDIA driver or device on this machine; --backend cpu trains on the CPU)"
			}
			return nil, fmt.Errorf("--backend gpu: cannot open CUDA device %d: %w%s", ordinal, err, hint)
		}
		return dev, nil
	}
	return nil, usagef("unknown device backend %q", backend)
}
