package validate

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/internal/jsonscan"
	"github.com/rollout/rollout/internal/limits"
	"github.com/rollout/rollout/store/storeurl"
)

// ItemError is a refusal of one item of a request: Pos is its position in
// the request, Index its input index, ID its id. Err matches the rule's
// sentinel error.
type ItemError struct {
	Pos   int
	Index uint64
	ID    []byte
	Err   error
}

// maxIDHex bounds how much of an id an error shows (in bytes of the id).
const maxIDHex = 32

// Error is e.g. `items[3] (index 17, id 0a1b…): payload is not a JSON object`.
func (e *ItemError) Error() string {
	id := e.ID
	more := ""
	if len(id) > maxIDHex {
		id, more = id[:maxIDHex], "..."
	}
	return fmt.Sprintf("items[%d] (index %d, id %q): %v", e.Pos, e.Index, hex.EncodeToString(id)+more, e.Err)
}

// Unwrap returns the rule's error.
func (e *ItemError) Unwrap() error { return e.Err }

// RunName checks a run name: non-empty, at most MaxRunNameBytes, valid
// UTF-8 of printable characters, no leading or trailing white space
// (ErrRunName).
func (l Limits) RunName(name string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrRunName}, args...)...)
	}
	switch {
	case name == "":
		return bad("run name is empty")
	case len(name) > l.MaxRunNameBytes:
		return bad("run name is %d bytes, exceeds the limit of %d bytes", len(name), l.MaxRunNameBytes)
	case !utf8.ValidString(name):
		return bad("run name is not valid UTF-8")
	case strings.TrimSpace(name) != name:
		return bad("run name %q has leading or trailing white space", name)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return bad("run name has a non-printable character %U", r)
		}
	}
	return nil
}

// Priorities of a run (RunSpec.priority): 1 to MaxPriority; 0 means
// DefaultPriority.
const (
	MaxPriority     = 5
	DefaultPriority = 3
)

// MaxTenantWeight bounds a tenant's weight (SetTenantRequest.weight).
const MaxTenantWeight = 1000

// Tenant checks a tenant name by the rules of a run name (a certificate's
// or a gateway key's name passes them) (ErrTenant).
func (l Limits) Tenant(name string) error {
	if err := l.RunName(name); err != nil {
		msg := strings.TrimPrefix(err.Error(), ErrRunName.Error()+": ")
		return fmt.Errorf("%w: %s", ErrTenant, strings.Replace(msg, "run name", "tenant name", 1))
	}
	return nil
}

// ItemID checks that id is exactly IDBytes long (ErrItemID).
func (l Limits) ItemID(id []byte) error {
	if len(id) != l.IDBytes {
		return fmt.Errorf("%w: id is %d bytes, must be exactly %d", ErrItemID, len(id), l.IDBytes)
	}
	return nil
}

// Payload checks one item's payload: at most MaxPayloadBytes (ErrTooLarge)
// and one JSON object (ErrPayload, see JSONObject). This holds for every
// item, including one created Dead with a dead_reason: the CLI records an
// invalid input line (submit --skip-invalid) as a JSON object that quotes
// the line (batch.InvalidPayload), never the raw line itself, so that every
// payload in the ledger can be rendered in the run's results.
func (l Limits) Payload(p []byte) error {
	if len(p) > l.MaxPayloadBytes {
		return fmt.Errorf("%w: payload is %d bytes, exceeds the per-item limit of %d bytes", ErrTooLarge, len(p), l.MaxPayloadBytes)
	}
	if err := JSONObject(p); err != nil {
		return fmt.Errorf("%w: payload %v", ErrPayload, err)
	}
	return nil
}

// Item checks one item of a SubmitItems request: its id (ItemID), its
// payload (Payload), its dead_reason (at most limits.MaxReasonBytes, and
// already clean: equal to its limits.CleanReason, so that the ledger command is no
// larger than the request) and its depends_on (Deps). pos is its position
// in the request; a refusal is an *ItemError.
func (l Limits) Item(pos int, it *rolloutv1.SubmitItem) error {
	err := l.ItemID(it.GetId())
	if pr := it.GetPayloadRef(); err == nil && pr != nil {
		if len(it.GetPayload()) > 0 {
			err = fmt.Errorf("%w: an item has a payload or a payload_ref, not both", ErrPayload)
		} else {
			err = Ref("payload_ref", pr, false)
		}
	} else if err == nil {
		err = l.Payload(it.GetPayload())
	}
	if err == nil {
		err = l.Deps(it)
	}
	if r := it.GetDeadReason(); err == nil && len(r) > limits.MaxReasonBytes {
		err = fmt.Errorf("%w: dead_reason is %d bytes, exceeds the limit of %d bytes", ErrTooLarge, len(r), limits.MaxReasonBytes)
	} else if err == nil && r != limits.CleanReason(r) {
		err = fmt.Errorf("%w: dead_reason must be one line of printable UTF-8 without leading, trailing or repeated white space (see limits.CleanReason)", ErrDeadReason)
	}
	if err != nil {
		return &ItemError{Pos: pos, Index: it.GetIndex(), ID: it.GetId(), Err: err}
	}
	return nil
}

