// Package validate is the one validation of what a client asks the
// coordinator to put in the ledger: the limits (sizes, counts, id length)
// and the checks of run names, item ids, payloads and whole SubmitItems
// requests. The coordinator's API edge (server) and the CLI (cmd/rollout,
// batch) call the same functions, so that input the CLI accepts is input the
// coordinator accepts, and hostile input sent straight over gRPC is refused
// before it reaches the ledger.
//
// The contract of every check: it returns nil or an error that matches one
// of this package's sentinel errors (errors.Is) and says what was wrong;
// for an item, the error is an *ItemError naming the item's position, its
// index and its id in hex. A refused request must change nothing: callers
// run CheckRequest before proposing anything, and a refusal maps to gRPC
// INVALID_ARGUMENT (never UNAVAILABLE, which clients retry).
//
// The limits are stated once, in DefaultLimits; the coordinator announces
// the ones it runs with (ClusterResponse.limits) and the CLI checks its
// input against them before it creates anything.
package validate

import (
	"errors"
	"fmt"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/limits"
)

// Errors of this package; every refusal matches exactly one of them.
var (
	// ErrInvalidLimits: a Limits value is inconsistent or out of range
	// (it is limits.ErrInvalidLimits).
	ErrInvalidLimits = limits.ErrInvalidLimits
	// ErrRunName: a run name is empty, too long, not printable UTF-8, or
	// has leading or trailing white space.
	ErrRunName = errors.New("invalid run name")
	// ErrEmptyRequest: a SubmitItems request has no items.
	ErrEmptyRequest = errors.New("no items to submit")
	// ErrTooManyItems: a SubmitItems request has more items than
	// Limits.MaxItemsPerRequest.
	ErrTooManyItems = errors.New("too many items in one request")
	// ErrTooLarge: a request, a payload or a result exceeds its size limit.
	ErrTooLarge = errors.New("too large")
	// ErrItemID: an item id is not exactly Limits.IDBytes long.
	ErrItemID = errors.New("invalid item id")
	// ErrDuplicateID: a request names the same item id twice.
	ErrDuplicateID = errors.New("duplicate item id")
	// ErrPayload: a payload is not one JSON object.
	ErrPayload = errors.New("invalid payload")
	// ErrSpec: a run spec's model, sampling, priority or tenant is invalid.
	ErrSpec = errors.New("invalid run spec")
	// ErrTenant: a tenant name breaks the rules of a run name.
	ErrTenant = errors.New("invalid tenant name")
	// ErrDeadReason: a dead_reason is not clean text (see limits.CleanReason).
	ErrDeadReason = errors.New("invalid dead_reason")
	// ErrStaleAfter: stale_after_ms is too large to be a duration.
	ErrStaleAfter = errors.New("invalid stale_after_ms")
	// ErrDeps: an item's depends_on is too long, names an id of the wrong
	// length, the item itself or one id twice, or (DepsClosed) an item that
	// is neither earlier in the request nor known to exist.
	ErrDeps = errors.New("invalid depends_on")
	// ErrRef: a data reference (payload_ref, result_ref) names no valid
	// object key, an out-of-range span or a hash of the wrong length.
	ErrRef = errors.New("invalid data reference")
	// ErrRange: an InputRange of a SubmitRanges request has no indexes,
	// no or an invalid payload_ref, an end past the largest index, or
	// overlaps another range of the request.
	ErrRange = errors.New("invalid range")
	// ErrRangeReport: a RangeReport names no run or id, has done_to below
	// lo, a failed index outside [lo, done_to) or twice, or an invalid or
	// missing result_ref.
	ErrRangeReport = errors.New("invalid range report")
)

