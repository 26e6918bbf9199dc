package gateway

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"lukechampine.com/blake3"

	"github.com/rollout/rollout/store"
)

// errTooLarge ends an upload that passed MaxFileBytes.
var errTooLarge = errors.New("upload too large")

// countingReader counts bytes and fails past a limit.
type countingReader struct {
	r     io.Reader
	n     int64
	limit int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.limit {
		return n, errTooLarge
	}
	return n, err
}

// uploadFile is POST /v1/files: multipart/form-data with "purpose"
// ("batch") and "file". The file is checked line by line while it streams
// to the store; a bad line, too many requests or too many bytes refuse it
// before it is stored (an aborted write leaves no object).
func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request) {
	owner := ownerOf(r)
	limit := s.cfg.MaxFileBytes
	if r.ContentLength > limit+1<<20 {
		writeError(w, s.tooLarge(r.ContentLength))
		if r.ContentLength <= drainMax {
			drain(w, r.Body)
		}
		return
	}
	orig := r.Body
	paced, unpace := s.pace(w, r)
	defer unpace()
	r.Body = http.MaxBytesReader(w, r.Body, limit+1<<20)
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "multipart/form-data" {
		writeError(w, invalid("file", "", "the body must be multipart/form-data with the fields purpose and file"))
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		writeError(w, invalid("file", "", "reading the multipart body: %v", err))
		return
	}
	id, err := newID("file-")
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, abort := context.WithCancel(r.Context())
	defer abort()
	var purpose, filename string
	var stored *countingReader
	var chk *checker
	sum := blake3.New(32, nil)
	var writer io.WriteCloser
	fail := func(err error) {
		abort()
		if writer != nil {
			_ = writer.Close() // aborted: nothing is stored
		}
		var mbe *http.MaxBytesError
		slow := paced.tooSlow()
		if slow != nil {
			s.log.Warn("upload cut: its body came too slowly", "remote", r.RemoteAddr, "owner", owner, "error", slow.Message)
			w.Header().Set("Connection", "close")
			err = slow
		} else if errors.As(err, &mbe) || errors.Is(err, errTooLarge) {
			err = s.tooLarge(-1)
		}
		writeError(w, err)
		if slow == nil {
			drain(w, orig)
		}
	}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fail(invalid("file", "", "reading the multipart body: %v", err))
			return
		}
		switch part.FormName() {
		case "purpose":
			b, err := io.ReadAll(io.LimitReader(part, 65))
			if err != nil {
				fail(invalid("purpose", "", "reading purpose: %v", err))
				return
			}
			purpose = string(b)
		case "file":
			if writer != nil {
				fail(invalid("file", "", "the body has more than one file"))
				return
			}
			filename = path.Base(part.FileName())
			if filename == "." || filename == "/" || !utf8.ValidString(filename) || len(filename) > 255 {
				filename = "upload.jsonl"
			}
			writer, err = s.cfg.Store.NewWriter(ctx, fileContentKey(id))
			if err != nil {
				fail(s.storeErr("the store", err))
				return
			}
			stored = &countingReader{r: part, limit: limit}
			chk = newChecker("", s.cfg.MaxRequests, s.itemLimit(ctx))
			pr, pw := io.Pipe()
			done := make(chan error, 1)
			go func() {
				done <- chk.read(pr)
				_, _ = io.Copy(io.Discard, pr)
			}()
			sw := &storeWriter{w: writer}
			_, cerr := io.Copy(io.MultiWriter(sw, pw, sum), stored)
			pw.CloseWithError(cerr)
			serr := <-done
			switch {
			case sw.err != nil:
				s.log.Error("storing an upload", "id", id, "error", sw.err)
				fail(storeFailed("storing the upload", sw.err))
				return
			case cerr != nil && (errors.Is(cerr, errTooLarge) || isMaxBytes(cerr)):
				fail(cerr)
				return
			case cerr != nil:
				fail(invalid("file", "", "reading the upload: %v", cerr))
				return
			case serr != nil:
				fail(invalid("file", "invalid_file_format", "%v", serr))
				return
			}
		default:
			// Unknown fields are ignored, as OpenAI ignores them.
			_, _ = io.Copy(io.Discard, io.LimitReader(part, 1<<20))
		}
	}
	unpace() // the body is read: storing it may take a while
	switch {
	case writer == nil:
		fail(invalid("file", "missing_required_parameter", "the body has no file field"))
		return
	case purpose == "":
		fail(invalid("purpose", "missing_required_parameter", "the body has no purpose field"))
		return
	case purpose != PurposeBatch:
		fail(invalid("purpose", "invalid_value", "purpose %q is not supported: this server serves the Batch API, whose input files have purpose %q", purpose, PurposeBatch))
		return
	}
	if errs := chk.errors(); len(errs) > 0 {
		fail(invalid("file", "invalid_file_format", "%s", describeErrors(filename, errs)))
		return
	}
	if err := writer.Close(); err != nil {
		writer = nil
		s.log.Error("storing an upload", "id", id, "error", err)
		writeError(w, storeFailed("storing the upload", err))
		return
	}
	writer = nil
	rec := &fileRecord{ID: id, Owner: owner, Bytes: stored.n, CreatedAt: s.now(), Filename: filename,
		Purpose: PurposeBatch, Requests: chk.requests, Blake3: hex.EncodeToString(sum.Sum(nil))}
	if err := s.putFile(r.Context(), rec); err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("file uploaded", "id", id, "owner", owner, "bytes", rec.Bytes, "requests", rec.Requests)
	if s.met != nil {
		s.met.uploadBytes.Add(float64(rec.Bytes))
	}
	writeJSON(w, http.StatusOK, rec.object())
}

