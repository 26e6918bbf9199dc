package fsm

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cockroachdb/datadriven"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/fsm/fsmpb"
)

// TestScripts runs the transition scripts in testdata/scripts, written in
// the datadriven format. Each command is applied in its own entry, stamped
// one millisecond after the previous one; its expected output is its result
// followed by a dump of the whole ledger. For a refused command the output
// is the error and "state unchanged" with the ledger's clock, and the runner
// checks on the snapshot stream, byte for byte, that the ledger is what the
// same entry without commands would have made of it (the clock moved, unless
// the entry is stale). Invariants are checked after every command.
// `go test ./fsm -run Scripts -rewrite` rewrites the expectations; review
// the diff before committing it.
//
// Commands (arguments are key=value; lists are key=(a,b)):
//
//	reset                                   an empty ledger
//	base                                    the ledger of base(): run r (max_failures 2, total 3)
//	                                        with a, b Running(w1, 1) and c Pending; w1..w3 registered
//	tick d=1m                               advance the clock that stamps the next entry
//	roundtrip                               persist, restore into a fresh ledger (checked to
//	                                        render and persist identically) and go on with it
//	epoch leader=c1 addr=g1 [term=N]        a new leader, at term N (default: the current
//	                                        term) for this and every later entry
//	submit run=r [model= total= max-failures= kind= store=url tenant= priority=N retry-dead stale=5s]
//	                                        items as input lines: id index [payload] [dead=reason]
//	                                        [deps=a,b] (depends_on; deps= alone is an empty id)
//	                                        [ref=object@offset+length] (a payload reference)
//	claim worker=w max=N
//	complete run=r id=a worker=w attempt=N [result=x | ref=object]
//	                                        (ref: a result reference, 4 bytes at 0, blake3 0x01...)
//	fail run=r id=a worker=w attempt=N [reason=x]
//	nack run=r id=a worker=w attempt=N
//	hold run=r id=a worker=w attempt=N object=k [reason=x]
//	cancel run=r
//	heartbeat worker=w [backlog=N rate=F executing=(r/id/attempt,...) held=(...)]
//	register worker=(w1,w2)                 one command per worker, in one entry
//	deregister worker=w [reason=x] | evict worker=w [reason=x]
//	                                        (reason=(a text, with commas) keeps spaces)
//	steal thief=w [backlog=N]
//	expire timeout=5s
//	set-member id=c raft=a grpc=g | remove-member id=c
//	events [after=N limit=N run=r]          the event history (Ledger.Events); applies nothing
//	set-tenant name=t [weight=N max-queued=N max-running=N]
//	tenants                                 the tenants, their usage and each run's served
//	                                        count (dumpTenants); applies nothing
//
//	batch                                   the commands of its input lines (one a line,
//	                                        no submit) in one entry; one result line each
//
// Every applying command also takes term=N (the entry's Raft term, this
// entry only) and stamp=N (the entry's epoch stamp; default the term).
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/scripts", func(t *testing.T, path string) {
		s := &script{h: newHarness(t)}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			s.t = t
			s.h.t = t
			return s.do(d)
		})
	})
}

type script struct {
	t *testing.T
	h *harness
}

