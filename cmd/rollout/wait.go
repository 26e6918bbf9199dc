package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rollout/rollout/client/coordclient"
)

// clusterWait is how one invocation waits for its cluster. Every client
// the invocation opens (app.clientConfig) retries an unreachable or
// leaderless cluster within --timeout, as coordclient does, and reports
// each retried attempt here (coordclient.Config.OnRetry). clusterWait
// then
//   - says on stderr, once, what the command waits for, as soon as one call
//     has failed at every address of its client;
//   - ends the call at once when the failure is one that waiting cannot
//     fix (a TLS certificate mismatch: finalTLSCause);
//   - remembers the last failure, so that an operation that ran out of
//     --timeout names the addresses it waited for and why (app.rpcError).
//
// Errors that are not about reaching the cluster (INVALID_ARGUMENT,
// NOT_FOUND, PERMISSION_DENIED, ...) never get here: the client returns
// them at once.
type clusterWait struct {
	stderr  io.Writer
	timeout time.Duration // --timeout, set when the command starts

	mu       sync.Mutex
	addrs    []string // the addresses of every client opened, in order
	said     bool     // the waiting line was printed
	lastAddr string   // the last retried attempt's address and error
	lastErr  error
}

// watch adds addrs to the addresses waited for and returns the OnRetry of a
// client of exactly those addresses.
func (w *clusterWait) watch(addrs []string) func(coordclient.RetryEvent) error {
	w.mu.Lock()
	for _, a := range addrs {
		if !slices.Contains(w.addrs, a) {
			w.addrs = append(w.addrs, a)
		}
	}
	w.mu.Unlock()
	n := len(addrs)
	return func(ev coordclient.RetryEvent) error { return w.retry(ev, n) }
}

// retry handles one failed attempt of a call whose client has n addresses:
// a final failure is returned (the call ends with it); otherwise it is
// remembered, and announced when the call has failed at every address.
func (w *clusterWait) retry(ev coordclient.RetryEvent, n int) error {
	if finalTLSCause(ev.Err) != "" {
		return fmt.Errorf("%s: %w", ev.Addr, ev.Err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastAddr, w.lastErr = ev.Addr, ev.Err
	if ev.Failures >= n && !w.said {
		w.said = true
		fmt.Fprintf(w.stderr, "rollout: waiting for the cluster at %s: %s (up to %v, --timeout)\n",
			strings.Join(w.addrs, ","), waitCause(ev.Err), w.timeout)
	}
	return nil
}

// waited returns the addresses waited for and the last failure, or
// last == "" when no attempt has been retried.
func (w *clusterWait) waited() (addrs, last string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lastErr == nil {
		return "", ""
	}
	return strings.Join(w.addrs, ","), w.lastAddr + ": " + waitCause(w.lastErr)
}

// waitCause is the gist of why an attempt to reach the cluster failed:
// the network error ("connection refused"), a TLS mismatch, or the
// replica's answer ("Unavailable: not leader").
func waitCause(err error) string {
	msg := err.Error()
	for _, s := range []string{"connection refused", "no route to host", "network is unreachable", "connection reset by peer", "i/o timeout"} {
		if strings.Contains(msg, s) && tlsCause(err) == "" {
			return s
		}
	}
	return shortErr(err)
}

// waitError is an operation that ran out of --timeout waiting for the
// cluster; it wraps the call's error (context.DeadlineExceeded).
type waitError struct {
	msg string
	err error
}

func (e *waitError) Error() string { return e.msg }
func (e *waitError) Unwrap() error { return e.err }

// deadlineError words an operation (what) that did not finish within
// timeout: when attempts were retried, it names the addresses waited for
// and the last failure; otherwise it says the cluster gave no answer.
func (a *app) deadlineError(what string, timeout time.Duration, err error) error {
	if addrs, last := a.wait.waited(); last != "" {
		return &waitError{msg: fmt.Sprintf("%s: the cluster at %s did not answer within %v (--timeout); last: %s", what, addrs, timeout, last), err: err}
	}
	return fmt.Errorf("%s: no answer from the cluster within %v (--timeout): %w", what, timeout, err)
}
