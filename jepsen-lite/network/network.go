// Package network is jepsen-lite's cluster network: where each replica and
// worker process runs, and the faults cut into the links between them.
//
// Two implementations share one interface. NetNS (as root) gives every
// process its own network namespace, wired with a veth pair to a bridge that
// lives in a "switch" namespace of its own, so the root namespace's network
// is never touched; a cut link is a firewall drop rule (nftables, or
// iptables) in the sending node's namespace, so packets are really lost and
// TCP really retransmits. Proxy (any user) runs every process on loopback
// and routes every connection to a replica through a user-space proxy that
// identifies the connecting process and holds the bytes of a cut direction
// until the link heals; it is the fallback where namespaces cannot be made.
package network

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rollout/rollout/jepsen-lite/cluster"
)

var (
	// ErrInvalidConfig names a bad configuration field.
	ErrInvalidConfig = errors.New("network: invalid config")
	// ErrUnknownNode is returned for a node name the network does not hold.
	ErrUnknownNode = errors.New("network: unknown node")
	// ErrNoFirewall means neither nft nor iptables is installed.
	ErrNoFirewall = errors.New("network: neither nft nor iptables is installed")
	// ErrNotRoot means network namespaces need root.
	ErrNotRoot = errors.New("network: network namespaces need root")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("network: closed")
)

// Mode names an implementation.
type Mode string

// Modes.
const (
	ModeNetNS Mode = "netns"
	ModeProxy Mode = "proxy"
)

// Ctl is the node name of the harness itself (the control node). It is
// never cut off.
const Ctl = "ctl"

// Link is a direction between two nodes: packets (or bytes) From → To.
type Link struct{ From, To string }

// String returns "from->to".
func (l Link) String() string { return l.From + "->" + l.To }

// Network places the cluster's processes and cuts links between them.
type Network interface {
	cluster.Placement
	// Mode says which implementation this is.
	Mode() Mode
	// Cut makes links the set of cut links, replacing the previous set:
	// traffic in each listed direction is lost (NetNS) or held (Proxy)
	// until a later Cut or Heal leaves it out. Every node must be known.
	Cut(ctx context.Context, links []Link) error
	// Heal restores every link.
	Heal(ctx context.Context) error
	// Close heals and releases what the network holds (proxy listeners,
	// firewall tables); it does not delete namespaces (see NetNS.Destroy).
	Close() error
}

// Both returns the links cutting a from b in both directions, for every a in
// as and b in bs.
func Both(as, bs []string) []Link {
	var out []Link
	for _, a := range as {
		for _, b := range bs {
			if a != b {
				out = append(out, Link{a, b}, Link{b, a})
			}
		}
	}
	return out
}

// validName reports whether s is a node name: 1-12 lower-case letters,
// digits or '-'.
func validName(s string) bool {
	if s == "" || len(s) > 12 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// checkNodes validates a node list: valid, distinct names, none of them Ctl.
func checkNodes(what string, nodes []string) error {
	for i, n := range nodes {
		if !validName(n) || n == Ctl {
			return fmt.Errorf("%w: %s[%d] %q is not a node name (1-12 of a-z, 0-9, '-'; not %q)", ErrInvalidConfig, what, i, n, Ctl)
		}
		if slices.Index(nodes, n) != i {
			return fmt.Errorf("%w: %s lists %q twice", ErrInvalidConfig, what, n)
		}
	}
	return nil
}

// describe formats a cut for logs.
func describe(links []Link) string {
	s := make([]string, len(links))
	for i, l := range links {
		s[i] = l.String()
	}
	return strings.Join(s, " ")
}