// Deps checks an item's depends_on on its own (ErrDeps): at most
// limits.MaxDepsPerItem ids, each IDBytes long, none the item's own id, none
// twice. Whether the ids name items of the run is for DepsClosed (within a
// request) and the ledger (the final judge) to say.
func (l Limits) Deps(it *rolloutv1.SubmitItem) error {
	deps := it.GetDependsOn()
	if len(deps) > limits.MaxDepsPerItem {
		return fmt.Errorf("%w: %d dependencies, the limit is %d", ErrDeps, len(deps), limits.MaxDepsPerItem)
	}
	for k, d := range deps {
		switch {
		case len(d) != l.IDBytes:
			return fmt.Errorf("%w: depends_on[%d] is %d bytes, must be exactly %d", ErrDeps, k, len(d), l.IDBytes)
		case bytes.Equal(d, it.GetId()):
			return fmt.Errorf("%w: depends_on[%d] is the item itself", ErrDeps, k)
		}
		for j := range k {
			if bytes.Equal(deps[j], d) {
				return fmt.Errorf("%w: depends_on[%d] repeats depends_on[%d]", ErrDeps, k, j)
			}
		}
	}
	return nil
}

// DepsClosed checks that every dependency of the request's items names an
// item earlier in the request or one for which exists reports true (an
// item the caller submitted before; exists may be nil: none). This is the
// ledger's own rule, which makes the graph acyclic; the ledger checks it
// again against what it holds. A refusal is an *ItemError matching ErrDeps.
func DepsClosed(items []*rolloutv1.SubmitItem, exists func(id []byte) bool) error {
	earlier := make(map[string]bool, len(items))
	for i, it := range items {
		for k, d := range it.GetDependsOn() {
			if earlier[string(d)] || (exists != nil && exists(d)) {
				continue
			}
			return &ItemError{Pos: i, Index: it.GetIndex(), ID: it.GetId(),
				Err: fmt.Errorf("%w: depends_on[%d] (id %x) is neither an earlier item of the request nor a known one", ErrDeps, k, d)}
		}
		earlier[string(it.GetId())] = true
	}
	return nil
}

// Spec checks a run spec (nil is fine): the model is printable UTF-8 of at
// most limits.MaxModelBytes; the kind printable UTF-8 of at most
// limits.MaxKindBytes; the sampling is empty or one JSON object of at most
// MaxPayloadBytes (ErrSpec, ErrTooLarge).
func (l Limits) Spec(sp *rolloutv1.RunSpec) error {
	if k := sp.GetKind(); len(k) > limits.MaxKindBytes {
		return fmt.Errorf("%w: spec kind is %d bytes, exceeds the limit of %d bytes", ErrTooLarge, len(k), limits.MaxKindBytes)
	} else if !utf8.ValidString(k) || strings.IndexFunc(k, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("%w: spec kind must be printable UTF-8", ErrSpec)
	}
	if m := sp.GetModel(); len(m) > limits.MaxModelBytes {
		return fmt.Errorf("%w: spec model is %d bytes, exceeds the limit of %d bytes", ErrTooLarge, len(m), limits.MaxModelBytes)
	} else if !utf8.ValidString(m) || strings.IndexFunc(m, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("%w: spec model must be printable UTF-8", ErrSpec)
	}
	if u := sp.GetStore(); u != "" {
		if err := storeurl.Check(u); err != nil {
			return fmt.Errorf("%w: spec store: %v", ErrSpec, err)
		}
	}
	if ms := sp.GetRetainMs(); ms > math.MaxInt64/uint64(time.Millisecond) {
		return fmt.Errorf("%w: spec retain_ms %d is too large", ErrSpec, ms)
	}
	if p := sp.GetPriority(); p > MaxPriority {
		return fmt.Errorf("%w: spec priority is %d, must be 1 (lowest) to %d (highest), or 0 for the default %d", ErrSpec, p, MaxPriority, DefaultPriority)
	}
	if t := sp.GetTenant(); t != "" {
		if err := l.Tenant(t); err != nil {
			return fmt.Errorf("%w: spec tenant: %v", ErrSpec, err)
		}
	}
	s := sp.GetSampling()
	if len(s) > l.MaxPayloadBytes {
		return fmt.Errorf("%w: spec sampling is %d bytes, exceeds the limit of %d bytes", ErrTooLarge, len(s), l.MaxPayloadBytes)
	}
	if len(s) > 0 {
		if err := JSONObject(s); err != nil {
			return fmt.Errorf("%w: spec sampling %v", ErrSpec, err)
		}
	}
	return nil
}