func (s *script) do(d *datadriven.TestData) string {
	h := s.h
	switch d.Cmd {
	case "reset":
		s.h = newHarness(s.t)
		return dumpLedger(s.h.l)
	case "base":
		s.h = base(s.t)
		return dumpLedger(s.h.l)
	case "tick":
		h.now = h.now.Add(s.dur(d, "d", 0))
		return fmt.Sprintf("clock=%s\n", since(h.now.UnixNano()))
	case "events":
		return s.events(d) // events_test.go
	case "tenants":
		return dumpTenants(h.l)
	case "roundtrip":
		// Persist, restore into a fresh ledger, and go on with that one:
		// it must render and persist identically (Restore recomputes what
		// the stream does not hold, e.g. dependency counts).
		b := persist(s.t, h.l)
		l, err := New(h.l.cfg)
		require.NoError(s.t, err)
		require.NoError(s.t, restore(l, b))
		checkInvariants(s.t, l)
		require.Equal(s.t, dumpLedger(h.l), dumpLedger(l), "restored ledger renders differently")
		require.Equal(s.t, b, persist(s.t, l), "restored ledger persists differently")
		h.l = l
		return "restored\n" + dumpLedger(l)
	}
	cmds := s.commands(d)
	term := h.term
	if d.Cmd == "epoch" {
		term = s.u64(d, "term", h.term)
		h.term = term
	} else {
		term = s.u64(d, "term", term)
	}
	stamp := s.u64(d, "stamp", term)

	h.now = h.now.Add(time.Millisecond)
	before := persist(s.t, h.l)
	_, _, seq := h.l.Events(0, 1, "")
	out := h.applyData(term, h.entry(stamp, cmds...))
	res, ok := out.(Results)
	require.True(s.t, ok, "apply returned %T: %v", out, out)
	require.Len(s.t, res, len(cmds))
	checkInvariants(s.t, h.l)
	requireDeclaredKinds(s.t, h.l, seq, cmds) // registry_test.go

	var b strings.Builder
	changed := false
	for _, r := range res {
		if r.Err != nil {
			errKind(s.t, r.Err) // wraps exactly one sentinel
			fmt.Fprintf(&b, "error: %v\n", r.Err)
			continue
		}
		changed = true
		b.WriteString(resultLine(r))
	}
	// What the same entry with no commands makes of the ledger (the clock
	// moved, unless the entry is stale; the tenants' usage decayed).
	idle, err := New(h.l.cfg)
	require.NoError(s.t, err)
	require.NoError(s.t, restore(idle, before))
	idle.Apply(&raft.Log{Index: h.index, Term: term, Type: raft.LogCommand, Data: h.entry(stamp)})
	after := persist(s.t, h.l)
	// The commands changed only what their specs declare (registry.go).
	requireDeclaredEffect(s.t, cmds, persist(s.t, idle), after)
	if !changed {
		// Refused commands change nothing: the ledger is what the same
		// entry with no commands would make of it.
		require.Equal(s.t, persist(s.t, idle), after, "a refused command changed the ledger")
		fmt.Fprintf(&b, "state unchanged, now=%s\n", since(h.l.st.now))
		return b.String()
	}
	b.WriteString(dumpLedger(h.l))
	return b.String()
}

// commands builds the fsmpb commands a script line names.
func (s *script) commands(d *datadriven.TestData) []*fsmpb.Command {
	str := func(k string) string { return s.str(d, k, "") }
	switch d.Cmd {
	case "batch":
		var out []*fsmpb.Command
		for i, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			cmd, args, err := datadriven.ParseLine(line)
			require.NoError(s.t, err, "%s: batch line %d", d.Pos, i+1)
			require.NotContains(s.t, []string{"batch", "submit", "epoch", "reset", "base", "tick"}, cmd,
				"%s: batch line %d: %s cannot be batched", d.Pos, i+1, cmd)
			sub := &datadriven.TestData{Pos: fmt.Sprintf("%s line %d", d.Pos, i+1), Cmd: cmd, CmdArgs: args}
			out = append(out, s.commands(sub)...)
		}
		return out
	case "epoch":
		return []*fsmpb.Command{cEpoch(str("leader"), str("addr"))}
	case "submit":
		var spec *fsmpb.RunSpec
		if d.HasArg("model") || d.HasArg("total") || d.HasArg("max-failures") || d.HasArg("kind") || d.HasArg("store") ||
			d.HasArg("tenant") || d.HasArg("priority") {
			spec = &fsmpb.RunSpec{Model: str("model"), Total: s.u64(d, "total", 0), MaxFailures: uint32(s.u64(d, "max-failures", 0)), Kind: str("kind"),
				Store: str("store"), Tenant: str("tenant"), Priority: uint32(s.u64(d, "priority", 0))}
		}
		c := cSubmit(str("run"), spec, d.HasArg("retry-dead"), s.items(d)...)
		c.GetSubmit().RependStaleNano = int64(s.dur(d, "stale", 0))
		return []*fsmpb.Command{c}
	case "claim":
		return []*fsmpb.Command{cClaim(str("worker"), uint32(s.u64(d, "max", 1)))}
	case "complete":
		if d.HasArg("ref") {
			return []*fsmpb.Command{cCompleteRef(str("run"), str("id"), str("worker"), s.u64(d, "attempt", 0), str("ref"), 0, 4, sum(1), "")}
		}
		return []*fsmpb.Command{cComplete(str("run"), str("id"), str("worker"), s.u64(d, "attempt", 0), str("result"))}
	case "hold":
		return []*fsmpb.Command{cHold(str("run"), str("id"), str("worker"), s.u64(d, "attempt", 0), str("object"), str("reason"))}
	case "cancel":
		return []*fsmpb.Command{cCancel(str("run"))}
	case "fail":
		return []*fsmpb.Command{cFail(str("run"), str("id"), str("worker"), s.u64(d, "attempt", 0), str("reason"))}
	case "nack":
		return []*fsmpb.Command{cNack(str("run"), str("id"), str("worker"), s.u64(d, "attempt", 0))}
	case "heartbeat":
		rate, err := strconv.ParseFloat(s.str(d, "rate", "0"), 64)
		require.NoError(s.t, err, d.Pos)
		return []*fsmpb.Command{cHeartbeat(str("worker"), uint32(s.u64(d, "backlog", 0)), rate, s.keys(d, "executing"), s.keys(d, "held"))}
	case "register":
		arg, ok := d.Arg("worker")
		require.True(s.t, ok, "%s: register needs worker=", d.Pos)
		return cRegisterAll(arg.Vals...)
	case "deregister":
		c := cDeregister(str("worker"))
		c.GetDeregister().Reason = s.text(d, "reason")
		return []*fsmpb.Command{c}
	case "evict":
		c := cEvict(str("worker"))
		c.GetDeregister().Reason = s.text(d, "reason")
		return []*fsmpb.Command{c}
	case "steal":
		return []*fsmpb.Command{cSteal(str("thief"), uint32(s.u64(d, "backlog", 0)))}
	case "expire":
		return []*fsmpb.Command{cExpire(s.dur(d, "timeout", 0))}
	case "set-member":
		return []*fsmpb.Command{cSetMember(str("id"), str("raft"), str("grpc"))}
	case "remove-member":
		return []*fsmpb.Command{cRemoveMember(str("id"))}
	case "set-tenant":
		opt := func(k string) int64 {
			if !d.HasArg(k) {
				return -1
			}
			return int64(s.u64(d, k, 0))
		}
		return []*fsmpb.Command{cSetTenant(str("name"), int(opt("weight")), opt("max-queued"), opt("max-running"))}
	}
	s.t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return nil
}

