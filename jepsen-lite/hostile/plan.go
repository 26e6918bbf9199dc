package hostile

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

var (
	// ErrInvalidConfig names a bad Config field.
	ErrInvalidConfig = errors.New("hostile: invalid config")
	// ErrNoLeader means no replica served as leader within an attack's
	// window.
	ErrNoLeader = errors.New("hostile: no leader")
	// ErrNoVictim means no item held or completed by a worker was found to
	// forge reports for.
	ErrNoVictim = errors.New("hostile: no item owned by a worker")
)

// Attack names one kind of hostile operation.
type Attack string

// The attacks.
const (
	// ForgeReportOwner: worker B's certificate reports Done for an item
	// worker A owns, naming worker_id A.
	ForgeReportOwner Attack = "forge-report-owner"
	// ForgeReportCAS: worker B's certificate, as B, reports Done for A's
	// item and attempt: the ledger's compare-and-swap must miss.
	ForgeReportCAS Attack = "forge-report-cas"
	// ForgeReportClient: the client certificate reports Done as worker A.
	ForgeReportClient Attack = "forge-report-client"
	// ForeignDeregister: worker B's certificate deregisters worker A.
	ForeignDeregister Attack = "foreign-deregister"
	// JoinWorker and JoinClient: Join naming dead loopback addresses with
	// a worker's and with the client certificate.
	JoinWorker Attack = "join-worker"
	JoinClient Attack = "join-client"
	// RemoveWorker and RemoveClient: RemoveMember of a real replica with a
	// worker's and with the client certificate.
	RemoveWorker Attack = "remove-member-worker"
	RemoveClient Attack = "remove-member-client"
	// PlaintextGRPC: a forged report over plaintext to a TLS gRPC port.
	PlaintextGRPC Attack = "plaintext-grpc"
	// PlaintextRaft and WorkerRaft: an AppendEntries request over plain
	// TCP, and over TLS with a worker's certificate, to a Raft port.
	PlaintextRaft Attack = "plaintext-raft"
	WorkerRaft    Attack = "worker-cert-raft"
	// OversizeItems, OversizePayload, OversizeRequest and OversizeMessage:
	// SubmitItems over the announced limits (items per request, payload
	// bytes, request bytes, gRPC message bytes) into a workload run.
	OversizeItems   Attack = "oversize-items"
	OversizePayload Attack = "oversize-payload"
	OversizeRequest Attack = "oversize-request"
	OversizeMessage Attack = "oversize-message"
	// ShortID and NonJSON: one hostile item (a 3-byte id; a payload that
	// is not JSON) submitted into a workload run. EmptySubmit: a
	// SubmitItems with no items.
	ShortID     Attack = "short-id"
	NonJSON     Attack = "non-json-payload"
	EmptySubmit Attack = "empty-submit"
	// UnregisteredClaim and UnregisteredHeartbeat: a worker certificate
	// that never registered claims and heartbeats as itself.
	UnregisteredClaim     Attack = "unregistered-claim"
	UnregisteredHeartbeat Attack = "unregistered-heartbeat"

	// Range attacks (SubmitRanges, ReportRange). RangeSubmitMalformed: a
	// SubmitRanges into a new hostile run that the edge must refuse; each
	// time the next of: overlapping chunks, a chunk of count 0, index+count
	// past 2^64, a count over a chunk's lines, a spec without a store.
	// RangeSubmitWorker: a well-formed SubmitRanges with a worker's
	// certificate.
	RangeSubmitMalformed Attack = "range-submit-malformed"
	RangeSubmitWorker    Attack = "range-submit-worker"
	// RangeReportOwner, RangeReportClient and RangeReportCAS: progress over
	// all of worker A's range (or item) reported by worker B's certificate
	// naming A, by the client certificate naming A, and by B as itself.
	RangeReportOwner  Attack = "range-report-owner"
	RangeReportClient Attack = "range-report-client"
	RangeReportCAS    Attack = "range-report-cas"
	// RangeReportMalformed: a worker's ReportRange as itself that the edge
	// must refuse; each time the next of: done_to below lo, a failed index
	// outside [lo, done_to), one failed index twice, release_from at lo,
	// done indexes without a result_ref. RangeReportManyFailed: one that
	// names a million failed indexes. RangeReportGoneRun: a well-formed one
	// for a run that does not exist.
	RangeReportMalformed  Attack = "range-report-malformed"
	RangeReportManyFailed Attack = "range-report-million-failed"
	RangeReportGoneRun    Attack = "range-report-gone-run"

	// ImpostorCoordinator: a gRPC server presenting a certificate of the
	// cluster's CA that is not a replica's (Config.Impostor) serves the
	// Coordinator API, and the harness's client, a worker and the admin are
	// pointed at it: each must refuse it at the handshake, no call reaching
	// it.
	ImpostorCoordinator Attack = "impostor-coordinator"
)