// Bounds of the rest of a refused upload that is read and dropped: at
// most drainMax bytes, for at most drainFor, while the client sends
// something every drainIdle.
const (
	drainMax  = 16 << 20
	drainFor  = 5 * time.Second
	drainIdle = 500 * time.Millisecond
)

// drain sends the answer already written and then reads and drops what is
// left of the request body, so that a client still sending gets its whole
// answer: over HTTP/2 a handler that returns before the body ended resets
// the stream (RST_STREAM) under a client still sending, and some clients
// then take the answer they were reading as cut short; over HTTP/1 the
// connection is closed under a client that may not have read it yet. A
// client that stops sending once it has the answer (Go's) is let go after
// drainIdle; a body longer than the bounds is cut as before.
func drain(w http.ResponseWriter, body io.Reader) {
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	end := time.Now().Add(drainFor)
	buf := make([]byte, 32<<10)
	for n := 0; n < drainMax && time.Now().Before(end); {
		due := time.Now().Add(drainIdle)
		if due.After(end) {
			due = end
		}
		_ = rc.SetReadDeadline(due)
		k, err := body.Read(buf)
		n += k
		if err != nil {
			return
		}
	}
}

// storeWriter remembers the store's write error, to tell it from the
// client's read errors.
type storeWriter struct {
	w   io.Writer
	err error
}

func (s *storeWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil && s.err == nil {
		s.err = err
	}
	return n, err
}

// storeErr logs a store's error and returns storeFailed's answer.
func (s *Server) storeErr(what string, err error) *apiError {
	s.log.Error(what, "error", err)
	return storeFailed(what, err)
}

// storeFailed is the answer to a store that failed a write: 507 when it is
// full, else 503; the client is told what failed, not the store's paths
// (the gateway's log has the whole error).
func storeFailed(what string, err error) *apiError {
	if errors.Is(err, syscall.ENOSPC) {
		return serverError(http.StatusInsufficientStorage, "%s: the gateway's store is full", what)
	}
	return serverError(http.StatusServiceUnavailable, "%s: the gateway's store failed; try again", what)
}

func isMaxBytes(err error) bool {
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe)
}

func (s *Server) tooLarge(n int64) *apiError {
	what := "the upload"
	if n >= 0 {
		what = fmt.Sprintf("the upload (%d bytes)", n)
	}
	return &apiError{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest, Param: "file", Code: "file_too_large",
		Message: fmt.Sprintf("%s is larger than the limit of %d bytes per file", what, s.cfg.MaxFileBytes)}
}

// describeErrors makes the first errors of a file one message.
func describeErrors(filename string, errs []batchError) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s is not a valid Batch API input file: ", filename)
	for i, e := range errs {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", len(errs)-5)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Message)
	}
	return b.String()
}

// putFile writes a file's metadata (the file is visible from then on) and
// its listing entry.
func (s *Server) putFile(ctx context.Context, rec *fileRecord) error {
	if err := putJSON(ctx, s.cfg.Store, fileMetaKey(rec.ID), rec); err != nil {
		return s.storeErr("storing the file's metadata", err)
	}
	if err := s.cfg.Store.Put(ctx, indexKey(rec.Owner, "files", rec.ID, rec.CreatedAt), nil); err != nil {
		return s.storeErr("storing the file's listing entry", err)
	}
	return nil
}

// file loads the file id of owner; another owner's file is not found.
func (s *Server) file(ctx context.Context, owner, id, param string) (*fileRecord, error) {
	if !validID(id, "file-") {
		return nil, notFound(param, "No such File object: %s", id)
	}
	var rec fileRecord
	err := getJSON(ctx, s.cfg.Store, fileMetaKey(id), &rec)
	switch {
	case isNotFound(err):
		return nil, notFound(param, "No such File object: %s", id)
	case err != nil:
		return nil, s.storeErr(fmt.Sprintf("reading file %s", id), err)
	case rec.Owner != owner:
		return nil, notFound(param, "No such File object: %s", id)
	}
	return &rec, nil
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	rec, err := s.file(r.Context(), ownerOf(r), r.PathValue("id"), "id")
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rec.object())
}