// CheckRequest checks a whole SubmitItems request, in this order: the run
// name; at least one item (ErrEmptyRequest); at most MaxItemsPerRequest
// items (ErrTooManyItems); at most MaxRequestBytes as encoded (ErrTooLarge);
// stale_after_ms; the spec; every item (Item, its depends_on included) and
// no id twice (ErrDuplicateID). A dependency may name an item of an earlier
// request, so CheckRequest does not require it to be in this one (see
// DepsClosed). It returns the first refusal; nil means the request may be
// proposed as a whole.
func (l Limits) CheckRequest(req *rolloutv1.SubmitItemsRequest) error {
	if err := l.RunName(req.GetRun()); err != nil {
		return err
	}
	items := req.GetItems()
	switch n := len(items); {
	case n == 0:
		return fmt.Errorf("%w: the request has no items", ErrEmptyRequest)
	case n > l.MaxItemsPerRequest:
		return fmt.Errorf("%w: %d items, the limit is %d per request", ErrTooManyItems, n, l.MaxItemsPerRequest)
	}
	if n := proto.Size(req); n > l.MaxRequestBytes {
		return fmt.Errorf("%w: the request is %d bytes, exceeds the per-request limit of %d bytes", ErrTooLarge, n, l.MaxRequestBytes)
	}
	if ms := req.GetStaleAfterMs(); ms > math.MaxInt64/uint64(time.Millisecond) {
		return fmt.Errorf("%w: %d is too large", ErrStaleAfter, ms)
	}
	if err := l.Spec(req.GetSpec()); err != nil {
		return err
	}
	seen := make(map[string]int, len(items))
	for i, it := range items {
		if err := l.Item(i, it); err != nil {
			return err
		}
		if j, dup := seen[string(it.GetId())]; dup {
			return &ItemError{Pos: i, Index: it.GetIndex(), ID: it.GetId(), Err: fmt.Errorf("%w: same id as items[%d]", ErrDuplicateID, j)}
		}
		seen[string(it.GetId())] = i
	}
	return nil
}

// Ref checks a data reference (ErrRef): its object a key under the store's
// root (storeurl.CheckKey), its length at most 4 GiB - 1 and its offset at
// most limits.MaxRefLength, its blake3 32 bytes (required when needHash, else
// absent or 32 bytes). what names the field in the error.
func Ref(what string, d *rolloutv1.DataRef, needHash bool) error {
	if err := storeurl.CheckKey(d.GetObject()); err != nil {
		return fmt.Errorf("%w: %s object: %v", ErrRef, what, err)
	}
	if d.GetLength() > 1<<32-1 || d.GetOffset() > limits.MaxRefLength {
		return fmt.Errorf("%w: %s range %d+%d is out of bounds", ErrRef, what, d.GetOffset(), d.GetLength())
	}
	switch n := len(d.GetBlake3()); {
	case needHash && n != 32:
		return fmt.Errorf("%w: %s blake3 is %d bytes, must be 32", ErrRef, what, n)
	case n != 0 && n != 32:
		return fmt.Errorf("%w: %s blake3 is %d bytes, must be 0 or 32", ErrRef, what, n)
	}
	return nil
}

// JSONObject reports why data is not exactly one JSON object (optionally
// surrounded by JSON white space): it must be valid UTF-8 and valid JSON,
// its top level an object whose keys are distinct, with nothing after it.
// These are the rules the run's results are rendered by (batch's object
// parser), so a payload that passes can always be written out.
func JSONObject(data []byte) error {
	if !utf8.Valid(data) {
		return errors.New("is not valid UTF-8")
	}
	if jsonscan.Valid(data) && distinctTopKeys(data) {
		return nil // the common case, without a decoder (see distinctTopKeys)
	}
	return jsonObjectSlow(data)
}

// jsonObjectSlow is JSONObject with a token decoder: it finds what is wrong
// and says so. It accepts exactly what the fast path in JSONObject accepts.
func jsonObjectSlow(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("is not valid JSON: %s", jsonReason(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New("is not a JSON object")
	}
	seen := make(map[string]struct{})
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("is not valid JSON: %s", jsonReason(err))
		}
		name, ok := tok.(string)
		if !ok {
			return errors.New("is not valid JSON: an object key is not a string")
		}
		if _, dup := seen[name]; dup {
			return fmt.Errorf("has the key %q twice", truncate(name, 64))
		}
		seen[name] = struct{}{}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("is not valid JSON: %s", jsonReason(err))
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return fmt.Errorf("is not valid JSON: %s", jsonReason(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("has data after the JSON object")
	}
	return nil
}

// distinctTopKeys reports whether data, already known to be one valid JSON
// value, is an object whose keys are distinct and free of escapes. It
// answers false, leaving the verdict to jsonObjectSlow, for anything else:
// another kind of value, a key with a backslash (its unescaped form would
// have to be compared), or a repeated key. It allocates nothing for objects
// of up to 16 keys.
func distinctTopKeys(data []byte) bool {
	var small [16][]byte
	keys := small[:0]
	return jsonscan.Members(data, func(ks, ke, _, _ int) bool {
		key := data[ks:ke]
		for _, k := range keys {
			if bytes.Equal(k, key) {
				return false
			}
		}
		keys = append(keys, key)
		return true
	})
}

func jsonReason(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of data"
	}
	return err.Error()
}

// truncate cuts s to at most n bytes on a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