func (s *script) str(d *datadriven.TestData, key, def string) string {
	arg, ok := d.Arg(key)
	if !ok {
		return def
	}
	if len(arg.Vals) == 0 {
		return ""
	}
	return arg.Vals[0]
}

func (s *script) u64(d *datadriven.TestData, key string, def uint64) uint64 {
	v := s.str(d, key, "")
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	require.NoError(s.t, err, "%s: %s", d.Pos, key)
	return n
}

func (s *script) dur(d *datadriven.TestData, key string, def time.Duration) time.Duration {
	v := s.str(d, key, "")
	if v == "" {
		return def
	}
	n, err := time.ParseDuration(v)
	require.NoError(s.t, err, "%s: %s", d.Pos, key)
	return n
}

// keys parses key=(run/id/attempt,...).
func (s *script) keys(d *datadriven.TestData, name string) []*fsmpb.ItemKey {
	arg, ok := d.Arg(name)
	if !ok {
		return nil
	}
	var out []*fsmpb.ItemKey
	for _, v := range arg.Vals {
		parts := strings.Split(v, "/")
		require.Len(s.t, parts, 3, "%s: %s: want run/id/attempt, got %q", d.Pos, name, v)
		n, err := strconv.ParseUint(parts[2], 10, 64)
		require.NoError(s.t, err, "%s: %s", d.Pos, name)
		out = append(out, key(parts[0], parts[1], n))
	}
	return out
}

