package limits

import (
	"errors"
	"fmt"
)

// ErrInvalidLimits: a Limits value is inconsistent or out of range.
// api/validate re-exports it as validate.ErrInvalidLimits.
var ErrInvalidLimits = errors.New("validate: invalid limits")

// Sizes of the default edge limits (Default).
const (
	// DefaultMaxMessageBytes is the largest gRPC message a replica receives
	// or sends and a client receives or sends (8 MiB).
	DefaultMaxMessageBytes = 8 << 20
	// DefaultMaxRequestBytes is the largest SubmitItems request, as encoded
	// (4 MiB). It leaves room below the message limit, and one request
	// becomes one ledger command of about the same size.
	DefaultMaxRequestBytes = 4 << 20
	// DefaultMaxItemsPerRequest caps the items of one SubmitItems request.
	DefaultMaxItemsPerRequest = 10000
	// DefaultIDBytes is the length of a sample id: 32 bytes of blake3.
	DefaultIDBytes = 32
)

// requestHeadroom is what a request holds besides its largest payload (a
// run spec whose sampling is up to MaxPayloadBytes, names, one item's id,
// index, dead reason and field tags): MaxRequestBytes must leave at least
// this much above 2*MaxPayloadBytes so that one item of the largest payload
// always fits in a request.
const requestHeadroom = 64 << 10

// Limits are the sizes the coordinator accepts from clients at its API edge
// (api/validate.Limits is a type defined on it that adds the request
// checks). Every field is a positive number of bytes (or items).
type Limits struct {
	// MaxMessageBytes is the largest gRPC message, received or sent, on the
	// replica's server and on every client.
	MaxMessageBytes int
	// MaxRequestBytes is the largest SubmitItems request, as encoded
	// (proto.Size). Clients chunk their input to stay under it.
	MaxRequestBytes int
	// MaxItemsPerRequest caps the items of one SubmitItems request.
	MaxItemsPerRequest int
	// MaxPayloadBytes caps one item's payload (and a run spec's sampling);
	// MaxResultBytes caps one result a worker reports.
	MaxPayloadBytes int
	MaxResultBytes  int
	// MaxRunNameBytes caps a run name.
	MaxRunNameBytes int
	// IDBytes is the exact length of an item id.
	IDBytes int
}

// Default returns the limits rollout runs with: 8 MiB messages, 4 MiB and
// 10000 items per SubmitItems request, the ledger's payload and result limit
// (DefaultMaxPayloadBytes, 1 MiB) and run name limit (MaxRunNameBytes),
// 32-byte ids.
func Default() Limits {
	return Limits{
		MaxMessageBytes:    DefaultMaxMessageBytes,
		MaxRequestBytes:    DefaultMaxRequestBytes,
		MaxItemsPerRequest: DefaultMaxItemsPerRequest,
		MaxPayloadBytes:    DefaultMaxPayloadBytes,
		MaxResultBytes:     DefaultMaxPayloadBytes,
		MaxRunNameBytes:    MaxRunNameBytes,
		IDBytes:            DefaultIDBytes,
	}
}

// Validate reports the first inconsistent field (ErrInvalidLimits): every
// field must be positive; names and ids must be within the ledger's own
// bounds; one item of the largest payload (with a spec of the largest
// sampling) must fit in a request; a request, and one item with its largest
// result, must fit in a message.
func (l Limits) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidLimits}, args...)...)
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxMessageBytes", l.MaxMessageBytes}, {"MaxRequestBytes", l.MaxRequestBytes},
		{"MaxItemsPerRequest", l.MaxItemsPerRequest}, {"MaxPayloadBytes", l.MaxPayloadBytes},
		{"MaxResultBytes", l.MaxResultBytes}, {"MaxRunNameBytes", l.MaxRunNameBytes}, {"IDBytes", l.IDBytes},
	} {
		if f.v <= 0 {
			return bad("%s is %d, must be positive", f.name, f.v)
		}
	}
	switch {
	case l.IDBytes > MaxIDBytes:
		return bad("IDBytes is %d, the ledger takes at most %d", l.IDBytes, MaxIDBytes)
	case l.MaxRunNameBytes > MaxRunNameBytes:
		return bad("MaxRunNameBytes is %d, the ledger takes at most %d", l.MaxRunNameBytes, MaxRunNameBytes)
	case l.MaxRequestBytes < 2*l.MaxPayloadBytes+requestHeadroom:
		return bad("MaxRequestBytes (%d) must be at least 2*MaxPayloadBytes+%d (%d) so that one item always fits",
			l.MaxRequestBytes, requestHeadroom, 2*l.MaxPayloadBytes+requestHeadroom)
	case l.MaxMessageBytes < l.MaxRequestBytes+requestHeadroom:
		return bad("MaxMessageBytes (%d) must be at least MaxRequestBytes+%d (%d)",
			l.MaxMessageBytes, requestHeadroom, l.MaxRequestBytes+requestHeadroom)
	case l.MaxMessageBytes < l.MaxPayloadBytes+l.MaxResultBytes+requestHeadroom:
		return bad("MaxMessageBytes (%d) must hold one item's payload and result (%d)",
			l.MaxMessageBytes, l.MaxPayloadBytes+l.MaxResultBytes+requestHeadroom)
	}
	return nil
}
