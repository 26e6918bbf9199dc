package network

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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
