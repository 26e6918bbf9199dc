package checker

import (
	"fmt"
	"slices"

	"github.com/anishathalye/porcupine"

	"github.com/rollout/rollout/jepsen-lite/history"
)

// The per-item ledger model checked for linearizability. An item is absent,
// then Pending(attempt), Running(owner, attempt), Done(owner, attempt,
// result) or Dead(owner, attempt). Operations observe it or move it:
//
//   - submit creates it Pending(0) (a no-op when it exists);
//   - a claim, steal or owned-items reply observes Running(w, a);
//   - a report by (w, a) moves Running(w, a) to Done, Pending or Dead, and
//     must answer CAS_MISS when the item is anything else (APPLIED again for
//     a retry of the completion that won, CONFLICT for a Done item with
//     another result, NOT_FOUND for an absent one);
//   - a read observes the whole record.
//
// Some transitions are never seen by a client: the failure scan and
// deregistration re-pend items, and a claim or steal whose reply was lost
// hands an item on. The model allows them between any two operations:
// Running(w, a) may become Pending(b) for b >= a, or Running(v, b) for
// b > a; Pending(a) may become Running(v, b) for b > a. Done and Dead are
// only reached through reports. Attempts never decrease.

// kinds of model operations.
const (
	kSubmit  = 's'
	kObserve = 'o'
	kReport  = 'r'
	kRead    = 'q'
)

// item states.
const (
	sPending = 'P'
	sRunning = 'R'
	sDone    = 'D'
	sDead    = 'X'
)

type mstate struct {
	Exists  bool
	St      byte
	Owner   string
	Attempt uint64
	Result  string
}

type minput struct {
	Kind    byte
	Worker  string
	Attempt uint64
	Outcome string
	Result  string
	// Range: the operation is on an index of a range run; Attempt is a
	// fencing token (ranges.go), and a read of a Done or Dead index
	// compares its attempt part only.
	Range bool
}

type moutput struct {
	Unknown bool
	Status  string
	St      byte
	Owner   string
	Attempt uint64
	Result  string
}

func pending(a uint64) mstate { return mstate{Exists: true, St: sPending, Attempt: a} }
func running(w string, a uint64) mstate {
	return mstate{Exists: true, St: sRunning, Owner: w, Attempt: a}
}

// canRun reports whether s can become Running(w, a) through unseen
// transitions (or already is).
func canRun(s mstate, w string, a uint64) bool {
	switch {
	case !s.Exists:
		return false
	case s.St == sPending:
		return a > s.Attempt
	case s.St == sRunning:
		return a > s.Attempt || a == s.Attempt && s.Owner == w
	}
	return false
}

// canPend reports whether s can become Pending(a) through unseen
// transitions.
func canPend(s mstate, a uint64) bool {
	return s.Exists && (s.St == sPending || s.St == sRunning) && a >= s.Attempt
}

// applied returns the states after the report in applying.
func applied(s mstate, in minput) []mstate {
	switch in.Outcome {
	case "DONE":
		if s.St == sDone && s.Owner == in.Worker && s.Attempt == in.Attempt && s.Result == in.Result {
			return []mstate{s} // the winner's retry
		}
		if canRun(s, in.Worker, in.Attempt) {
			return []mstate{{Exists: true, St: sDone, Owner: in.Worker, Attempt: in.Attempt, Result: in.Result}}
		}
	case "FAILED":
		if canRun(s, in.Worker, in.Attempt) {
			return []mstate{pending(in.Attempt), {Exists: true, St: sDead, Owner: in.Worker, Attempt: in.Attempt}}
		}
	case "NACK", "HELD":
		// A held report (the input object is missing) re-pends the item
		// without a failure, as a nack does.
		if canRun(s, in.Worker, in.Attempt) {
			return []mstate{pending(in.Attempt)}
		}
	}
	return nil
}

func step(s mstate, in minput, out moutput) []mstate {
	switch in.Kind {
	case kSubmit:
		c := s
		if !s.Exists {
			c = pending(0)
		}
		if out.Unknown {
			return uniq(s, c)
		}
		return []mstate{c}
	case kObserve:
		if canRun(s, in.Worker, in.Attempt) {
			return []mstate{running(in.Worker, in.Attempt)}
		}
		return nil
	case kRead:
		switch out.St {
		case sPending:
			if canPend(s, out.Attempt) {
				return []mstate{pending(out.Attempt)}
			}
		case sRunning:
			if canRun(s, out.Owner, out.Attempt) {
				return []mstate{running(out.Owner, out.Attempt)}
			}
		case sDone, sDead:
			if s.Exists && s.St == out.St && s.Owner == out.Owner && sameAttempt(s.Attempt, out.Attempt, in.Range) && (out.St == sDead || s.Result == out.Result) {
				return []mstate{s}
			}
		}
		return nil
	case kReport:
		if out.Unknown {
			return uniq(append([]mstate{s}, applied(s, in)...)...)
		}
		switch out.Status {
		case "APPLIED":
			return applied(s, in)
		case "CAS_MISS":
			var next []mstate
			switch {
			case !s.Exists:
				return nil // NOT_FOUND
			case s.St == sRunning && s.Owner == in.Worker && s.Attempt == in.Attempt:
				next = []mstate{pending(s.Attempt)} // an unseen re-pend came first
			case s.St == sDone && in.Outcome == "DONE":
				if s.Result != in.Result || s.Owner == in.Worker && s.Attempt == in.Attempt {
					return nil // CONFLICT, or the winner's retry (APPLIED)
				}
				next = []mstate{s}
			default:
				next = []mstate{s}
			}
			if in.Outcome != "DONE" {
				// A failure or nack applied by an earlier attempt of the
				// same call reads as a CAS miss on the retry.
				next = append(next, applied(s, in)...)
			}
			return uniq(next...)
		case "CONFLICT":
			if s.Exists && s.St == sDone && in.Outcome == "DONE" && s.Result != in.Result {
				return []mstate{s}
			}
			return nil
		case "NOT_FOUND":
			if !s.Exists {
				return []mstate{s}
			}
			return nil
		default: // INVALID: refused, nothing changed
			return []mstate{s}
		}
	}
	return nil
}

