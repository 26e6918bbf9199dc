//go:build !(linux && (amd64 || arm64))

package cudatest

import (
	"testing"

	"github.com/rollout/rollout/gpu"
)

const skipReason = "cudatest: the test CUDA driver is built and loaded on linux/amd64 and linux/arm64 only"

// Build skips the test: the test driver is linux-only.
func Build(tb testing.TB) string { tb.Skip(skipReason); return "" }

// BuildWith skips the test: the test driver is linux-only.
func BuildWith(tb testing.TB, opt Options) string { tb.Skip(skipReason); return "" }

// Open skips the test: the test driver is linux-only.
func Open(tb testing.TB) (gpu.Device, string) { tb.Skip(skipReason); return nil, "" }

// OpenWith skips the test: the test driver is linux-only.
func OpenWith(tb testing.TB, opt Options) (gpu.Device, string) {
	tb.Skip(skipReason)
	return nil, ""
}

// Launches skips the test: the test driver is linux-only.
func Launches(tb testing.TB, lib string) uint64 { tb.Skip(skipReason); return 0 }

// SetDeviceCount skips the test: the test driver is linux-only.
func SetDeviceCount(tb testing.TB, lib string, n int) { tb.Skip(skipReason) }

// LaunchLog skips the test: the test driver is linux-only.
func LaunchLog(tb testing.TB, path string) []string { tb.Skip(skipReason); return nil }