// items parses submit input lines: id index [payload] [dead=reason].
func (s *script) items(d *datadriven.TestData) []*fsmpb.NewItem {
	var out []*fsmpb.NewItem
	for _, line := range strings.Split(d.Input, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		require.GreaterOrEqual(s.t, len(f), 2, "%s: item line %q: want id index [payload] [dead=reason] [deps=a,b]", d.Pos, line)
		idx, err := strconv.ParseUint(f[1], 10, 64)
		require.NoError(s.t, err, "%s: item line %q", d.Pos, line)
		it := ni(f[0], idx, "")
		for _, x := range f[2:] {
			if r, ok := strings.CutPrefix(x, "dead="); ok {
				it.DeadReason = r
				continue
			}
			if r, ok := strings.CutPrefix(x, "ref="); ok {
				obj, span, ok := strings.Cut(r, "@")
				off, n, ok2 := strings.Cut(span, "+")
				require.True(s.t, ok && ok2, "%s: item line %q: ref=object@offset+length", d.Pos, line)
				o, err := strconv.ParseUint(off, 10, 64)
				require.NoError(s.t, err, d.Pos)
				l, err := strconv.ParseUint(n, 10, 64)
				require.NoError(s.t, err, d.Pos)
				it.PayloadRef = &fsmpb.DataRef{Object: obj, Offset: o, Length: l}
				continue
			}
			if r, ok := strings.CutPrefix(x, "deps="); ok {
				for _, dep := range strings.Split(r, ",") {
					it.DependsOn = append(it.DependsOn, []byte(dep))
				}
				continue
			}
			it.Payload = []byte(x)
		}
		out = append(out, it)
	}
	return out
}

// resultLine renders the non-zero fields of a successful result.
func resultLine(r Result) string {
	var f []string
	if len(r.Items) > 0 {
		var ks []string
		for _, it := range r.Items {
			ks = append(ks, fmt.Sprintf("%s/%s@%d", it.Run, text(it.ID), it.Attempt))
		}
		f = append(f, "items=["+strings.Join(ks, " ")+"]")
	}
	if r.Victim != "" {
		f = append(f, "victim="+r.Victim)
	}
	if c := submitCounts(r.Submit); c != "" {
		f = append(f, "submit={"+c+"}")
	}
	if len(r.Lost) > 0 {
		var ks []string
		for _, k := range r.Lost {
			ks = append(ks, fmt.Sprintf("%s/%s@%d", k.Run, text(k.ID), k.Attempt))
		}
		f = append(f, "lost=["+strings.Join(ks, " ")+"]")
	}
	if r.Repended != 0 {
		f = append(f, fmt.Sprintf("repended=%d", r.Repended))
	}
	if len(r.Expired) > 0 {
		f = append(f, "expired=["+strings.Join(r.Expired, " ")+"]")
	}
	if len(r.Removed) > 0 {
		f = append(f, "removed=["+strings.Join(r.Removed, " ")+"]")
	}
	if r.Duplicate {
		f = append(f, "duplicate")
	}
	for _, it := range r.Items {
		if len(it.DependsOn) > 0 {
			var ds []string
			for _, d := range it.DependsOn {
				ds = append(ds, text(d))
			}
			f = append(f, fmt.Sprintf("%s.deps=[%s]", text(it.ID), strings.Join(ds, " ")))
		}
	}
	return strings.TrimSpace("ok "+strings.Join(f, " ")) + "\n"
}

func submitCounts(c SubmitCounts) string {
	var f []string
	for _, x := range []struct {
		name string
		n    uint64
	}{
		{"created", c.Created}, {"created-dead", c.CreatedDead}, {"pending", c.AlreadyPending},
		{"running", c.AlreadyRunning}, {"done", c.AlreadyDone}, {"retried", c.Retried},
		{"dead", c.Dead}, {"repended-stale", c.RependedStale},
	} {
		if x.n != 0 {
			f = append(f, fmt.Sprintf("%s=%d", x.name, x.n))
		}
	}
	return strings.Join(f, " ")
}

// text renders bytes as a string when they are printable UTF-8 without
// spaces, and in hex otherwise.
func text(b []byte) string {
	if len(b) > 0 && utf8.Valid(b) && !strings.ContainsFunc(string(b), func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return string(b)
	}
	return fmt.Sprintf("0x%x", b)
}

// since renders a stamped time relative to the harness start; "-" for unset.
func since(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return "+" + time.Duration(ns-startTime().UnixNano()).String()
}

