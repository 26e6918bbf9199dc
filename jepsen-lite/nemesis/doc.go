// Package nemesis is jepsen-lite's fault injector: a schedule of faults
// derived from a seed (Plan), and an Injector that applies it to a running
// cluster, heals every fault it made, records each in the history and
// measures leader failover.
//
// Faults run on four tracks side by side: cluster (partitions, kills,
// pauses), workers, object stores and floods. A flood is measured alone:
// Plan keeps each flood's quiet window (FloodQuietBefore before it to
// FloodQuietAfter after it) free of the other tracks' faults (unless the
// run is too short for them to come up around the windows), and, where
// the steps keep the windows, Injector.Run holds a flood back (at most FloodGateWait) until every
// other fault has healed and FloodSettle has passed, and holds the other
// tracks' next faults back while a flood waits or holds, so that a fault
// that runs late does not overlap a flood either.
package nemesis
