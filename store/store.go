// Package store is rollout's data plane: one object-store API over
// gocloud.dev/blob, named by a URL (file:///dir, the embedded default;
// s3://bucket?region=...; gs://, azblob://; mem:// in tests). Prompts,
// completions, gradients and weights live here as objects named by content
// (blake3); the ledger holds only references to them (DataRef: object,
// offset, length, hash). The CLI and the workers use this package; the
// coordinator replicas never do.
//
// Contracts:
//   - Every write is durable when it returns: an object is never referenced
//     by the ledger before Put returned nil (file:// objects are fsynced with
//     their directory; S3-compatible stores acknowledge a PUT once durable).
//   - Objects are immutable: a content-addressed key's bytes never change. A
//     reader checks what it reads against the hash the ledger recorded.
//   - Keys are relative, '/'-separated, and never escape the store's root:
//     Open refuses nothing, but every method refuses a key with an empty,
//     "." or ".." segment, a leading '/', a backslash or a control character
//     (ErrInvalidKey).
//   - Transient faults (unreachable, 5xx, throttling, timeouts) are retried
//     with exponential backoff and jitter up to Options.Attempts; what is
//     left is returned wrapping ErrUnavailable. A missing object is
//     ErrNotFound and is not retried.
//   - Credentials come from the environment's standard chain (AWS_*, GCP
//     application default credentials, AZURE_*); a URL that carries one is
//     refused (storeurl.Check).
package store

import (
	"errors"

	"github.com/rollout/rollout/store/storeurl"
)

// The package's errors, matched with errors.Is.
var (
	// ErrInvalidURL: the URL cannot name a store (see storeurl.Check).
	ErrInvalidURL = storeurl.ErrInvalid
	// ErrInvalidKey: a key that is empty, escapes the root or has a
	// forbidden character.
	ErrInvalidKey = errors.New("invalid object key")
	// ErrNotFound: no object has the key.
	ErrNotFound = errors.New("object not found")
	// ErrShortObject: the object is shorter than the range asked for (it
	// changed, or the reference is wrong).
	ErrShortObject = errors.New("object shorter than the range read")
	// ErrHashMismatch: bytes read do not match the hash they were recorded
	// with.
	ErrHashMismatch = errors.New("bytes do not match their recorded hash")
	// ErrTooLarge: an object over Options.MaxObjectBytes.
	ErrTooLarge = errors.New("object too large")
	// ErrUnavailable: the store failed every attempt (unreachable, 5xx,
	// throttled, a full disk).
	ErrUnavailable = errors.New("object store unavailable")
	// ErrRefused is wrapped beside ErrUnavailable when the store answered
	// with a refusal that retrying cannot change (access denied, an
	// invalid argument, a failed precondition): the store is reachable, so
	// a worker fails the item rather than isolating the run (see
	// docs/RECOVERY.md).
	ErrRefused = errors.New("refused by the object store")
)

// RunPrefix is the key prefix of everything a run owns (see
// storeurl.RunPrefix): deleting a run removes that prefix and nothing else
// (an input referenced where it already was is not the run's to delete).
func RunPrefix(run string) string { return storeurl.RunPrefix(run) }

// InputPrefix is where a run's uploaded input chunks live.
func InputPrefix(run string) string { return storeurl.InputPrefix(run) }

// ResultPrefix is where a run's result objects live.
func ResultPrefix(run string) string { return storeurl.ResultPrefix(run) }

// CheckKey reports whether key may name an object (ErrInvalidKey).
func CheckKey(key string) error {
	return checkKey(key)
}

// RunData is the key prefix of a run's own objects (storeurl.RunData).
func RunData(run, dataPrefix string) string { return storeurl.RunData(run, dataPrefix) }

// RunInputs is where a run's input chunks live (storeurl.RunInputs).
func RunInputs(run, dataPrefix string) string { return storeurl.RunInputs(run, dataPrefix) }

// RunResults is where a run's result objects live (storeurl.RunResults).
func RunResults(run, dataPrefix string) string { return storeurl.RunResults(run, dataPrefix) }
