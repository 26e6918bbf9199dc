// Package nemesis is jepsen-lite's fault injector: a schedule of faults
// derived from a seed (Plan), and an Injector that applies it to a running
// cluster, heals every fault it made, records each in the history and
// measures leader failover.
package nemesis
