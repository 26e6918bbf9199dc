package store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // azblob://
	"gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/gcsblob" // gs://
	_ "gocloud.dev/blob/memblob" // mem://
	"gocloud.dev/gcerrors"

	"github.com/rollout/rollout/internal/blake3sum"
	"github.com/rollout/rollout/store/storeurl"
)

// Options tune a Store. The zero value is not valid: start from
// DefaultOptions.
type Options struct {
	// Attempts is how many times an operation is tried before it fails
	// with ErrUnavailable (>= 1).
	Attempts int
	// Backoff is the first retry's delay; each retry doubles it, up to
	// MaxBackoff, with full jitter.
	Backoff, MaxBackoff time.Duration
	// OpTimeout bounds one attempt of one operation.
	OpTimeout time.Duration
	// Deadline bounds one operation, all its attempts and backoffs
	// together (0: Attempts × OpTimeout plus the backoffs), so that a
	// stalled store holds a caller for Deadline at most; past it the
	// operation fails with ErrUnavailable.
	Deadline time.Duration
	// MaxObjectBytes bounds an object read whole (ReadAll).
	MaxObjectBytes int64
}

// DefaultOptions: 6 attempts, 100 ms doubling to 5 s, 60 s per attempt and
// 3 min per operation, objects read whole up to 4 GiB.
func DefaultOptions() Options {
	return Options{Attempts: 6, Backoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second,
		OpTimeout: 60 * time.Second, Deadline: 3 * time.Minute, MaxObjectBytes: 4 << 30}
}

// Validate reports the first bad option.
func (o Options) Validate() error {
	switch {
	case o.Attempts < 1:
		return fmt.Errorf("store: Attempts must be >= 1, got %d", o.Attempts)
	case o.Backoff <= 0 || o.MaxBackoff < o.Backoff:
		return fmt.Errorf("store: Backoff %v and MaxBackoff %v must be positive and ordered", o.Backoff, o.MaxBackoff)
	case o.OpTimeout <= 0:
		return fmt.Errorf("store: OpTimeout must be positive, got %v", o.OpTimeout)
	case o.Deadline < 0:
		return fmt.Errorf("store: Deadline must be >= 0, got %v", o.Deadline)
	case o.MaxObjectBytes <= 0:
		return fmt.Errorf("store: MaxObjectBytes must be positive, got %d", o.MaxObjectBytes)
	}
	return nil
}

// Store is an opened object store. It is safe for concurrent use.
type Store struct {
	url    string
	opts   Options
	bucket *blob.Bucket
	// dir is the root directory of a file:// store ("" otherwise): writes
	// there are fsynced, and keys are checked not to leave it.
	dir string
	// write writes a file:// object's bytes (f.Write; tests replace it to
	// fail as a full disk does).
	write func(f *os.File, data []byte) error
}

func writeFile(f *os.File, data []byte) error {
	_, err := f.Write(data)
	return err
}

// Open opens the store named by rawURL (see storeurl.Check). A file://
// directory is created if missing. Credentials come from the environment.
// The store is opened from, and its URL is, rawURL's normal form
// (storeurl.Normalize): the same store with the same options, one
// spelling of it for every run that records it.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	normal, err := storeurl.Normalize(rawURL)
	if err != nil {
		return nil, err // wraps storeurl.ErrInvalid, which is ErrInvalidURL
	}
	rawURL = normal
	s := &Store{url: rawURL, opts: opts, write: writeFile}
	u, _ := url.Parse(rawURL)
	if u.Scheme == "file" {
		dir := filepath.Clean(filepath.FromSlash(u.Path))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("store %s: %w", storeurl.Redact(rawURL), err)
		}
		b, err := fileblob.OpenBucket(dir, &fileblob.Options{NoTempDir: true})
		if err != nil {
			return nil, fmt.Errorf("store %s: %w", storeurl.Redact(rawURL), err)
		}
		s.bucket, s.dir = b, dir
		return s, nil
	}
	var b *blob.Bucket
	if u.Scheme == "s3" {
		b, err = openS3(ctx, u)
	} else {
		b, err = blob.OpenBucket(ctx, rawURL)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: opening %s: %w", ErrInvalidURL, storeurl.Redact(rawURL), err)
	}
	s.bucket = b
	return s, nil
}

// URL returns the URL the store was opened from: the normal form
// (storeurl.Normalize) of the URL Open was given. A run records it.
func (s *Store) URL() string { return s.url }

// Close releases the store's resources.
func (s *Store) Close() error { return s.bucket.Close() }

