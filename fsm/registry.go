package fsm

import (
	"fmt"
	"reflect"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// A ledger command is one case of the fsmpb.Command oneof. Everything the
// ledger knows of a case is one commandSpec, declared beside the case's
// apply function (claimCommand beside applyClaim, and so on) and listed
// once, in commandSpecs. The dispatch and the event recorder (applyRecorded,
// events.go), the metric label (CommandLabel, read by server/metrics) and
// the snapshot's bookkeeping all read that table; none of them switches on
// the oneof. TestCommandSpecs walks the oneof by reflection and fails,
// naming the field, for a case without a spec.
//
// A new command therefore touches: fsmpb's fsm.proto (its oneof case and
// message, and the generated code), its apply function with its spec beside
// it, and one line of commandSpecs. A command whose state no snapshot
// version carries yet also adds a statePart and raises snapshotVersion.

// commandSpec declares one case of the Command oneof.
type commandSpec struct {
	// oneof is a nil pointer of the generated oneof wrapper type this spec
	// serves, e.g. (*fsmpb.Command_Claim)(nil): the dispatch key.
	oneof any
	// label is the command's name in metrics (rollout_ledger_commands_total
	// {command=...}): the oneof field's name, which TestCommandSpecs checks.
	label string
	// apply validates the command completely and then applies it; an error
	// result means nothing changed. It is the only field every spec sets.
	apply func(l *Ledger, term uint64, c *fsmpb.Command) Result
	// check validates fields that only the events use, before anything
	// else (nil: none).
	check func(c *fsmpb.Command) error
	// before returns b with what events needs to know of the ledger as it
	// was before the command (nil: only the epoch and leader, which every
	// command notes). It takes and returns b by value: a pointer passed
	// through a func value would move b to the heap on every command.
	before func(l *Ledger, c *fsmpb.Command, b eventsBefore) eventsBefore
	// events records the events of a command that applied with res, given
	// the ledger before it (nil: the command records none of its own).
	events func(l *Ledger, c *fsmpb.Command, b eventsBefore, res Result)
	// kinds lists every event kind that applying the command may record,
	// by events or from inside apply (a run resumed, items gone Dead). The
	// tests' harness checks each applied entry against it.
	kinds []EventKind
	// snapshot is the state the command may change, by the snapshot
	// records that carry it.
	snapshot statePart
}

// statePart is a set of the parts of the ledger's state that a snapshot
// carries, one bit per kind of snapshot record (and one for the header).
type statePart uint16

// The parts of the state a snapshot carries. A command that changes state
// none of them carries needs a new part, written by a new snapshot version
// (raise snapshotVersion and give the part that version in partSince).
const (
	// partHeader: the epoch, leader, clock, cluster id, run sequence and
	// the known admins (SnapshotHeader).
	partHeader statePart = 1 << iota
	partMembers
	partRuns
	partItems
	partWorkers
	partEvents
	partRevocations
	partTenants
	partHandles

	// partsAll is every part above.
	partsAll = partHandles<<1 - 1
)

// partSince returns the snapshot version that first carried part p (one
// bit), or 0 for a bit that is not a part.
func partSince(p statePart) uint32 {
	switch p {
	case partHeader, partMembers, partRuns, partItems, partWorkers:
		return 1
	case partEvents:
		return 2
	case partRevocations:
		return 6
	case partTenants:
		return 8
	case partHandles:
		return snapshotVersionHandles
	}
	return 0
}

// since returns the oldest snapshot version that carries every part of s.
func (s statePart) since() uint32 {
	v := uint32(0)
	for p := statePart(1); p != 0 && p <= s; p <<= 1 {
		if s&p != 0 {
			v = max(v, partSince(p))
		}
	}
	return v
}

// commandSpecs lists the spec of every case of the Command oneof, in field
// number order: the one place a command is registered.
func commandSpecs() []commandSpec {
	return []commandSpec{
		epochCommand(),        // 1
		submitCommand(),       // 2
		claimCommand(),        // 3
		completeCommand(),     // 4
		failCommand(),         // 5
		nackCommand(),         // 6
		heartbeatCommand(),    // 7
		deregisterCommand(),   // 8
		stealCommand(),        // 9
		expireCommand(),       // 10
		setMemberCommand(),    // 11
		removeMemberCommand(), // 12
		registerCommand(),     // 13
		cancelRunCommand(),    // 14
		deleteRunCommand(),    // 15
		completeManyCommand(), // 16
		noteCommand(),         // 17
		holdCommand(),         // 18
		revokeCommand(),       // 19
		submitRangesCommand(), // 20
		reportRangeCommand(),  // 21
		setTenantCommand(),    // 22
		handleCommand(),       // 23
	}
}

// commandTable finds a command's spec by the Go type of its oneof wrapper.
type commandTable map[reflect.Type]*commandSpec

// newCommandTable indexes specs; a spec without a oneof or an apply
// function, or two specs for one oneof type, is a programming error and
// panics (at package initialisation, so no binary runs with it).
func newCommandTable(specs []commandSpec) commandTable {
	t := make(commandTable, len(specs))
	for i := range specs {
		s := &specs[i]
		typ := reflect.TypeOf(s.oneof)
		if typ == nil || s.apply == nil || s.label == "" {
			panic(fmt.Sprintf("fsm: command spec %d (%q) lacks its oneof type, label or apply function", i, s.label))
		}
		if _, dup := t[typ]; dup {
			panic(fmt.Sprintf("fsm: two command specs for %v", typ))
		}
		t[typ] = s
	}
	return t
}

// commands is the table of commandSpecs. It is built once, at package
// initialisation, and nothing ever writes to it afterwards: it is a
// constant in all but syntax (Go has no constant maps), shared by every
// Ledger.
var commands = newCommandTable(commandSpecs())

// spec returns the spec of c's oneof case, nil when c has none set or one
// this build does not know.
func (t commandTable) spec(c *fsmpb.Command) *commandSpec {
	if c == nil || c.Cmd == nil {
		return nil
	}
	return t[reflect.TypeOf(c.Cmd)]
}

// CommandLabel returns the name of cmd's command for metrics and logs: the
// name of the Command oneof field set ("claim", "complete_many", ...), or
// "none" when none is set.
func CommandLabel(cmd *fsmpb.Command) string {
	if s := commands.spec(cmd); s != nil {
		return s.label
	}
	return "none"
}

// runBefore notes whether the named run exists and is finished; the
// before function of the commands that may finish a run.
func runBefore(l *Ledger, name string, b eventsBefore) eventsBefore {
	if r := l.st.runs[name]; r != nil {
		b.existed, b.finished = true, r.finished != 0
	}
	return b
}
