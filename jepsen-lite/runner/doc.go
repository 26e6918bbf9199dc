// Package runner runs one jepsen-lite test: it builds the network (network
// namespaces, or the proxy fallback), starts real rollout-coord and
// rollout-worker processes, drives the workload while the nemesis injects
// faults, heals, waits a bounded time for the runs to finish, reads the
// final ledger, checks the history and writes the report. By default
// (Config.TLS) every edge runs over mutual TLS from a dev CA made for the
// run, with certificates that name the addresses the replicas advertise.
//
// Scenarios:
//
//   - chaos: the seeded schedule of every selected nemesis, with the
//     workload (chunked submissions, readers, a straggler worker), and
//     Config.RangeRuns runs with the range layout (SubmitRanges over range
//     chunks in a file:// store the object faults leave alone; read back
//     at the end for range-results). The
//     runs keep their data in object stores (runStores): the first run's in
//     a versitygw S3 server started here, the others' in file://; the
//     store nemesis faults them, and at the end every Done item's result is
//     read back through its store (checker.StoreResults). With
//     nemesis.Hostile selected, the hostile client (package hostile)
//     attacks beside the faults on its own seeded schedule; every attack
//     must be refused and change nothing. A coordinator that lets one
//     worker's certificate act as another (build tag
//     rollout_bug_noworkerauth) fails hostile-refused. With nemesis.Flood
//     selected, the flooder (flood.go, over package flood) floods the
//     leader at each flood step: from 127.0.0.9 straight to its listeners
//     over the proxy network, from a second address of the harness's
//     namespace (network.NetNS.FloodIP) with network namespaces; the
//     figures go into the fault's detail and, summed, into the report's
//     notes, and the flood checker also gets the replicas'
//     "too many open files" log lines and unexpected exits.
//   - straggler: a targeted check of the ledger's compare-and-swap: a
//     straggler client and a SIGSTOPped worker both report items late, after
//     the failure timeout gave them to other workers, and a second
//     straggler reports a range of the range run cas-ranges late with the
//     very result object another worker recorded. A ledger without its
//     CAS (build tag rollout_bug_nocas) accepts a second result, for the
//     items and for the range's indexes.
//   - stale-leader: a targeted check of the workers' epoch guard: the leader
//     is paused while a worker's claim long-poll waits on it, isolated from
//     the other replicas while they elect a new leader that the worker
//     learns of, then resumed, so that its late answer (from the old term)
//     reaches the worker. A guard that accepts it (build tag
//     rollout_bug_noguard) is a violation.
package runner