// Sizes of the default limits (see limits.Default).
const (
	// DefaultMaxMessageBytes is the largest gRPC message a replica receives
	// or sends and a client receives or sends (8 MiB).
	DefaultMaxMessageBytes = limits.DefaultMaxMessageBytes
	// DefaultMaxRequestBytes is the largest SubmitItems request, as encoded
	// (4 MiB).
	DefaultMaxRequestBytes = limits.DefaultMaxRequestBytes
	// DefaultMaxItemsPerRequest caps the items of one SubmitItems request.
	DefaultMaxItemsPerRequest = limits.DefaultMaxItemsPerRequest
	// DefaultIDBytes is the length of a sample id: 32 bytes of blake3.
	DefaultIDBytes = limits.DefaultIDBytes
)

// Limits are the sizes the coordinator accepts from clients. The fields
// and their consistency rules are defined once, in internal/limits
// (limits.Limits, which packages that only size their input against the
// limits, such as batch/train, use without this package or the gRPC
// contract); Limits adds the checks of this package as methods. Convert
// with limits.Limits(l) and Limits(ll).
type Limits limits.Limits

// DefaultLimits returns the limits rollout runs with (limits.Default): 8 MiB
// messages, 4 MiB and 10000 items per SubmitItems request, the ledger's
// payload and result limit (fsm.DefaultConfig().MaxPayloadBytes,
// limits.DefaultMaxPayloadBytes, 1 MiB) and run name limit
// (limits.MaxRunNameBytes), 32-byte ids.
func DefaultLimits() Limits { return Limits(limits.Default()) }

// Validate reports the first inconsistent field (ErrInvalidLimits): every
// field must be positive; names and ids must be within the ledger's own
// bounds; one item of the largest payload (with a spec of the largest
// sampling) must fit in a request; a request, and one item with its largest
// result, must fit in a message (see limits.Limits.Validate).
func (l Limits) Validate() error { return limits.Limits(l).Validate() }

// Proto returns l as announced in ClusterResponse.limits.
func (l Limits) Proto() *rolloutv1.Limits {
	return &rolloutv1.Limits{
		MaxMessageBytes:    uint64(l.MaxMessageBytes),
		MaxRequestBytes:    uint64(l.MaxRequestBytes),
		MaxItemsPerRequest: uint64(l.MaxItemsPerRequest),
		MaxPayloadBytes:    uint64(l.MaxPayloadBytes),
		MaxResultBytes:     uint64(l.MaxResultBytes),
		MaxRunNameBytes:    uint64(l.MaxRunNameBytes),
		IdBytes:            uint64(l.IDBytes),
	}
}

// maxLimitValue bounds every announced field (1 GiB): larger values are
// nonsense for this protocol and would overflow int arithmetic on 32-bit
// platforms.
const maxLimitValue = 1 << 30

// FromProto decodes announced limits. A nil message (a coordinator that
// announces none) gives DefaultLimits. A field that is zero or larger than
// 1 GiB, or a set of fields that fails Validate, is an error matching
// ErrInvalidLimits.
func FromProto(p *rolloutv1.Limits) (Limits, error) {
	if p == nil {
		return DefaultLimits(), nil
	}
	var l Limits
	for _, f := range []struct {
		name string
		v    uint64
		dst  *int
	}{
		{"max_message_bytes", p.GetMaxMessageBytes(), &l.MaxMessageBytes},
		{"max_request_bytes", p.GetMaxRequestBytes(), &l.MaxRequestBytes},
		{"max_items_per_request", p.GetMaxItemsPerRequest(), &l.MaxItemsPerRequest},
		{"max_payload_bytes", p.GetMaxPayloadBytes(), &l.MaxPayloadBytes},
		{"max_result_bytes", p.GetMaxResultBytes(), &l.MaxResultBytes},
		{"max_run_name_bytes", p.GetMaxRunNameBytes(), &l.MaxRunNameBytes},
		{"id_bytes", p.GetIdBytes(), &l.IDBytes},
	} {
		if f.v == 0 || f.v > maxLimitValue {
			return Limits{}, fmt.Errorf("%w: announced %s is %d, must be in [1, %d]", ErrInvalidLimits, f.name, f.v, maxLimitValue)
		}
		*f.dst = int(f.v)
	}
	if err := l.Validate(); err != nil {
		return Limits{}, err
	}
	return l, nil
}
