// Package history is the record of what happened in a run, as jepsen-lite's
// checkers read it: every operation of every client and worker (invoke, then
// ok, fail or unknown), every epoch-guard decision of a worker, every fault
// the nemesis injected. It lives with its readers in jepsen-lite;
// rollout-worker writes it (--history) and links this package alone: it
// imports no other part of the harness (internal/deprules holds that).
//
// A history is JSON Lines, one Event per line. Times are CLOCK_MONOTONIC
// nanoseconds, shared by every process on the machine (and every network
// namespace), so the histories written by separate processes merge into one
// timeline. A Writer writes each event with one write(2) on a file opened
// for appending, so a process killed with SIGKILL loses at most the event it
// was writing, and a restarted process appends to the same file.
package history
