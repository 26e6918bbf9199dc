// Package connlimit bounds the connections a listener holds, so that a
// flood of connections, or of clients that connect and then say nothing,
// cannot take the process's open files (and with them every other
// listener, the Raft log and the snapshots) away from the clients and
// peers it serves.
//
// A Listener wraps a net.Listener. Its contract:
//
//   - Per remote IP: at most Limits.PerIP connections from one IP address
//     are open at once (0: no limit). A connection over it is closed at
//     once, before any byte is read, and counted with reason ReasonPerIP.
//   - Total: at most Limits.Total connections are open at once (0: no
//     limit); over it, reason ReasonTotal. Size it well under the
//     process's open-file limit (FileLimit reads and raises that limit;
//     Share divides it), so that a flood against one listener leaves
//     descriptors for the others.
//   - Exempt addresses (Limits.Exempt, for example the replicas of the
//     Raft configuration) are never refused by the per-IP limit, and are
//     refused by the total only past Total+Reserve: a flood that fills the
//     listener leaves Reserve places for them.
//   - First bytes: with Limits.FirstByteTimeout set, a connection that has
//     not delivered its first bytes within it reads io.EOF (the server
//     then closes it as a client that hung up, without logging an error)
//     and is counted with reason ReasonFirstByteTimeout; under TLS
//     (Limits.TLS) the whole handshake must complete within it. The deadline is cleared once the first bytes
//     arrive (without TLS) or the handshake completes (with TLS); what the
//     connection does afterwards is the server's business. Leave it zero
//     for a listener served by grpc-go, which sets and clears its own
//     deadlines (grpc.ConnectionTimeout).
//   - Accept errors: a temporary Accept error (EMFILE, ENFILE, ENOBUFS,
//     ENOMEM, ECONNABORTED, ...) is counted (ReasonAcceptError), waited out
//     with an exponential backoff from 5 ms to 1 s, as net/http does, and
//     not returned: Accept does not spin while the process is out of files.
//     Other errors (the listener was closed) are returned.
//
// Saturated tells a server that a listener has been unable to take new
// connections for a while (the coordinator's leader then steps aside).
//
// Every refusal and every open and close is reported to Limits.Observer
// with the listener's name, so that it can be counted (the coordinator
// exports rollout_conns_refused_total{listener,reason} and
// rollout_conns_open{listener}), and, with Limits.Tally, added up with its
// source address for a periodic summary (the coordinator's conns-refused
// events). A connection's slot is released by its first Close.
//
// The package keeps no global state; each Listener has its own counters.
package connlimit
