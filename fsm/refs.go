package fsm

import (
	"fmt"
	"strings"

	"github.com/rollout/rollout/fsm/fsmpb"
	"github.com/rollout/rollout/internal/limits"
)

// hashBytes is the length of a reference's blake3 hash. The limits of the
// data-plane references the ledger records (limits.MaxObjectKeyBytes,
// limits.MaxSummaryBytes, limits.MaxStoreURLBytes, limits.MaxRefLength) are in internal/limits.
const hashBytes = 32

// Ref is a reference to bytes in a run's object store: Length bytes at
// Offset of Object. Blake3 is the 32-byte blake3 hash of those bytes (nil
// for an input reference of a batch run, whose sample id checks it).
type Ref struct {
	Object         string
	Offset, Length uint64
	Blake3         []byte
}

// ref is a Ref as an item holds it: obj is a 1-based index into its run's
// object table (0: no reference), so a run's many items share one copy of
// each object key.
type ref struct {
	obj uint32
	n   uint32
	off uint64
}

// itemExt holds an item's rarely set fields, so that an item of a run with
// a store carries none of them: inline payload and result (runs without a
// store), the last failure's reason, a result summary, a payload hash.
type itemExt struct {
	payload []byte
	result  []byte
	reason  string
	summary []byte
	psum    []byte
}

// ext returns a private copy of the item's rare fields for the caller to
// change, and makes it the item's: an itemExt, once set, is never changed
// in place (copy on write), so snapshots share it (see itemSnap).
func (it *item) ext() *itemExt {
	x := &itemExt{}
	if it.x != nil {
		*x = *it.x
	}
	it.x = x
	return x
}

func (it *item) payload() []byte {
	if it.x == nil {
		return nil
	}
	return it.x.payload
}

func (it *item) result() []byte {
	if it.x == nil {
		return nil
	}
	return it.x.result
}

func (it *item) reason() string {
	if it.x == nil {
		return ""
	}
	return it.x.reason
}

func (it *item) summary() []byte {
	if it.x == nil {
		return nil
	}
	return it.x.summary
}

func (it *item) setReason(s string) {
	if s == "" && it.x == nil {
		return
	}
	it.ext().reason = s
}

// intern returns the 1-based index of key in r's object table, adding it.
func (r *run) intern(key string) uint32 {
	if i, ok := r.objIdx[key]; ok {
		return i
	}
	if r.objIdx == nil {
		r.objIdx = make(map[string]uint32)
	}
	r.objects = append(r.objects, key)
	r.objBytes += uint64(len(key)) + 48 // the key, its table and map entries
	i := uint32(len(r.objects))
	r.objIdx[key] = i
	return i
}

// object returns the key of a 1-based object index.
func (r *run) object(i uint32) string { return r.objects[i-1] }

// refOut converts an item's reference; nil when it has none.
func (r *run) refOut(x ref, sum []byte) *Ref {
	if x.obj == 0 {
		return nil
	}
	out := &Ref{Object: r.object(x.obj), Offset: x.off, Length: uint64(x.n)}
	if len(sum) > 0 {
		out.Blake3 = append([]byte(nil), sum...)
	}
	return out
}

// refPB converts an item's reference to its record form; nil when none.
func (r *run) refPB(x ref, sum []byte) *fsmpb.DataRef {
	if x.obj == 0 {
		return nil
	}
	return &fsmpb.DataRef{Object: r.object(x.obj), Offset: x.off, Length: uint64(x.n), Blake3: sum}
}

// checkRef validates a DataRef; needHash requires a 32-byte blake3.
func checkRef(what string, d *fsmpb.DataRef, needHash bool) error {
	key := d.GetObject()
	switch {
	case key == "":
		return invalidErr("%s object is empty", what)
	case len(key) > limits.MaxObjectKeyBytes:
		return invalidErr("%s object is %d bytes, limit %d", what, len(key), limits.MaxObjectKeyBytes)
	case strings.HasPrefix(key, "/") || strings.Contains(key, "\\"):
		return invalidErr("%s object %q is not a relative key", what, key)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return invalidErr("%s object %q has an empty, . or .. segment", what, key)
		}
	}
	if err := checkText(what+" object", key, limits.MaxObjectKeyBytes); err != nil {
		return err
	}
	if d.GetLength() > 1<<32-1 {
		return invalidErr("%s length %d is over %d", what, d.GetLength(), uint64(1<<32-1))
	}
	if d.GetOffset() > limits.MaxRefLength {
		return invalidErr("%s offset %d is over %d", what, d.GetOffset(), uint64(limits.MaxRefLength))
	}
	switch n := len(d.GetBlake3()); {
	case needHash && n != hashBytes:
		return invalidErr("%s blake3 is %d bytes, must be %d", what, n, hashBytes)
	case n != 0 && n != hashBytes:
		return invalidErr("%s blake3 is %d bytes, must be 0 or %d", what, n, hashBytes)
	}
	return nil
}

// submitRef is a new item's payload reference with its object resolved
// (payload_obj names one of the command's objects); nil when it has none.
func submitRef(c *fsmpb.SubmitItemsCmd, ni *fsmpb.NewItem) *fsmpb.DataRef {
	pr := ni.GetPayloadRef()
	k := ni.GetPayloadObj()
	if pr == nil || k == 0 {
		return pr
	}
	return &fsmpb.DataRef{Object: c.GetObjects()[k-1], Offset: pr.GetOffset(), Length: pr.GetLength(), Blake3: pr.GetBlake3()}
}

// refIn interns d into r and returns the item form.
func (r *run) refIn(d *fsmpb.DataRef) ref {
	return ref{obj: r.intern(d.GetObject()), n: uint32(d.GetLength()), off: d.GetOffset()}
}

// RunStore returns the store URL of a run's spec ("" when its data is
// inline).
func hasStore(r *run) bool { return r.spec.GetStore() != "" }

// checkStoreURL is the ledger's own check of a spec's store URL: printable,
// bounded, with a scheme. (The API edge checks it fully with storeurl.)
func checkStoreURL(s string) error {
	if s == "" {
		return nil
	}
	if err := checkText("spec store", s, limits.MaxStoreURLBytes); err != nil {
		return err
	}
	if !strings.Contains(s, "://") {
		return fmt.Errorf("%w: spec store %q is not a URL", ErrInvalidCommand, s)
	}
	return nil
}
