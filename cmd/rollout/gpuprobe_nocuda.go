//go:build nocuda

package main

import (
	"context"
	"errors"
)

// errNoCUDA is probeGPU's error in a build without the CUDA loader.
var errNoCUDA = errors.New("this rollout was built with -tags nocuda (the static CLI of the container image): it cannot probe a GPU")

// probeGPU, in a build tagged nocuda, never finds a GPU: the CUDA loader
// (purego, which makes the binary dynamically linked against the C
// library) is left out so that the CLI links statically. Workers are not
// affected: rollout-worker always has the GPU path.
func probeGPU(context.Context) (string, error) { return "", errNoCUDA }
