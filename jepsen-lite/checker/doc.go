// Package checker decides whether a jepsen-lite history shows a violation.
// It checks the history and the final ledger for lost items, unexpected
// items, items with more than one accepted result, items left unfinished,
// replies a worker accepted from a term older than one it had seen, epochs
// that went backwards for a client, linearizability of every item's ledger
// operations (with porcupine), that the runs completed within a bound
// after the last fault healed, and that every operation of the hostile
// nemesis was refused and changed nothing (hostile-refused). Runs with
// the range layout are checked index by index (ranges.go): every index in
// exactly one final record (range-indexes), every Done index's result
// once in its segment's result object under its line's sample id
// (range-results), one accepted result per index (duplicate-results), and
// each index's operations linearizable with a (range seq, attempt)
// fencing token (linearizable).
package checker