func (s *Server) fileContent(w http.ResponseWriter, r *http.Request) {
	rec, err := s.file(r.Context(), ownerOf(r), r.PathValue("id"), "id")
	if err != nil {
		writeError(w, err)
		return
	}
	rd, err := s.cfg.Store.NewReader(r.Context(), fileContentKey(rec.ID))
	if err != nil {
		writeError(w, s.storeErr(fmt.Sprintf("reading file %s", rec.ID), err))
		return
	}
	defer rd.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(rec.Bytes, 10))
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", rec.Filename))
	w.WriteHeader(http.StatusOK)
	h := blake3.New(32, nil)
	n, err := io.Copy(io.MultiWriter(w, h), rd)
	switch {
	case err != nil || n != rec.Bytes:
		// The status is sent: cut the response short so the client sees
		// a broken body, never a short file taken for whole.
		s.log.Error("file content cut short", "id", rec.ID, "sent", n, "want", rec.Bytes, "error", err)
		panic(http.ErrAbortHandler)
	case rec.Blake3 != "" && hex.EncodeToString(h.Sum(nil)) != rec.Blake3:
		// The store changed the bytes: the client must not take them
		// for the file (the last chunk is held back by the abort).
		s.log.Error("file content does not match its blake3: the store changed it", "id", rec.ID, "key", fileContentKey(rec.ID))
		panic(http.ErrAbortHandler)
	}
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) {
	rec, err := s.file(r.Context(), ownerOf(r), r.PathValue("id"), "id")
	if err != nil {
		writeError(w, err)
		return
	}
	ctx := r.Context()
	st := s.cfg.Store
	// Invisible first (the listing entry, then the metadata), then the
	// bytes: a delete cut short leaves at worst unreferenced bytes.
	for _, key := range []string{indexKey(rec.Owner, "files", rec.ID, rec.CreatedAt), fileMetaKey(rec.ID), fileContentKey(rec.ID)} {
		if err := st.Delete(ctx, key); err != nil {
			writeError(w, s.storeErr(fmt.Sprintf("deleting file %s", rec.ID), err))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": rec.ID, "object": "file", "deleted": true})
}

// listParams are a list request's after, limit and order.
type listParams struct {
	after string
	limit int
	asc   bool
}

func parseList(r *http.Request, defLimit, maxLimit int) (listParams, error) {
	q := r.URL.Query()
	p := listParams{after: q.Get("after"), limit: defLimit}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			return p, invalid("limit", "invalid_value", "limit must be an integer from 1 to %d, got %q", maxLimit, v)
		}
		p.limit = n
	}
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		p.asc = true
	default:
		return p, invalid("order", "invalid_value", `order must be "asc" or "desc", got %q`, o)
	}
	return p, nil
}

// listIDs returns the ids of owner's kind newest first (oldest first with
// asc), the page after p.after, and whether more follow. An after that is
// not in the listing starts at the beginning, as a deleted cursor would.
func (s *Server) listIDs(ctx context.Context, owner, kind string, p listParams, keep func(id string) bool) ([]string, bool, error) {
	var all []string
	err := s.cfg.Store.List(ctx, ownerPrefix(owner, kind), func(o store.Object) error {
		all = append(all, idOfIndexKey(o.Key))
		return nil
	})
	if err != nil {
		return nil, false, s.storeErr(fmt.Sprintf("listing %s", kind), err)
	}
	if p.asc {
		for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
			all[i], all[j] = all[j], all[i]
		}
	}
	start := 0
	if p.after != "" {
		for i, id := range all {
			if id == p.after {
				start = i + 1
				break
			}
		}
	}
	var page []string
	for i := start; i < len(all); i++ {
		if keep != nil && !keep(all[i]) {
			continue
		}
		if len(page) == p.limit {
			return page, true, nil
		}
		page = append(page, all[i])
	}
	return page, false, nil
}

// listObject is OpenAI's list shape.
func listObject(data []map[string]any, hasMore bool) map[string]any {
	out := map[string]any{"object": "list", "data": data, "has_more": hasMore, "first_id": nil, "last_id": nil}
	if data == nil {
		out["data"] = []map[string]any{}
	}
	if len(data) > 0 {
		out["first_id"] = data[0]["id"]
		out["last_id"] = data[len(data)-1]["id"]
	}
	return out
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	p, err := parseList(r, 10_000, 10_000)
	if err != nil {
		writeError(w, err)
		return
	}
	owner, purpose := ownerOf(r), r.URL.Query().Get("purpose")
	ctx := r.Context()
	recs := map[string]*fileRecord{}
	ids, more, err := s.listIDs(ctx, owner, "files", p, func(id string) bool {
		rec, err := s.file(ctx, owner, id, "")
		if err != nil {
			return false // deleted meanwhile, or unreadable: not listed
		}
		if purpose != "" && rec.Purpose != purpose {
			return false
		}
		recs[id] = rec
		return true
	})
	if err != nil {
		writeError(w, err)
		return
	}
	data := make([]map[string]any, 0, len(ids))
	for _, id := range ids {
		data = append(data, recs[id].object())
	}
	writeJSON(w, http.StatusOK, listObject(data, more))
}
