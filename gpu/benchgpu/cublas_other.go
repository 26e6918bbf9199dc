//go:build !((linux || darwin) && (amd64 || arm64))

package main

import "errors"

type cublas struct{}

func openCublas() (*cublas, error) {
	return nil, errors.New("cuBLAS loading is not supported on this platform")
}

func (c *cublas) close() {}

func (c *cublas) sgemmRowMajor(s shape, a, b, out uint64) error { return errors.New("no cuBLAS") }

func (c *cublas) useTF32(on bool) error { return errors.New("no cuBLAS") }