// sameAttempt reports whether a finished index's attempt a is the one
// read, b: for an index of a range run, whose Done segment or failed index
// is a record of its own, their attempt parts (ranges.go).
func sameAttempt(a, b uint64, ranged bool) bool {
	if ranged {
		return attemptOf(a) == attemptOf(b)
	}
	return a == b
}

func uniq(ss ...mstate) []mstate {
	var out []mstate
	for _, s := range ss {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func describeState(s mstate) string {
	if !s.Exists {
		return "absent"
	}
	switch s.St {
	case sPending:
		return fmt.Sprintf("Pending(a=%s)", describeToken(s.Attempt))
	case sRunning:
		return fmt.Sprintf("Running(%s, a=%s)", s.Owner, describeToken(s.Attempt))
	case sDone:
		return fmt.Sprintf("Done(%s, a=%s, %s)", s.Owner, describeToken(s.Attempt), s.Result)
	case sDead:
		return fmt.Sprintf("Dead(%s, a=%s)", s.Owner, describeToken(s.Attempt))
	}
	return "?"
}

func describeOp(in minput, out moutput) string {
	res := "?"
	if !out.Unknown {
		res = out.Status
	}
	switch in.Kind {
	case kSubmit:
		if out.Unknown {
			return "submit -> ?"
		}
		return "submit -> ok"
	case kObserve:
		return fmt.Sprintf("owned(%s, a=%s)", in.Worker, describeToken(in.Attempt))
	case kReport:
		return fmt.Sprintf("report(%s, a=%s, %s %s) -> %s", in.Worker, describeToken(in.Attempt), in.Outcome, in.Result, res)
	case kRead:
		return "read -> " + describeState(mstate{Exists: true, St: out.St, Owner: out.Owner, Attempt: out.Attempt, Result: out.Result})
	}
	return "?"
}

// model is the per-item ledger model for porcupine.
func model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{mstate{}} },
		Step: func(state, input, output any) []any {
			next := step(state.(mstate), input.(minput), output.(moutput))
			out := make([]any, len(next))
			for i, s := range next {
				out[i] = s
			}
			return out
		},
		DescribeOperation: func(input, output any) string { return describeOp(input.(minput), output.(moutput)) },
		DescribeState:     func(state any) string { return describeState(state.(mstate)) },
	}
	return nm.ToModel()
}

// stateByte maps a history state name to the model's.
func stateByte(s string) byte {
	switch s {
	case "PENDING":
		return sPending
	case "RUNNING":
		return sRunning
	case "DONE":
		return sDone
	case "DEAD":
		return sDead
	}
	return 0
}

// itemOps turns the paired operations into porcupine operations per item,
// and per index of a range run (rangeIndexOps; keyed by indexKey).
// Definite failures changed nothing and are left out; operations with an
// unknown outcome are open-ended.
func itemOps(ops []*Op) (map[history.Key][]porcupine.Operation, map[history.Key]uint64) {
	clients := map[string]int{}
	client := func(p string) int {
		id, ok := clients[p]
		if !ok {
			id = len(clients)
			clients[p] = id
		}
		return id
	}
	by := map[history.Key][]porcupine.Operation{}
	index := map[history.Key]uint64{}
	addKey := func(op *Op, k history.Key, in minput, out moutput, ret int64) {
		by[k] = append(by[k], porcupine.Operation{ClientId: client(op.Process), Input: in, Output: out, Call: op.Invoke, Return: ret,
			Metadata: op.Process})
	}
	add := func(op *Op, it history.Item, in minput, out moutput, ret int64) {
		k := it.Key()
		if _, ok := index[k]; !ok || it.Index != 0 {
			index[k] = it.Index
		}
		addKey(op, k, in, out, ret)
	}
	rangeIndexOps(ops, addKey)
	for _, op := range ops {
		if op.Type == history.TypeFail {
			continue
		}
		unknown := op.Type != history.TypeOK
		switch op.Name {
		case "SubmitItems":
			for _, it := range op.In {
				add(op, it, minput{Kind: kSubmit}, moutput{Unknown: unknown}, op.Return)
			}
		case "Claim", "Steal", "OwnedItems":
			if unknown {
				continue
			}
			for _, it := range op.Out {
				if it.IsRange() {
					continue // rangeIndexOps
				}
				add(op, it, minput{Kind: kObserve, Worker: op.Worker, Attempt: it.Attempt}, moutput{}, op.Return)
			}
		case "Report":
			status := map[string]string{}
			for _, it := range op.Out {
				status[it.ID] = it.Status
			}
			for _, it := range op.In {
				in := minput{Kind: kReport, Worker: op.Worker, Attempt: it.Attempt, Outcome: it.Outcome, Result: it.Result}
				st, ok := status[it.ID]
				if unknown || !ok || st == "" {
					add(op, it, in, moutput{Unknown: true}, Open)
					continue
				}
				add(op, it, in, moutput{Status: st}, op.Return)
			}
		case "Results":
			if unknown {
				continue
			}
			for _, it := range op.Out {
				if it.IsRange() {
					continue // rangeIndexOps
				}
				add(op, it, minput{Kind: kRead}, moutput{St: stateByte(it.State), Owner: it.Owner, Attempt: it.Attempt, Result: it.Result}, op.Return)
			}
		}
	}
	return by, index
}
