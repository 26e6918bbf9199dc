package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/rollout/rollout/store"
)

// Prefix is where a gateway keeps its objects in its store.
const Prefix = "gateway/"

// File purposes.
const (
	PurposeBatch       = "batch"
	PurposeBatchOutput = "batch_output"
)

// fileRecord is a file's metadata object: OpenAI's file object plus the
// owner and what the upload's check learnt.
type fileRecord struct {
	ID        string `json:"id"`
	Owner     string `json:"owner"`
	Bytes     int64  `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	Filename  string `json:"filename"`
	Purpose   string `json:"purpose"`
	// Requests is the number of request lines (input files).
	Requests int `json:"requests,omitempty"`
	// Blake3 is the hex blake3 of the bytes, checked whenever they are
	// read (a store that changed them is an error, never a silent
	// answer).
	Blake3 string `json:"blake3,omitempty"`
}

// fileObject is the file in OpenAI's shape.
func (f *fileRecord) object() map[string]any {
	return map[string]any{
		"id":             f.ID,
		"object":         "file",
		"bytes":          f.Bytes,
		"created_at":     f.CreatedAt,
		"filename":       f.Filename,
		"purpose":        f.Purpose,
		"status":         "processed",
		"status_details": nil,
		"expires_at":     nil,
	}
}

// batchError is one entry of a batch's "errors".
type batchError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int    `json:"line"`
}

// finalFiles is what finalization recorded.
type finalFiles struct {
	Status       string `json:"status"`
	OutputFileID string `json:"output_file_id,omitempty"`
	ErrorFileID  string `json:"error_file_id,omitempty"`
	FinalizingAt int64  `json:"finalizing_at"`
	DoneAt       int64  `json:"done_at"`
	Completed    uint64 `json:"completed"`
	Failed       uint64 `json:"failed"`
}

// batchRecord is a batch's record object.
type batchRecord struct {
	ID               string            `json:"id"`
	Owner            string            `json:"owner"`
	Endpoint         string            `json:"endpoint"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata,omitempty"`
	Model            string            `json:"model,omitempty"`
	// Priority is the run's priority, the key's when the batch was
	// created (0 in a record written before priorities: the default).
	Priority  int   `json:"priority,omitempty"`
	CreatedAt int64 `json:"created_at"`
	ExpiresAt int64 `json:"expires_at"`
	// Status is "validating", "failed" (validation; Errors says why) or
	// "submitted" (the run exists: its state is the ledger's).
	Status       string       `json:"status"`
	Errors       []batchError `json:"errors,omitempty"`
	FailedAt     int64        `json:"failed_at,omitempty"`
	InProgressAt int64        `json:"in_progress_at,omitempty"`
	Total        uint64       `json:"total,omitempty"`
	// CancellingAt is when a client cancelled; ExpiredAt when a gateway
	// found the window passed and cancelled the run for it.
	CancellingAt int64       `json:"cancelling_at,omitempty"`
	ExpiredAt    int64       `json:"expired_at,omitempty"`
	Final        *finalFiles `json:"final,omitempty"`
}

// Record statuses (batchRecord.Status).
const (
	recValidating = "validating"
	recFailed     = "failed"
	recSubmitted  = "submitted"
)

// activePrefix holds one empty object per unfinished batch (Sweep's
// list).
const activePrefix = Prefix + "active/"

func activeKey(id string) string { return activePrefix + id }

func fileContentKey(id string) string { return Prefix + "files/" + id + "/content" }
func fileMetaKey(id string) string    { return Prefix + "files/" + id + "/meta.json" }
func batchKey(id string) string       { return Prefix + "batches/" + id + ".json" }

// ownerPrefix is where the listing index of owner's kind ("files",
// "batches") lives.
func ownerPrefix(owner, kind string) string { return Prefix + "owners/" + owner + "/" + kind + "/" }

// indexKey names id in its owner's listing; the inverted creation time
// makes a lexical listing newest first, the id breaks ties.
func indexKey(owner, kind, id string, createdAt int64) string {
	return fmt.Sprintf("%s%019d-%s", ownerPrefix(owner, kind), math.MaxInt64-createdAt, id)
}

// idOfIndexKey returns the id an index key names.
func idOfIndexKey(key string) string {
	base := key[strings.LastIndexByte(key, '/')+1:]
	_, id, _ := strings.Cut(base, "-")
	return id
}

// newID returns prefix and 24 random hex digits.
func newID(prefix string) (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("gateway: making an id: %w", err)
	}
	return prefix + hex.EncodeToString(b[:]), nil
}

// validID reports whether id looks like one newID or derivedID made with
// prefix: ids go into object keys, so nothing else is looked up.
func validID(id, prefix string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || len(rest) < 8 || len(rest) > 64 {
		return false
	}
	for _, c := range rest {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '_') {
			return false
		}
	}
	return true
}

func putJSON(ctx context.Context, st *store.Store, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return st.Put(ctx, key, b)
}

// getJSON reads key into v; a missing object is store.ErrNotFound.
func getJSON(ctx context.Context, st *store.Store, key string, v any) error {
	b, err := st.ReadAll(ctx, key)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("gateway: %s does not decode: %w", key, err)
	}
	return nil
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