func checkKey(key string) error {
	if err := storeurl.CheckKey(key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	for _, seg := range strings.Split(key, "/") {
		if strings.HasPrefix(seg, tmpPrefix) {
			return fmt.Errorf("%w: %q has a segment starting with %s (reserved for unfinished writes)", ErrInvalidKey, key, tmpPrefix)
		}
	}
	return nil
}

// tmpPrefix starts the name of a file:// write that has not finished; List
// skips such files and no key may name one.
const tmpPrefix = ".tmp-"

// isTemp reports whether a listed key is an unfinished file:// write.
func isTemp(key string) bool {
	return strings.HasPrefix(key[strings.LastIndexByte(key, '/')+1:], tmpPrefix)
}

// retryable tells whether err may go away if tried again.
func retryable(err error) bool {
	switch gcerrors.Code(err) {
	case gcerrors.NotFound, gcerrors.InvalidArgument, gcerrors.PermissionDenied,
		gcerrors.AlreadyExists, gcerrors.Unimplemented, gcerrors.FailedPrecondition:
		return false
	}
	return !errors.Is(err, context.Canceled)
}

// refused tells whether err is the store's answer that retrying cannot
// change (ErrRefused): access denied, an invalid argument, and the like,
// by its portable code, or by its HTTP status where the driver leaves the
// code Unknown (S3's 403 SignatureDoesNotMatch, for one): a 4xx but 404
// (not found), 408 (timeout), 409 (conflict) and 429 (throttled).
func refused(err error) bool {
	switch gcerrors.Code(err) {
	case gcerrors.InvalidArgument, gcerrors.PermissionDenied, gcerrors.AlreadyExists, gcerrors.Unimplemented,
		gcerrors.FailedPrecondition:
		return true
	}
	var h interface{ HTTPStatusCode() int }
	if !errors.As(err, &h) {
		return false
	}
	switch code := h.HTTPStatusCode(); code {
	case http.StatusNotFound, http.StatusRequestTimeout, http.StatusConflict, http.StatusTooManyRequests:
		return false
	default:
		return code >= 400 && code < 500
	}
}

// do runs op with the store's retries. op gets a context bounded by
// OpTimeout. A NotFound is returned at once wrapping ErrNotFound; an error
// left after the last attempt wraps ErrUnavailable.
func (s *Store) do(ctx context.Context, what string, op func(ctx context.Context) error) error {
	parent := ctx
	if s.opts.Deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.Deadline)
		defer cancel()
	}
	// gaveUp tells the store's own Deadline from the caller's context.
	gaveUp := func() bool { return ctx.Err() != nil && parent.Err() == nil }
	backoff := s.opts.Backoff
	var last error
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, s.opts.OpTimeout)
		err := op(actx)
		cancel()
		if err == nil {
			return nil
		}
		if gcerrors.Code(err) == gcerrors.NotFound || errors.Is(err, ErrNotFound) {
			return fmt.Errorf("%s: %w", what, ErrNotFound)
		}
		if errors.Is(err, ErrShortObject) || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrInvalidKey) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if gaveUp() {
			return fmt.Errorf("%s: %w: no answer within %v (attempt %d; last error: %v)", what, ErrUnavailable, s.opts.Deadline, attempt, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		}
		last = err
		if refused(err) {
			// The store answered, and retrying cannot change the answer.
			return fmt.Errorf("%s: %w: %w: %v", what, ErrUnavailable, ErrRefused, last)
		}
		if attempt >= s.opts.Attempts {
			break
		}
		d := time.Duration(rand.Int64N(int64(backoff)) + 1)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			if gaveUp() {
				return fmt.Errorf("%s: %w: no answer within %v (attempt %d; last error: %v)", what, ErrUnavailable, s.opts.Deadline, attempt, last)
			}
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), last)
		case <-t.C:
		}
		backoff = min(2*backoff, s.opts.MaxBackoff)
	}
	return fmt.Errorf("%s: %w: %v", what, ErrUnavailable, last)
}

// Put writes data as key, durably: when Put returns nil the bytes are
// stored (file://: written to a temporary file, fsynced, renamed, directory
// fsynced). Writing a key that exists replaces it; content-addressed keys
// (PutContent) never need to.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return s.do(ctx, "writing "+key, func(ctx context.Context) error {
		if s.dir != "" {
			return s.putFile(key, data)
		}
		return s.bucket.WriteAll(ctx, key, data, &blob.WriterOptions{ContentType: "application/octet-stream"})
	})
}

// putFile writes a file:// object durably: temp file, fsync, rename, fsync
// of the directory.
func (s *Store) putFile(key string, data []byte) error {
	path := filepath.Join(s.dir, filepath.FromSlash(key))
	rel, err := filepath.Rel(s.dir, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("%w: %q leaves the store's root", ErrInvalidKey, key)
	}
	dir := filepath.Dir(path)
	var f *os.File
	// A Delete that emptied dir removes it (pruneDirs): between mkdirs and
	// CreateTemp it may be gone; made again, the temp file in it keeps it.
	for try := 0; ; try++ {
		if err := s.mkdirs(dir); err != nil {
			return err
		}
		f, err = os.CreateTemp(dir, tmpPrefix+"*")
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) || try == 2 {
			return err
		}
	}
	tmp := f.Name()
	werr := s.write(f, data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return werr
	}
	return syncDir(dir)
}

