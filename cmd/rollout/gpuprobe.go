//go:build !nocuda

package main

import (
	"context"
	"fmt"

	"github.com/rollout/rollout/gpu/cuda"
)

// probeGPU opens CUDA device 0 and closes it again, returning its name; the
// error says why no device could be used (no driver, no device).
func probeGPU(ctx context.Context) (string, error) {
	dev, err := cuda.Open(ctx, 0)
	if err != nil {
		return "", err
	}
	name := dev.Name()
	if err := dev.Close(); err != nil {
		return "", fmt.Errorf("closing %s after probing it: %w", name, err)
	}
	return name, nil
}
