package checker

import (
	"math"
	"slices"

	"github.com/rollout/rollout/jepsen-lite/history"
)

// Open is the return time of an operation whose outcome is unknown: it may
// take effect at any time after its invocation (as etcd's robustness tests
// treat failed requests).
const Open = int64(math.MaxInt64)

// Op is an operation of a history: an invocation and its completion.
type Op struct {
	Process, Name, Worker string
	Call                  uint64
	// Invoke and Return are history times; Return is Open when the outcome
	// is unknown or the process died during the call.
	Invoke, Return int64
	// Type is TypeOK, TypeFail or TypeUnknown (no completion counts as
	// unknown).
	Type history.Type
	// Completed is false when the history has no completion.
	Completed bool
	Term      uint64
	// In are the items of the invocation, Out those of the completion.
	In, Out []history.Item
	Err     string
}

// Pair pairs every invocation of events with its completion (same Process
// and Call). The result is in invocation order.
func Pair(events []history.Event) []*Op {
	type key struct {
		p string
		c uint64
	}
	open := map[key]*Op{}
	var ops []*Op
	for _, ev := range events {
		switch ev.Type {
		case history.TypeInvoke:
			op := &Op{Process: ev.Process, Name: ev.Op, Worker: ev.Worker, Call: ev.Call, Invoke: ev.Time, Return: Open,
				Type: history.TypeUnknown, In: ev.Items}
			open[key{ev.Process, ev.Call}] = op
			ops = append(ops, op)
		case history.TypeOK, history.TypeFail, history.TypeUnknown:
			k := key{ev.Process, ev.Call}
			op := open[k]
			if op == nil {
				continue
			}
			delete(open, k)
			op.Completed, op.Type, op.Term, op.Out, op.Err = true, ev.Type, ev.Term, ev.Items, ev.Err
			if ev.Type != history.TypeUnknown {
				op.Return = ev.Time
			}
		}
	}
	return ops
}

// OpCounts counts one operation's outcomes.
type OpCounts struct {
	Op      string `json:"op"`
	Invoked int    `json:"invoked"`
	OK      int    `json:"ok"`
	Fail    int    `json:"fail"`
	Unknown int    `json:"unknown"`
	// Open counts invocations without a completion (the process died).
	Open int `json:"open"`
}

// Count counts ops by name, sorted by name.
func Count(ops []*Op) []OpCounts {
	by := map[string]*OpCounts{}
	for _, op := range ops {
		c := by[op.Name]
		if c == nil {
			c = &OpCounts{Op: op.Name}
			by[op.Name] = c
		}
		c.Invoked++
		switch {
		case !op.Completed:
			c.Open++
		case op.Type == history.TypeOK:
			c.OK++
		case op.Type == history.TypeFail:
			c.Fail++
		default:
			c.Unknown++
		}
	}
	out := make([]OpCounts, 0, len(by))
	for _, c := range by {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b OpCounts) int {
		switch {
		case a.Op < b.Op:
			return -1
		case a.Op > b.Op:
			return 1
		}
		return 0
	})
	return out
}
