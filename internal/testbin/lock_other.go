//go:build !unix

package testbin

import "context"

// lockDir is a no-op where flock is missing: builds there are not
// serialized (the end-to-end tests run on Linux and macOS).
func lockDir(context.Context, string) (func(), error) { return func() {}, nil }