// mkdirs creates dir and its missing parents under the store's root,
// fsyncing the parent of each directory it creates, so that a new
// object's path survives a crash.
func (s *Store) mkdirs(dir string) error {
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir && dir != s.dir {
		if err := s.mkdirs(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Exists reports whether key names an object.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	var ok bool
	err := s.do(ctx, "checking "+key, func(ctx context.Context) error {
		var err error
		ok, err = s.bucket.Exists(ctx, key)
		return err
	})
	return ok, err
}

// Size returns the size of the object key (ErrNotFound when there is none).
func (s *Store) Size(ctx context.Context, key string) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	var n int64
	err := s.do(ctx, "reading the size of "+key, func(ctx context.Context) error {
		a, err := s.bucket.Attributes(ctx, key)
		if err != nil {
			return err
		}
		n = a.Size
		return nil
	})
	return n, err
}

// Sum is a blake3-256 hash.
type Sum = [32]byte

// Hash returns the blake3-256 hash of data (blake3sum: without
// blake3.Sum256's goroutines and copy on the few-KiB records and results
// hashed one by one).
func Hash(data []byte) Sum { return blake3sum.Sum256(data) }

// PutContent writes data under prefix + hex(blake3(data)) unless an object
// of that key already holds exactly data, and returns the key and the hash.
// uploaded tells whether bytes were sent. An object of that key whose bytes
// differ (damaged in the store) is replaced: its size, then its MD5 where
// the store keeps one (S3 and most others), else its bytes read back, are
// compared, so a resubmit uploads nothing twice and never trusts a damaged
// object.
func (s *Store) PutContent(ctx context.Context, prefix string, data []byte) (key string, sum Sum, uploaded bool, err error) {
	sum = Hash(data)
	key = prefix + hex.EncodeToString(sum[:])
	if err := checkKey(key); err != nil {
		return "", sum, false, err
	}
	same, err := s.holds(ctx, key, data, sum)
	if err != nil {
		return "", sum, false, err
	}
	if same {
		return key, sum, false, nil
	}
	if err := s.Put(ctx, key, data); err != nil {
		return "", sum, false, err
	}
	return key, sum, true, nil
}

// holds reports whether the object key exists and holds exactly data
// (whose blake3 is sum).
func (s *Store) holds(ctx context.Context, key string, data []byte, sum Sum) (bool, error) {
	var attrs *blob.Attributes
	err := s.do(ctx, "reading the attributes of "+key, func(ctx context.Context) error {
		var err error
		attrs, err = s.bucket.Attributes(ctx, key)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if attrs.Size != int64(len(data)) {
		return false, nil
	}
	if len(attrs.MD5) == md5.Size {
		m := md5.Sum(data)
		return bytes.Equal(attrs.MD5, m[:]), nil
	}
	b, err := s.ReadAll(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return Hash(b) == sum, nil
}

// ReadRange returns exactly n bytes of key from offset off. An object
// shorter than off+n is ErrShortObject.
func (s *Store) ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if off < 0 || n < 0 {
		return nil, fmt.Errorf("%w: negative range %d+%d of %q", ErrInvalidKey, off, n, key)
	}
	if n > s.opts.MaxObjectBytes {
		return nil, fmt.Errorf("%w: range of %d bytes of %q is over %d", ErrTooLarge, n, key, s.opts.MaxObjectBytes)
	}
	buf := make([]byte, n)
	err := s.do(ctx, fmt.Sprintf("reading %q bytes %d..%d", key, off, off+n), func(ctx context.Context) error {
		if n == 0 {
			_, err := s.bucket.Attributes(ctx, key)
			return err
		}
		r, err := s.bucket.NewRangeReader(ctx, key, off, n, nil)
		if err != nil {
			// A range past the end is an error on some stores (S3: 416):
			// tell a short object from a fault by its size.
			if gcerrors.Code(err) != gcerrors.NotFound {
				if a, aerr := s.bucket.Attributes(ctx, key); aerr == nil && a.Size < off+n {
					return fmt.Errorf("%w: %q has %d bytes, the range read is %d..%d", ErrShortObject, key, a.Size, off, off+n)
				}
			}
			return err
		}
		defer r.Close()
		got, err := io.ReadFull(r, buf)
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: %q has %d bytes at offset %d, want %d", ErrShortObject, key, got, off, n)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return buf, nil
}

// ReadAll returns the whole object key, at most Options.MaxObjectBytes.
func (s *Store) ReadAll(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	var out []byte
	err := s.do(ctx, "reading "+key, func(ctx context.Context) error {
		r, err := s.bucket.NewReader(ctx, key, nil)
		if err != nil {
			return err
		}
		defer r.Close()
		if r.Size() > s.opts.MaxObjectBytes {
			return fmt.Errorf("%w: %q is %d bytes, over %d", ErrTooLarge, key, r.Size(), s.opts.MaxObjectBytes)
		}
		var b bytes.Buffer
		b.Grow(int(r.Size()))
		if _, err := io.Copy(&b, io.LimitReader(r, s.opts.MaxObjectBytes+1)); err != nil {
			return err
		}
		out = b.Bytes()
		return nil
	})
	return out, err
}

// ReadChecked reads length bytes of key at offset and checks them against
// sum: a mismatch is ErrHashMismatch naming the object.
func (s *Store) ReadChecked(ctx context.Context, key string, off, n int64, sum Sum) ([]byte, error) {
	b, err := s.ReadRange(ctx, key, off, n)
	if err != nil {
		return nil, err
	}
	if Hash(b) != sum {
		return nil, fmt.Errorf("%w: %q bytes %d..%d", ErrHashMismatch, key, off, off+n)
	}
	return b, nil
}

// NewReader streams the object key from its start (for inputs referenced
// where they are).
func (s *Store) NewReader(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	var r *blob.Reader
	err := s.do(ctx, "opening "+key, func(_ context.Context) error {
		var err error
		r, err = s.bucket.NewReader(ctx, key, nil)
		return err
	})
	return r, err
}

// Object is one listed object.
type Object struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// List calls fn with every object under prefix, in key order per page (a
// file:// store: in key order); an error from fn ends it with that error.
// Objects written or removed while it lists may or may not be listed; the
// others are, and the listing does not fail because of them.
func (s *Store) List(ctx context.Context, prefix string, fn func(Object) error) error {
	if s.dir != "" {
		return s.listFile(ctx, prefix, fn)
	}
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		var o *blob.ListObject
		err := s.do(ctx, "listing "+prefix, func(ctx context.Context) error {
			var err error
			o, err = it.Next(ctx)
			if errors.Is(err, io.EOF) {
				o = nil
				return nil
			}
			return err
		})
		if err != nil {
			return err
		}
		if o == nil {
			return nil
		}
		if isTemp(o.Key) {
			continue // a file:// write that did not finish
		}
		if err := fn(Object{Key: o.Key, Size: o.Size, ModTime: o.ModTime}); err != nil {
			return err
		}
	}
}

// Delete removes key; a missing key is not an error. In a file:// store
// it then removes the directories the removal left empty, from key's up
// to (not including) the store's root: a removed run leaves no empty
// directories behind.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	err := s.do(ctx, "deleting "+key, func(ctx context.Context) error { return s.bucket.Delete(ctx, key) })
	if errors.Is(err, ErrNotFound) {
		err = nil
	}
	if err == nil {
		s.pruneDirs(key)
	}
	return err
}

// pruneDirs removes, in a file:// store, the directories of key (checked)
// from the deepest up while they are empty, never the root. A directory
// that is not empty (or that a writer fills meanwhile: os.Remove refuses
// it) ends the walk; errors are not the caller's: a directory left is
// only untidy.
func (s *Store) pruneDirs(key string) {
	if s.dir == "" {
		return
	}
	root := filepath.Clean(s.dir)
	for d := filepath.Dir(filepath.Join(root, filepath.FromSlash(key))); strings.HasPrefix(d, root+string(filepath.Separator)); d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			return
		}
	}
}

// DeletePrefix removes every object under prefix and returns how many.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	if err := checkKey(strings.TrimSuffix(prefix, "/")); err != nil {
		return 0, err
	}
	var keys []string
	if err := s.List(ctx, prefix, func(o Object) error { keys = append(keys, o.Key); return nil }); err != nil {
		return 0, err
	}
	for i, k := range keys {
		if err := s.Delete(ctx, k); err != nil {
			return i, err
		}
	}
	return len(keys), nil
}

// NewWriter streams a new object to key; it is stored only when Close
// returns nil (an upload that fails or whose ctx is cancelled leaves no
// object). For big outputs (results files) that should not be held in
// memory whole. Not retried: the caller writes again.
func (s *Store) NewWriter(ctx context.Context, key string) (io.WriteCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	w, err := s.bucket.NewWriter(ctx, key, &blob.WriterOptions{ContentType: "application/jsonl"})
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w: %v", key, ErrUnavailable, err)
	}
	return w, nil
}
