//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "jepsen-lite runs on Linux only (it needs network namespaces and Pdeathsig)")
	os.Exit(2)
}
