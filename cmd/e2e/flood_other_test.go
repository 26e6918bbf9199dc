//go:build !linux

package e2e

// maybeFlooder returns at once: the flood test runs on Linux only (it
// needs IP_BIND_ADDRESS_NO_PORT).
func maybeFlooder() {}