// dumpLedger renders the whole ledger state compactly and deterministically:
// the clock and leader, the pending queue in order, members, runs with their
// items in index order, and workers with the items they own in claim order.
// It reads the internal state, so it shows what the snapshot records.
func dumpLedger(l *Ledger) string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	st := l.st
	var b strings.Builder
	fmt.Fprintf(&b, "now=%s epoch=%d leader=%s\n", since(st.now), st.epoch, orDash(st.leaderID))
	var q []string
	st.pending.each(st.runOrder, func(it *item) {
		q = append(q, it.run.name+"/"+text([]byte(it.id)))
	})
	fmt.Fprintf(&b, "pending=[%s]\n", strings.Join(q, " "))
	ids := make([]string, 0, len(st.members))
	for id := range st.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		m := st.members[id]
		fmt.Fprintf(&b, "member %s raft=%s grpc=%s\n", m.ID, orDash(m.RaftAddr), orDash(m.GRPCAddr))
	}
	for _, r := range st.runOrder {
		fmt.Fprintf(&b, "run %s total=%d max-failures=%d model=%s items=%d p=%d r=%d d=%d x=%d failures=%d finished=%s\n",
			r.name, r.spec.GetTotal(), r.spec.GetMaxFailures(), orDash(r.spec.GetModel()), r.byIndex.len(),
			r.pending, r.running, r.done, r.dead, r.failures, since(r.finished))
		if r.blocked != 0 || r.spec.GetKind() != "" {
			fmt.Fprintf(&b, "  blocked=%d kind=%s\n", r.blocked, orDash(r.spec.GetKind()))
		}
		if s := r.stall; s != nil {
			var parked []string
			for it := r.parked.front(); it != nil; it = r.parked.after(it) {
				parked = append(parked, text([]byte(it.id)))
			}
			fmt.Fprintf(&b, "  stalled object=%s reason=%q since=%s probe-at=%s backoff=%s probe=%s holds=%d parked=[%s]\n",
				s.object, s.reason, since(s.since), since(s.probeAt), time.Duration(s.backoff), orDash(s.probe), s.holds, strings.Join(parked, " "))
		}
		for _, it := range r.byIndex.all() {
			fmt.Fprintf(&b, "  %s#%d %s", text([]byte(it.id)), it.index, it.state)
			if it.owner != "" {
				fmt.Fprintf(&b, " owner=%s", it.owner)
			}
			if it.attempt != 0 {
				fmt.Fprintf(&b, " attempt=%d", it.attempt)
			}
			if it.failures != 0 {
				fmt.Fprintf(&b, " failures=%d", it.failures)
			}
			if it.state == StateRunning {
				fmt.Fprintf(&b, " claimed=%s", since(it.claimed))
			}
			if len(it.payload()) > 0 {
				fmt.Fprintf(&b, " payload=%s", text(it.payload()))
			}
			if len(it.result()) > 0 {
				fmt.Fprintf(&b, " result=%s", text(it.result()))
			}
			if it.reason() != "" {
				fmt.Fprintf(&b, " reason=%q", it.reason())
			}
			if on := it.dependsOn(); len(on) > 0 {
				var ds []string
				for _, d := range on {
					ds = append(ds, text([]byte(d.id)))
				}
				fmt.Fprintf(&b, " deps=[%s]", strings.Join(ds, " "))
				if it.blocked() {
					fmt.Fprintf(&b, " unmet=%d", it.deps.unmet)
				}
			}
			b.WriteString("\n")
		}
	}
	ids = ids[:0]
	for id := range st.workers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		w := st.workers[id]
		fmt.Fprintf(&b, "worker %s hb=%s", w.id, since(w.lastHeartbeat))
		if w.lost {
			b.WriteString(" lost")
		}
		if w.backlog != 0 || w.itemsPerSec != 0 {
			fmt.Fprintf(&b, " backlog=%d rate=%g", w.backlog, w.itemsPerSec)
		}
		if w.completed != 0 {
			fmt.Fprintf(&b, " completed=%d", w.completed)
		}
		if w.models != nil {
			fmt.Fprintf(&b, " models=[%s]", strings.Join(w.models, " "))
		}
		var own []string
		for it := w.owned.front(); it != nil; it = w.owned.after(it) {
			own = append(own, fmt.Sprintf("%s/%s@%d", it.run.name, text([]byte(it.id)), it.attempt))
		}
		if len(own) > 0 {
			fmt.Fprintf(&b, " owns=[%s]", strings.Join(own, " "))
		}
		if len(w.executing) > 0 {
			var ex []string
			for _, k := range w.executing {
				ex = append(ex, fmt.Sprintf("%s/%s@%d", k.run, text([]byte(k.id)), k.attempt))
			}
			fmt.Fprintf(&b, " executing=[%s]", strings.Join(ex, " "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
