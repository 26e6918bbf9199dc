// Package network is jepsen-lite's cluster network: where each replica and
// worker process runs, and the faults cut into the links between them.
//
// Two implementations offer the same methods (Cut, Heal, Close, and the
// cluster.Placement of the processes). NetNS (as root) gives every
// process its own network namespace, wired with a veth pair to a bridge that
// lives in a "switch" namespace of its own, so the root namespace's network
// is never touched; a cut link is a firewall drop rule (nftables, or
// iptables) in the sending node's namespace, so packets are really lost and
// TCP really retransmits. Proxy (any user) runs every process on loopback
// and routes every connection to a replica through a user-space proxy that
// identifies the connecting process and holds the bytes of a cut direction
// until the link heals; it is the fallback where namespaces cannot be made.
package network
