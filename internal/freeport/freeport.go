// Package freeport finds TCP ports that are free for a process that must be
// told its port before it binds it (a replica's Raft and gRPC addresses, a
// store server's listener). It is a leaf: it imports the standard library only.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
)

// Ports returns n distinct TCP ports that were free on 127.0.0.1 a moment
// ago, for processes that must be told their port before they bind it. They
// are drawn at random from below the kernel's ephemeral range (on Linux
// /proc/sys/net/ipv4/ip_local_port_range, elsewhere from 32768), where
// outgoing connections never take a local port, so a port cannot be stolen
// by some connect() between this check and the process's bind. Each is
// checked by binding it.
func Ports(n int) ([]int, error) { return PortsOn("127.0.0.1", n) }

// PortsOn is Ports for the addresses of host (an IP address of this
// machine or of its network namespace).
func PortsOn(host string, n int) ([]int, error) {
	low := ephemeralLow()
	const floor = 10000
	if low-floor < 4*n {
		return ephemeralPorts(host, n)
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	seen := make(map[int]bool)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("freeport: no %d free ports below %d on %s", n, low, host)
		}
		p := floor + rand.IntN(low-floor)
		if seen[p] {
			continue
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, p)
	}
	return ports, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 when
// it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil || low <= 0 {
		return 32768
	}
	return low
}

// ephemeralPorts asks the kernel for n ports (the fallback when the space
// below the ephemeral range is too small).
func ephemeralPorts(host string, n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
