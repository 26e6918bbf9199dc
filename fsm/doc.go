/*
Package fsm implements the work ledger: the replicated state machine that a
rollout coordinator runs under hashicorp/raft.

The ledger holds runs (a name, a spec, counters), items (id, run, input
index, payload, state, owner, attempt, result, timestamps), workers (kinds,
models, Lost, the stamped time of their last command) and the coordinator
members. Liveness is leader-local: heartbeats are not commands (the leader
keeps them in memory, package server/liveness); the leader's decisions
from them (a worker lost, a steal's victim and its progress, a resubmit's
stale owners, a cancel's started marks) travel in the commands that act on
them, and applying those checks them against the ledger. Every change is a command in the Raft log; a Ledger is
a raft.FSM that applies them, one log entry per Apply call (it does not
implement raft.BatchingFSM: a replica must be able to stop at the exact
entry whose checksum fails, which raftnode does between Apply calls).

# Usage

The proposer (package raftnode) builds log data with EncodeCommand and
EncodeEntry, stamping the leader's clock and term:

	cmd, err := fsm.EncodeCommand(&fsmpb.Command{Cmd: &fsmpb.Command_Claim{
		Claim: &fsmpb.ClaimCmd{Worker: "gpu-7", Max: 8}}})
	data, err := fsm.EncodeEntry(time.Now(), term, [][]byte{cmd, ...})
	f := r.Apply(data, timeout)
	results := f.Response().(fsm.Results) // one per command, in order

Many callers' commands share one entry (group commit); each caller reads its
own Result (Results has the Len and At methods of raftnode's Results
contract, so raftnode hands each caller its Result, typed, and without
reflection). A Result whose Err is set changed nothing; Err wraps one of the
package's sentinel errors (ErrCASMiss, ErrConflict, ...), matched with
errors.Is. Every entry EncodeEntry builds carries a checksum of its
contents, which Apply verifies before anything else: data that does not
decode as an Entry or fails its checksum makes Apply return an error value
wrapping ErrCorruptEntry instead of Results, and changes nothing (the
replica must then stop; see ErrCorruptEntry). Other log types return nil.

# Item life cycle

	           claim                    complete
	Pending ───────────▶ Running(w,a) ───────────▶ Done            (terminal)
	   ▲                   │   │
	   │ nack / expire /   │   │ fail
	   │ deregister        │   ▼
	   └───────────────────┘ failures+1 ── failures < max ──▶ Pending (back of queue)
	                                   └── failures = max ──▶ Dead (reason kept)
	steal:      Running(v,a) ──▶ Running(t,a+1)
	retry_dead: Dead ──▶ Pending (failures and reason reset)

A Pending item that depends on an item not yet Done is blocked: it is in no
list, so no claim sees it, and it joins the back of the pending queue when
its last dependency becomes Done (see Item dependencies).

Claim and steal increment the attempt; nothing else does. Every command that
moves an item names the Running(worker, attempt) it expects. A mismatch is a
CAS miss (ErrCASMiss): an ordinary outcome, not a failure, and it changes
nothing. A Complete and a Steal that expect the same Running(v,a) are
therefore single-winner: whichever the log orders first wins, and the other
misses (the steal by leaving that item alone, the complete with ErrCASMiss).

Results are never overwritten. Completing a Done item with the identical
result bytes succeeds with Result.Duplicate set (an idempotent retry);
different bytes give ErrConflict and the first result stands. Submitting an
item that exists is a per-item no-op counted in Result.Submit.

# Commands

	Epoch       epoch := log term; records the leader (and it as a member);
	            every live worker's heartbeat := now (a failover grants a full
	            failure timeout to reconnect).
	SetMember   upsert a member; RemoveMember deletes one.
	Submit      validates the whole command, then creates the run on first
	            use and appends new items to the pending queue in command
	            order; ids are 1..64 bytes, unique in the run, each at one
	            index that no other id of the run holds. A new item with a
	            dead_reason is created Dead instead (never re-pended). For
	            existing items (resume): Pending and Done are left alone,
	            Dead is re-pended with retry_dead, Running is re-pended
	            (attempt unchanged) when repend_stale_nano > 0 and its
	            owner's last heartbeat is older than that at the stamped
	            time, else left alone. A new item's depends_on (at most
	            limits.MaxDepsPerItem ids, no duplicates, not itself) must name
	            items of the same run that exist or come earlier in the
	            command; an existing item must be resubmitted with exactly
	            its recorded depends_on (else ErrInvalidCommand naming it).
	            RunSpec.kind is stored with the spec (at most limits.MaxKindBytes).
	Register    registers a worker, or refreshes a registered one (heartbeat
	            := now, Lost cleared, its items stay its), and sets the run
	            kinds it runs (RunSpec.kind; "batch" names the default kind
	            ""; none: every kind; at most 16, replaced by each register)
	            and the models it serves (RunSpec.model; none: every model;
	            at most 256, replaced by each register; models.go).
	Claim       claimable Pending items of the worker's kinds and models, at
	            most max (capped at 1024; max 0 is invalid): the run whose
	            turn it is gives its oldest, until it has none, then the
	            next turn's run (tenants.go: the highest priority, then the
	            tenant of least decayed usage per weight, then its least
	            served run; queue.go holds the ordered indexes). A tenant at
	            max_running is skipped, and a range is cut to its room. A
	            run that names no model is served by every worker. Blocked
	            items are never claimed.
	SetTenant   sets a tenant's weight (1 to 1000) and its max_queued and
	            max_running quotas (tenants.go). A submit past max_queued is
	            ErrQuota; a submit naming another tenant for an existing
	            run, ErrNotOwner; both change nothing.
	Complete    Running(w,a) -> Done; Done+same result -> Duplicate. The
	            item's dependents that no longer wait on anything join the
	            pending queue in ascending index order.
	Fail        Running(w,a) -> Pending, or Dead once failures reach the
	            run's max_failures.
	Nack        Running(w,a) -> Pending at the back; attempt unchanged.
	Hold        Running(w,a) -> Pending without a failure, for a run with
	            a store whose input object the worker found missing or
	            changed; the run stalls on the object: its Pending items
	            wait outside the claim queue but for one probe claim after
	            a backoff of stamped time; the probe's Complete or Fail, a
	            Submit naming the run, or CancelRun ends the stall
	            (stall.go).
	Heartbeat   records backlog, executing, rate; reports held keys the
	            worker no longer owns (Result.Lost). No longer proposed
	            (liveness is leader-local); applies as it did for logs
	            written before.
	Deregister  re-pends the worker's items in claim order; forgets it. An
	            unknown worker is a no-op, unless evicted is set (an
	            operator's eviction): then ErrWorkerNotRegistered. Its
	            reason (printable, at most limits.MaxReasonBytes) goes into the
	            worker's event.
	Steal       see below.
	Expire      with by_leader, each named live worker that sent no
	            command for longer than the timeout (the leader's timers
	            heard nothing from it either) is marked lost and its items
	            re-pended; without it (older logs), every live worker
	            silent for longer than the timeout. Then every Lost worker
	            that holds nothing and has been silent for longer than
	            Config.LostWorkerRetention × the timeout is removed.

Workers register only explicitly. Claim, Heartbeat and Steal from a worker
the ledger does not hold change nothing and fail with
ErrWorkerNotRegistered; from a registered worker they refresh its heartbeat
and clear Lost. Complete, Fail and Nack need no registration: they name the
Running(worker, attempt) they expect, and a worker the ledger does not hold
owns nothing, so its reports are CAS misses (or, for an identical retry of
the completion it won before it was removed, a Duplicate). A Complete, Fail
or Nack that moves an item refreshes its owner's heartbeat. A Running item's
owner is always a registered, live worker.

# Item dependencies

An item may depend on other items of its run (NewItem.depends_on). The
graph is acyclic by construction: a dependency exists already or comes
earlier in the same command, and depends_on never changes. An item is
claimable only when every item it depends on is Done. Until then it is
Pending and blocked: counted in its run's Pending and Blocked
(RunStatus.Blocked), but in no list, so Claim costs O(claimed) whatever the
number of blocked items. Each item counts its dependencies not yet Done and
each dependency lists its dependents; Complete decrements its dependents'
counts and appends those that reach zero to the back of the pending queue in
ascending index order (an order that does not depend on history, so a
replica restored from a snapshot unblocks as one that applied the log).
Claim and Steal results carry each item's DependsOn ids; their results
are read with Dependencies (Done is final, so they cannot change).

Steal, Expire, Nack, Fail and Deregister are unaffected: they move only
Running items, whose dependencies are all Done. A Dead dependency is not
Done: its Pending dependents stay blocked (and the run is not finished,
since they are Pending) until retry_dead re-pends it and it completes; an
item created Dead is never re-pended, so its dependents wait for good. A
run whose Pending items are all blocked and that has nothing Running can
make no progress without retry_dead. No item is lost either way: each ends
Done or Dead, or waits, visible as blocked.

# Work stealing

Only an idle thief (thief_backlog 0, else ErrNotIdle) may steal, and only
items of the kinds it runs and the models it serves. The victim is the one
the leader names (by_leader: chosen by the rule below among the workers it
has heard from in its term, with what the victim is executing by its last
heartbeat to the leader), or for older logs the live worker other than the
thief that owns the most Running items the thief takes (ties: the smallest
id). The candidates are those items not listed as executing, taken from
the most recently claimed end;
at most ceil(owned/2) (owned counting the items the thief takes only) and Config.MaxStealBatch of them
move, each
Running(victim,a) -> Running(thief,a+1). The victim learns at its next
heartbeat (Result.Lost) or when its Complete misses (ErrCASMiss).

# Events

While it applies commands the ledger records events in a bounded history:
a leader elected (an Epoch that changes the term or the leader), members
joined and removed, workers registered (new, or back from Lost),
deregistered (with their reason), evicted, expired (with the items
re-pended) and removed after the retention, items stolen, runs created and
finished, items gone Dead. Every replica records the same events with the
same Seq: events come from commands that applied (never from refused ones
or stale entries), stamped with the entry's time and the ledger's epoch.
Seqs run from 1 without gaps and never restart; the history keeps the
newest Config.EventHistory events and drops the oldest. Items gone Dead
in one entry make one event per run and worker, with a count, so a mass
failure does not flood the history. Text fields are cleaned and bounded
(limits.CleanText, MaxEventDetailBytes). Events reads a page (after a seq, with
a limit and an optional run filter, and the first and last seq held)
under the read lock; EventSignal lets long-polls wait for new events.
The recorder lives in events.go: applyRecorded applies a command and
records its events as the command's spec declares (registry.go: one
commandSpec per case of the Command oneof, declared beside its apply
function), so the apply functions do not know about events.

# Determinism and epochs

Apply reads no clock and has no randomness; map iteration never decides an
outcome. The entry's stamped time raises the ledger's clock (now =
max(now, stamp), so a new leader whose clock is behind cannot move it back);
all timeouts are computed from stamped times. An entry whose Raft term or
non-zero stamped epoch is below the ledger's epoch comes from a deposed
leader: every command gets ErrStaleEpoch and nothing changes, not even the
clock. Every command validates completely before it mutates, and commands of
one entry are independent. Any two ledgers that applied the same log with the
same Config hold byte-identical snapshots.

# Snapshots

Snapshot copies the ledger (items' fixed-size fields; payload and result
bytes are shared, as the ledger only replaces them) and Persist streams
it: the magic "RLDG", a version (2), a SnapshotHeader, length-prefixed
SnapshotRecords (members, runs, items, workers, events), and a blake3-256
checksum of everything before it. Restore also reads version 1 streams
(written before the event history; they restore with no events). Pending
queue order and each worker's claim order are preserved; an item record
keeps its depends_on, and a blocked item has no queue position (pending_seq
0). Restore recomputes the dependency counts, the reverse index and the
blocked counts, and refuses a stream in which a Running or Done item waits
on a dependency, a dependency is unknown, or a Pending item's queue position
contradicts its dependencies. Snapshots written before dependencies existed
restore unchanged. Restore decodes into a fresh state and swaps it in only when the
whole stream checks out; otherwise it returns ErrCorruptSnapshot and the
ledger is unchanged. Persist after Restore reproduces the stream byte for
byte.

# Cost

Claim, steal, complete, fail, nack and expire cost O(commands' items), not
O(items in the ledger): items live in per-run maps, the pending queue and
each worker's claim-ordered list are intrusive linked lists, and each run
keeps its items sorted by index for Results. Expire, Epoch and Steal's victim
choice also scan the workers, whose number is small.

# Concurrency

Raft calls Apply, Snapshot and Restore from one goroutine. The
read methods (Epoch, Run, Owned, Results, PendingSignal, ...) may be called
from any goroutine at any time: a sync.RWMutex guards the state, and every
read returns copies. PendingSignal lets long-polls wait for new work without
polling.
*/
package fsm