// RangeAttacks returns the range attacks.
func RangeAttacks() []Attack {
	return []Attack{
		RangeSubmitMalformed, RangeSubmitWorker, RangeReportOwner, RangeReportClient, RangeReportCAS,
		RangeReportMalformed, RangeReportManyFailed, RangeReportGoneRun,
	}
}

// AllAttacks returns every attack.
func AllAttacks() []Attack {
	return []Attack{
		ForgeReportOwner, ForgeReportCAS, ForgeReportClient, ForeignDeregister,
		JoinWorker, JoinClient, RemoveWorker, RemoveClient,
		PlaintextGRPC, PlaintextRaft, WorkerRaft,
		OversizeItems, OversizePayload, OversizeRequest, OversizeMessage, ShortID, NonJSON, EmptySubmit,
		UnregisteredClaim, UnregisteredHeartbeat,
		RangeSubmitMalformed, RangeSubmitWorker, RangeReportOwner, RangeReportClient, RangeReportCAS,
		RangeReportMalformed, RangeReportManyFailed, RangeReportGoneRun,
		ImpostorCoordinator,
	}
}

// Outcomes besides gRPC code names and report statuses.
const (
	// Refused: the connection was closed or failed without an answer while
	// the replica served (raw Raft-port attacks).
	Refused = "refused"
	// Answered: the Raft port answered a raft request.
	Answered = "answered"
	// Inconclusive: the cluster gave no conclusive answer within the
	// attack's window (no leader, the target down or paused).
	Inconclusive = "inconclusive"
)

// Expect returns the outcomes that refuse attack a, comma-separated (as
// recorded in history.Event.Expect).
func Expect(a Attack) string {
	switch a {
	case ForgeReportCAS:
		// As itself the forger passes authorization; the ledger must not
		// apply a report for an attempt it was never given (an
		// unregistered forger is refused earlier).
		return "CAS_MISS,CONFLICT,NOT_FOUND,FailedPrecondition"
	case PlaintextGRPC:
		// The TLS handshake fails: the transport is unavailable while the
		// replica serves TLS clients.
		return "Unavailable,PermissionDenied"
	case PlaintextRaft, WorkerRaft, ImpostorCoordinator:
		return Refused
	case OversizeItems, OversizePayload, OversizeRequest, ShortID, NonJSON, EmptySubmit:
		return "InvalidArgument"
	case OversizeMessage:
		// gRPC itself refuses a message over its limit.
		return "InvalidArgument,ResourceExhausted"
	case UnregisteredClaim, UnregisteredHeartbeat:
		return "FailedPrecondition"
	case RangeSubmitMalformed, RangeReportMalformed:
		return "InvalidArgument"
	case RangeReportManyFailed:
		// A million failed indexes is refused by the edge, or by gRPC when
		// over the message limit.
		return "InvalidArgument,ResourceExhausted"
	case RangeReportCAS:
		// As itself the forger passes authorization; the ledger must miss
		// (a range) or refuse a range report for an item (INVALID).
		return "CAS_MISS,INVALID,NOT_FOUND"
	case RangeReportGoneRun:
		return "NOT_FOUND"
	}
	return "PermissionDenied"
}

// Expected reports whether got is one of the outcomes in expect.
func Expected(expect, got string) bool {
	return slices.Contains(strings.Split(expect, ","), got)
}

// Step is one attack of a schedule, At after its start.
type Step struct {
	Attack Attack        `json:"attack"`
	At     time.Duration `json:"at"`
}

// Slot bounds: the time between two attacks.
const (
	minSlot = 600 * time.Millisecond
	maxSlot = 3 * time.Second
)

// Plan returns a seeded schedule of attacks from warmup until a second
// before duration: it cycles through seeded shuffles of every attack, so
// each comes up before any repeats (every attack when the span allows
// AllAttacks at the shortest slot), at jittered times.
func Plan(seed int64, duration, warmup time.Duration) []Step {
	attacks := AllAttacks()
	span := duration - warmup - time.Second
	if span <= 0 {
		return nil
	}
	slot := min(max(span/time.Duration(len(attacks)), minSlot), maxSlot)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x686f7374696c65))
	var out []Step
	var cycle []Attack
	for at := warmup; at < warmup+span; at += slot {
		if len(cycle) == 0 {
			cycle = slices.Clone(attacks)
			rng.Shuffle(len(cycle), func(i, j int) { cycle[i], cycle[j] = cycle[j], cycle[i] })
		}
		jitter := time.Duration(rng.Int64N(int64(slot / 2)))
		out = append(out, Step{Attack: cycle[0], At: (at + jitter).Round(time.Millisecond)})
		cycle = cycle[1:]
	}
	return out
}
