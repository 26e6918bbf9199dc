// Command jepsen-lite is rollout's partition-injection harness: it runs
// real rollout-coord and rollout-worker processes, injects faults (network
// partitions, kills, pauses) while a workload submits runs and reads them,
// heals, and checks the history for lost, duplicated or unexpected items,
// stale replies accepted by workers, epochs going backwards and
// non-linearizable ledger operations. A run with the range layout
// (--range-runs, default 1) is submitted beside the item runs and checked
// index by index: each index in exactly one final record (range-indexes),
// each Done index's result once in its result object under its line's
// sample id (range-results), one accepted result per index, and each
// index's operations linearizable. With the hostile nemesis
// (--nemesis all,hostile) a hostile client attacks the cluster beside the
// faults, and every one of its operations must be refused and change
// nothing (checker hostile-refused). The chaos runs keep their data in
// object stores (the first run's in a versitygw S3 server the harness
// starts, the others' in file://); the store nemesis (part of "all") kills,
// pauses and slows the server and deletes or flips objects, and the
// store-results checker reads every recorded result back through its store.
// The flood nemesis (part of "all"; --nemesis flood alone) floods the
// leader now and then, for 5-7 s: connections held on its ports, a
// slowloris, then thousands of concurrent calls with a client certificate
// (package flood). In a mixed run each flood has a quiet window that no
// other fault overlaps (package nemesis), so the flood checker measures it
// alone: it fails when items complete during the floods at under 70% of
// the rate when no fault holds, or a replica ran out of files or died, and
// the report gives the flood's figures. The certs nemesis (part of "all")
// renews certificates in place, rotates the CA across every process by the
// documented steps and revokes a worker; the revoked-refused checker fails
// when a write of the revoked worker invoked after its revocation
// committed was accepted.
//
//	jepsen-lite --duration 60s --nemesis partition,kill,pause,worker-kill,hostile --seed N --out DIR
//
// Every edge runs over mutual TLS from a dev CA made for the run (--tls=false
// runs in plaintext); the report says which.
//
// As root each process gets its own network namespace (the harness re-runs
// itself inside a control namespace; every namespace is deleted on exit);
// otherwise it falls back to a user-space proxy per link and says so in the
// report. Exit status: 0 when every check passes, 1 on a violation, 2 when
// the harness itself could not run (or bad flags).
//
// It runs on Linux only (network namespaces, Pdeathsig); elsewhere it says
// so and exits 2.
package main
