package connlimit

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// MaxTallySources bounds the distinct source addresses a Tally remembers
// per listener between two Takes; refusals from further addresses are
// counted (in Refusals.Count and the reasons) but cannot be the top source.
const MaxTallySources = 1024

// Tally adds up the connections that listeners refused, per listener, by
// reason and by source address, between two calls of Take: a summary for
// the coordinator's conns-refused events, which must cost one log entry a
// minute however large the flood. Set it as Limits.Tally (one Tally may
// serve several listeners; they are told apart by Limits.Name). Its
// memory is bounded: at most MaxTallySources addresses per listener. It
// is safe for concurrent use.
type Tally struct {
	mu  sync.Mutex
	lis map[string]*tallied
}

type tallied struct {
	count   uint64
	reasons map[string]uint64
	sources map[netip.Addr]uint64
}

// Refusals summarises one listener's refusals since the previous Take.
type Refusals struct {
	// Listener is the listener's Limits.Name.
	Listener string
	// Count is the number of refusals (Reasons' counts add up to it).
	Count uint64
	// Reasons counts the refusals by reason (ReasonPerIP, ...).
	Reasons map[string]uint64
	// TopSource is the source address refused most (ties: the lowest
	// address), and TopCount how often; TopSource is the zero Addr when no
	// refusal had one (accept errors have none).
	TopSource netip.Addr
	TopCount  uint64
}

// NewTally returns an empty Tally.
func NewTally() *Tally { return &Tally{lis: make(map[string]*tallied)} }

// Refused counts a refusal by listener for reason of a connection from
// from (the zero Addr when unknown).
func (t *Tally) Refused(listener, reason string, from netip.Addr) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.lis[listener]
	if e == nil {
		e = &tallied{reasons: make(map[string]uint64), sources: make(map[netip.Addr]uint64)}
		t.lis[listener] = e
	}
	e.count++
	e.reasons[reason]++
	if !from.IsValid() {
		return
	}
	if _, ok := e.sources[from]; ok || len(e.sources) < MaxTallySources {
		e.sources[from]++
	}
}

// Take returns the refusals counted since the previous Take, one Refusals
// per listener that refused anything, ordered by listener name, and starts
// counting afresh.
func (t *Tally) Take() []Refusals {
	t.mu.Lock()
	lis := t.lis
	t.lis = make(map[string]*tallied)
	t.mu.Unlock()
	out := make([]Refusals, 0, len(lis))
	for _, name := range slices.Sorted(maps.Keys(lis)) {
		e := lis[name]
		r := Refusals{Listener: name, Count: e.count, Reasons: e.reasons}
		for a, n := range e.sources {
			if n > r.TopCount || (n == r.TopCount && a.Less(r.TopSource)) {
				r.TopSource, r.TopCount = a, n
			}
		}
		out = append(out, r)
	}
	return out
}

// Detail words r for an event: "listener grpc refused 23900 connections
// (per_ip 23800, first_byte_timeout 100); most from 127.0.0.2 (23900)".
// Reasons are listed by count, largest first.
func (r Refusals) Detail() string {
	type rc struct {
		reason string
		n      uint64
	}
	rs := make([]rc, 0, len(r.Reasons))
	for k, n := range r.Reasons {
		rs = append(rs, rc{k, n})
	}
	slices.SortFunc(rs, func(a, b rc) int {
		return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.reason, b.reason))
	})
	parts := make([]string, len(rs))
	for i, x := range rs {
		parts[i] = fmt.Sprintf("%s %d", x.reason, x.n)
	}
	conns := "connections"
	if r.Count == 1 {
		conns = "connection"
	}
	s := fmt.Sprintf("listener %s refused %d %s (%s)", r.Listener, r.Count, conns, strings.Join(parts, ", "))
	if r.TopSource.IsValid() {
		s += fmt.Sprintf("; most from %s (%d)", r.TopSource, r.TopCount)
	}
	return s
}
