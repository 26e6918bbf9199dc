// Package workload is jepsen-lite's clients: a submitter that adds runs in
// chunks (item runs with SubmitItems; range runs, ranges.go, as range
// chunks in their store with SubmitRanges), readers that read status and
// results throughout, and a straggler that claims items or a range as a
// worker, goes silent past the failure timeout and then reports them late
// (its reports must be refused: the items moved on).
// Every operation is recorded in a history: invoke, then ok, fail or
// unknown, with the term the reply carried.
//
// Each client is sequential (one operation at a time, from one goroutine)
// and has its own coordinator client and epoch guard, so the terms of its
// replies must never decrease.
package workload
