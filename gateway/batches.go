package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"lukechampine.com/blake3"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/client/runs"
	"github.com/rollout/rollout/store"
	"github.com/rollout/rollout/store/storeurl"
)

// OpenAI's batch statuses.
const (
	statusValidating = "validating"
	statusFailed     = "failed"
	statusInProgress = "in_progress"
	statusFinalizing = "finalizing"
	statusCompleted  = "completed"
	statusExpired    = "expired"
	statusCancelling = "cancelling"
	statusCancelled  = "cancelled"
)

// The error codes of requests that did not run (error file lines).
const (
	codeExpired   = "batch_expired"
	codeCancelled = "batch_cancelled"
)

// resultsCacheBytes bounds the object cache of one finalization.
const resultsCacheBytes = 64 << 20

type createRequest struct {
	InputFileID        string            `json:"input_file_id"`
	Endpoint           string            `json:"endpoint"`
	CompletionWindow   string            `json:"completion_window"`
	Metadata           map[string]string `json:"metadata"`
	OutputExpiresAfter json.RawMessage   `json:"output_expires_after"`
}

// createBatch is POST /v1/batches. It checks the request, records the
// batch, checks the input file line by line (a bad file makes the batch
// "failed" with every bad line in its errors, and no run) and submits the
// run; the answer is the batch as it then stands ("in_progress" or
// "failed"). A cluster that does not take the run is a 503 (the SDK then
// creates the batch again) and fails this batch, so that it never runs.
func (s *Server) createBatch(w http.ResponseWriter, r *http.Request) {
	key := keyOf(r)
	owner := key.Name
	var req createRequest
	paced, unpace := s.pace(w, r)
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxJSONBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	unpace() // the body is read: creating the batch may take a while
	if err != nil {
		if slow := paced.tooSlow(); slow != nil {
			w.Header().Set("Connection", "close")
			writeError(w, slow)
			return
		}
		if isMaxBytes(err) {
			writeError(w, &apiError{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest, Code: "request_too_large",
				Message: fmt.Sprintf("the request body is larger than %d bytes", maxJSONBody)})
			return
		}
		writeError(w, invalid("", "invalid_json", "the body must be a JSON object with input_file_id, endpoint and completion_window: %v", err))
		return
	}
	if err := s.checkCreate(&req); err != nil {
		writeError(w, err)
		return
	}
	ctx := r.Context()
	f, err := s.file(ctx, owner, req.InputFileID, "input_file_id")
	if err != nil {
		writeError(w, err)
		return
	}
	if f.Purpose != PurposeBatch {
		writeError(w, invalid("input_file_id", "invalid_value", "file %s has purpose %q; a batch's input file has purpose %q", f.ID, f.Purpose, PurposeBatch))
		return
	}
	id, err := newID("batch_")
	if err != nil {
		writeError(w, err)
		return
	}
	now := s.now()
	rec := &batchRecord{ID: id, Owner: owner, Endpoint: req.Endpoint, InputFileID: f.ID, CompletionWindow: req.CompletionWindow,
		Metadata: req.Metadata, CreatedAt: now, ExpiresAt: now + int64(s.cfg.Window/time.Second), Status: recValidating,
		Priority: key.Priority}
	if err := s.putBatch(ctx, rec); err != nil {
		writeError(w, err)
		return
	}
	if err := s.cfg.Store.Put(ctx, indexKey(owner, "batches", id, now), nil); err != nil {
		writeError(w, s.storeErr("storing the batch's listing entry", err))
		return
	}
	if err := s.cfg.Store.Put(ctx, activeKey(id), nil); err != nil {
		writeError(w, s.storeErr("storing the batch's entry in the active list", err))
		return
	}
	if err := s.submit(ctx, rec); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests {
			s.log.Info("batch refused: its tenant's queue is full", "id", id, "owner", owner, "error", ae.Message)
			s.met.quotaRefused()
		} else {
			s.log.Error("submitting a batch", "id", id, "error", err)
		}
		writeError(w, err)
		return
	}
	obj, err := s.view(ctx, rec)
	if err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("batch created", "id", id, "owner", owner, "status", obj["status"], "requests", rec.Total)
	writeJSON(w, http.StatusOK, obj)
}

func (s *Server) checkCreate(req *createRequest) error {
	switch {
	case req.InputFileID == "":
		return invalid("input_file_id", "missing_required_parameter", "input_file_id is required")
	case req.Endpoint == "":
		return invalid("endpoint", "missing_required_parameter", "endpoint is required")
	case !knownEndpoint(req.Endpoint):
		return invalid("endpoint", "invalid_value", "endpoint %q is not supported: use one of %s", req.Endpoint, strings.Join(endpoints, ", "))
	case req.CompletionWindow == "":
		return invalid("completion_window", "missing_required_parameter", "completion_window is required")
	case req.CompletionWindow != "24h":
		return invalid("completion_window", "invalid_value", `completion_window %q is not supported: "24h" is the only window`, req.CompletionWindow)
	case len(req.Metadata) > maxMetadataPairs:
		return invalid("metadata", "invalid_value", "metadata has %d keys, at most %d", len(req.Metadata), maxMetadataPairs)
	}
	for k, v := range req.Metadata {
		if len(k) > maxMetadataKey || len(v) > maxMetadataValue {
			return invalid("metadata", "invalid_value", "metadata keys are at most %d characters and values at most %d; %q is not", maxMetadataKey, maxMetadataValue, k)
		}
	}
	return nil
}

func (s *Server) putBatch(ctx context.Context, rec *batchRecord) error {
	if err := putJSON(ctx, s.cfg.Store, batchKey(rec.ID), rec); err != nil {
		return s.storeErr(fmt.Sprintf("storing batch %s", rec.ID), err)
	}
	return nil
}

// batch loads batch id of owner; another owner's batch is not found.
func (s *Server) batch(ctx context.Context, owner, id string) (*batchRecord, error) {
	if !validID(id, "batch_") {
		return nil, notFound("batch_id", "No batch found with id '%s'.", id)
	}
	var rec batchRecord
	err := getJSON(ctx, s.cfg.Store, batchKey(id), &rec)
	switch {
	case isNotFound(err):
		return nil, notFound("batch_id", "No batch found with id '%s'.", id)
	case err != nil:
		return nil, s.storeErr(fmt.Sprintf("reading batch %s", id), err)
	case rec.Owner != owner:
		return nil, notFound("batch_id", "No batch found with id '%s'.", id)
	}
	return &rec, nil
}

// submit checks the batch's input file and submits its run, then records
// the outcome. rec must be "validating".
func (s *Server) submit(ctx context.Context, rec *batchRecord) error {
	key := fileContentKey(rec.InputFileID)
	chk := newChecker(rec.Endpoint, s.cfg.MaxRequests, s.itemLimit(ctx))
	rd, err := s.cfg.Store.NewReader(ctx, key)
	if isNotFound(err) {
		return s.failBatch(ctx, rec, []batchError{{Code: "file_not_found", Message: fmt.Sprintf("input file %s was deleted before the batch was submitted", rec.InputFileID)}})
	}
	if err != nil {
		return s.storeErr(fmt.Sprintf("reading input file %s", rec.InputFileID), err)
	}
	h := blake3.New(32, nil)
	serr := chk.read(io.TeeReader(rd, h))
	rd.Close()
	if f, err := s.file(ctx, rec.Owner, rec.InputFileID, ""); serr == nil && err == nil && f.Blake3 != "" && hex.EncodeToString(h.Sum(nil)) != f.Blake3 {
		s.log.Error("input file does not match its blake3: the store changed it", "id", rec.InputFileID, "key", key)
		return s.failBatch(ctx, rec, []batchError{{Code: "file_changed", Message: fmt.Sprintf("input file %s changed in the gateway's store since it was uploaded; upload it again", rec.InputFileID)}})
	}
	if serr != nil {
		return s.storeErr(fmt.Sprintf("reading input file %s", rec.InputFileID), serr)
	}
	if errs := chk.errors(); len(errs) > 0 {
		return s.failBatch(ctx, rec, errs)
	}
	cfg := runs.DefaultSubmitConfig()
	cfg.Run, cfg.Files, cfg.Model = rec.ID, []string{key}, chk.model
	cfg.Sampling.Passthrough = true
	cfg.Store, cfg.MaxFailures, cfg.Timeout = s.cfg.Store, s.cfg.MaxFailures, s.cfg.CallTimeout
	if s.cfg.TenantPerKey {
		cfg.Tenant = rec.Owner // the key's name: its fair share and quotas
	}
	if rec.Priority > 0 {
		cfg.Priority = uint32(rec.Priority) // the key's
	}
	cfg.Read.Open = func(name string) (io.ReadCloser, error) { return s.cfg.Store.NewReader(ctx, name) }
	var invalidLines bytes.Buffer
	cfg.Invalid = &invalidLines
	res, err := runs.Submit(ctx, s.cfg.Cluster, cfg)
	if errors.Is(err, batch.ErrInvalidInput) {
		// The cluster's own limits (an item over its size limit, say).
		return s.failBatch(ctx, rec, lineErrors(key, invalidLines.String()))
	}
	if q, ok := quotaRefusal(err); ok {
		// The tenant's queue is full: OpenAI's answer to a full enqueued
		// limit, and no batch (the client creates it again later).
		s.withdraw(ctx, rec)
		return rateLimited(q)
	}
	if err != nil {
		// The client is told the create failed (and the SDK tries again,
		// as a new batch): this one must never run, so it fails, and what
		// of its run was created goes.
		ferr := s.abandon(ctx, rec, "submit_failed", fmt.Sprintf("the cluster did not take the batch: %v", err))
		if ferr != nil {
			s.log.Error("recording a batch whose submit failed", "id", rec.ID, "error", ferr)
		}
		return serverError(http.StatusServiceUnavailable, "submitting batch %s to the cluster: %v", rec.ID, err)
	}
	rec.Status, rec.InProgressAt, rec.Total, rec.Model = recSubmitted, s.now(), res.Items, chk.model
	return s.putBatch(ctx, rec)
}

// lineErrors turns the runs library's "KEY:LINE: reason" lines into batch
// errors.
func lineErrors(key, text string) []batchError {
	var out []batchError
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		l := strings.TrimPrefix(sc.Text(), key+":")
		e := batchError{Code: "invalid_request", Message: l}
		if n, rest, ok := strings.Cut(l, ":"); ok {
			if line, err := strconv.Atoi(n); err == nil {
				e.Line, e.Message = &line, fmt.Sprintf("line %d:%s", line, rest)
			}
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		out = append(out, batchError{Code: "invalid_request", Message: "the cluster refused the input"})
	}
	return out
}

// abandon fails a batch whose creation did not finish, and cancels and
// deletes what of its run the cluster holds (best effort: the run is
// cancelled first, so no worker starts more of it).
func (s *Server) abandon(ctx context.Context, rec *batchRecord, code, msg string) error {
	if err := s.failBatch(ctx, rec, []batchError{{Code: code, Message: msg}}); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	if _, err := s.cfg.Cluster.CancelRun(cctx, &rolloutv1.CancelRunRequest{Run: rec.ID}); err != nil {
		if status.Code(err) != codes.NotFound {
			s.log.Warn("cancelling an abandoned batch's run", "id", rec.ID, "error", err)
		}
		return nil
	}
	if _, err := s.cfg.Cluster.DeleteRun(cctx, &rolloutv1.DeleteRunRequest{Run: rec.ID}); err != nil {
		s.log.Warn("deleting an abandoned batch's run (rollout delete removes it)", "id", rec.ID, "error", err)
		return nil
	}
	if err := s.deleteRunObjects(ctx, rec.ID); err != nil {
		s.log.Warn("deleting an abandoned batch's objects", "id", rec.ID, "error", err)
	}
	return nil
}

// withdraw removes every trace of a batch whose run the cluster refused
// for its tenant's quota, as if it had never been created: what of its run
// the ledger holds (a large input is several submit calls, and a later one
// may be the refused one) is cancelled and deleted, its objects in the
// store deleted, then its record, listing entry and active entry. Best
// effort: what is left (a gateway killed meanwhile) is a record still
// "validating", which the next gateway to read it fails.
func (s *Server) withdraw(ctx context.Context, rec *batchRecord) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	_, err := s.cfg.Cluster.CancelRun(cctx, &rolloutv1.CancelRunRequest{Run: rec.ID})
	switch {
	case err == nil:
		if _, err := s.cfg.Cluster.DeleteRun(cctx, &rolloutv1.DeleteRunRequest{Run: rec.ID}); err != nil {
			s.log.Warn("deleting the run of a batch refused for its quota (rollout delete removes it)", "id", rec.ID, "error", err)
		}
	case status.Code(err) != codes.NotFound:
		s.log.Warn("cancelling the run of a batch refused for its quota", "id", rec.ID, "error", err)
		return // the record stays "validating": a later read fails it and tries again
	}
	if err := s.deleteRunObjects(ctx, rec.ID); err != nil {
		s.log.Warn("deleting the objects of a batch refused for its quota", "id", rec.ID, "error", err)
	}
	for _, key := range []string{activeKey(rec.ID), indexKey(rec.Owner, "batches", rec.ID, rec.CreatedAt), batchKey(rec.ID)} {
		if err := s.cfg.Store.Delete(ctx, key); err != nil && !isNotFound(err) {
			s.log.Warn("deleting the record of a batch refused for its quota", "id", rec.ID, "key", key, "error", err)
		}
	}
}

func (s *Server) failBatch(ctx context.Context, rec *batchRecord, errs []batchError) error {
	rec.Status, rec.Errors, rec.FailedAt = recFailed, errs, s.now()
	if err := s.putBatch(ctx, rec); err != nil {
		return err
	}
	_ = s.cfg.Store.Delete(ctx, activeKey(rec.ID))
	return nil
}

// runStatus reads the batch's run; nil without error when the ledger has
// no such run (deleted by an operator).
func (s *Server) runStatus(ctx context.Context, id string) (*rolloutv1.RunCounters, error) {
	_, rc, err := runs.Status(ctx, s.cfg.Cluster, id, s.cfg.CallTimeout)
	if errors.Is(err, runs.ErrRunNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, serverError(http.StatusServiceUnavailable, "reading batch %s from the cluster: %v", id, err)
	}
	return rc, nil
}

// view returns the batch in OpenAI's shape as it stands, and moves it on:
// a "validating" batch left by a dead gateway fails (its client was never
// told it exists), a batch
// past its window is cancelled as expired, and a finished run is
// finalized (in the background: the batch says "finalizing" meanwhile).
func (s *Server) view(ctx context.Context, rec *batchRecord) (map[string]any, error) {
	o := s.baseObject(rec)
	switch {
	case rec.Final != nil:
		f := rec.Final
		o["status"], o["finalizing_at"] = f.Status, f.FinalizingAt
		o["request_counts"] = counts(rec.Total, f.Completed, f.Failed)
		o["output_file_id"], o["error_file_id"] = nullable(f.OutputFileID), nullable(f.ErrorFileID)
		// Never before finalizing began (a record written before that
		// rule dated it at the run's end).
		done := max(f.DoneAt, f.FinalizingAt)
		switch f.Status {
		case statusCompleted:
			o["completed_at"] = done
		case statusCancelled:
			o["cancelled_at"] = done
		case statusExpired:
			o["expired_at"] = done
		}
		return o, nil
	case rec.Status == recFailed:
		o["status"], o["failed_at"] = statusFailed, rec.FailedAt
		return o, nil
	case rec.Status == recValidating:
		o["status"] = statusValidating
		if s.now()-rec.CreatedAt >= int64(s.cfg.ResumeAfter/time.Second) && !s.isBusy(rec.ID) {
			// Its gateway died while creating it: the client got no answer
			// (and its SDK made the batch again), so it must not run.
			s.background(rec.ID, func(ctx context.Context) {
				if err := s.abandon(ctx, rec, "gateway_stopped", "the gateway creating this batch stopped before it was submitted; create it again"); err != nil {
					s.log.Warn("failing a batch left validating", "id", rec.ID, "error", err)
				}
			})
		}
		return o, nil
	}
	rc, err := s.runStatus(ctx, rec.ID)
	if err != nil {
		return nil, err
	}
	if rc == nil {
		// Finalized meanwhile (its run then leaves the ledger)?
		var now batchRecord
		if err := getJSON(ctx, s.cfg.Store, batchKey(rec.ID), &now); err == nil && now.Final != nil {
			return s.view(ctx, &now)
		}
		o["status"], o["failed_at"] = statusFailed, s.now()
		o["errors"] = errorList([]batchError{{Code: "run_deleted", Message: fmt.Sprintf("the cluster holds no run %s (an operator deleted it)", rec.ID)}})
		return o, nil
	}
	o["request_counts"] = counts(rec.Total, rc.GetDone(), rc.GetDead())
	finished := runs.Finished(rc)
	if !finished && rec.ExpiredAt == 0 && s.now() >= rec.ExpiresAt {
		// The window passed: stop the run; what finished stays.
		if err := s.cancelRun(ctx, rec.ID); err != nil {
			return nil, err
		}
		rec.ExpiredAt = s.now()
		if err := s.putBatch(ctx, rec); err != nil {
			return nil, err
		}
		if rc, err = s.runStatus(ctx, rec.ID); err != nil || rc == nil {
			o["status"] = statusInProgress
			return o, err
		}
		finished = runs.Finished(rc)
	}
	switch {
	case finished:
		o["status"] = statusFinalizing
		o["finalizing_at"] = finalizingSince(rc, s.now())
		s.background(rec.ID, func(ctx context.Context) {
			if err := s.finalize(ctx, rec, rc); err != nil {
				s.log.Warn("finalizing a batch", "id", rec.ID, "error", err)
			}
		})
	case rc.GetCancelled() && rec.ExpiredAt == 0:
		o["status"] = statusCancelling
		if rec.CancellingAt == 0 {
			o["cancelling_at"] = s.now() // cancelled by an operator
		}
	default:
		o["status"] = statusInProgress
		if rc.GetUnservedModel() {
			// Not OpenAI's: the batch waits for a worker serving its
			// model (rollout-worker --models); it does not fail.
			o["waiting_for_model"] = rec.Model
		}
	}
	return o, nil
}

// finalizingSince is when a finished run's batch began finalizing: when
// the run finished, as the cluster says (now when it does not, or says a
// later time: its clock is ahead).
func finalizingSince(rc *rolloutv1.RunCounters, now int64) int64 {
	if f := rc.GetFinishedUnixMs() / 1000; f > 0 && f < now {
		return f
	}
	return now
}

func (s *Server) cancelRun(ctx context.Context, id string) error {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	if _, err := s.cfg.Cluster.CancelRun(cctx, &rolloutv1.CancelRunRequest{Run: id}); err != nil {
		return serverError(http.StatusServiceUnavailable, "cancelling batch %s on the cluster: %v", id, err)
	}
	return nil
}

func counts(total, completed, failed uint64) map[string]any {
	return map[string]any{"total": total, "completed": completed, "failed": failed}
}

func errorList(errs []batchError) map[string]any {
	if errs == nil {
		errs = []batchError{}
	}
	return map[string]any{"object": "list", "data": errs}
}

// baseObject is the batch object with what the record says.
func (s *Server) baseObject(rec *batchRecord) map[string]any {
	var errs any
	if len(rec.Errors) > 0 {
		errs = errorList(rec.Errors)
	}
	var meta any
	if rec.Metadata != nil {
		meta = rec.Metadata
	}
	opt := func(t int64) any {
		if t == 0 {
			return nil
		}
		return t
	}
	return map[string]any{
		"id":                rec.ID,
		"object":            "batch",
		"endpoint":          rec.Endpoint,
		"model":             nullable(rec.Model),
		"errors":            errs,
		"input_file_id":     rec.InputFileID,
		"completion_window": rec.CompletionWindow,
		"status":            rec.Status,
		"output_file_id":    nil,
		"error_file_id":     nil,
		"created_at":        rec.CreatedAt,
		"in_progress_at":    opt(rec.InProgressAt),
		"expires_at":        rec.ExpiresAt,
		"finalizing_at":     nil,
		"completed_at":      nil,
		"failed_at":         nil,
		"expired_at":        nil,
		"cancelling_at":     opt(rec.CancellingAt),
		"cancelled_at":      nil,
		"request_counts":    counts(rec.Total, 0, 0),
		"metadata":          meta,
	}
}

// derivedFileID is the id of a batch's output ("output") or error
// ("error") file: the same for every gateway that finalizes the batch.
func derivedFileID(batchID, which string) string {
	sum := blake3.Sum256([]byte(batchID + "/" + which))
	return "file-" + hex.EncodeToString(sum[:12])
}

// finalize writes the batch's output and error files from the run's items
// (one line per request: a Done item's response in the output file; a
// Dead item's error, and a request the run's cancel or expiry stopped, in
// the error file), then records them. Every byte comes from the ledger's
// results, so a second gateway finalizing at once writes the same files.
func (s *Server) finalize(ctx context.Context, rec *batchRecord, rc *rolloutv1.RunCounters) error {
	outcome, code, msg := statusCompleted, "", ""
	switch {
	case rec.ExpiredAt != 0:
		outcome, code, msg = statusExpired, codeExpired, "This request could not be executed before the completion window expired."
	case rc.GetCancelled():
		outcome, code, msg = statusCancelled, codeCancelled, "This request was not executed: the batch was cancelled."
	}
	finalizingAt := finalizingSince(rc, s.now())
	outID, errID := derivedFileID(rec.ID, "output"), derivedFileID(rec.ID, "error")
	out, err := newObjectFile(ctx, s, outID)
	if err != nil {
		return err
	}
	defer out.abort()
	errf, err := newObjectFile(ctx, s, errID)
	if err != nil {
		return err
	}
	defer errf.abort()
	reader := runs.WithStore(s.cfg.Cluster, s.cfg.Store, resultsCacheBytes)
	err = runs.Results(ctx, reader, rec.ID, runs.ResultsConfig{Timeout: s.cfg.CallTimeout}, func(it *rolloutv1.ResultItem) error {
		line, isErr := renderItem(it, code, msg)
		if isErr {
			return errf.line(line)
		}
		return out.line(line)
	})
	if err != nil {
		return fmt.Errorf("reading batch %s's results: %w", rec.ID, err)
	}
	// Done once the files are written: never before it began finalizing
	// (the cluster's clock may be ahead of the gateway's).
	doneAt := max(s.now(), finalizingAt)
	// The files are dated from the run's end where the cluster says when
	// that was, so that two gateways finalizing at once record the same
	// file (its listing entry is keyed by its date).
	filesAt := doneAt
	if rc.GetFinishedUnixMs() > 0 {
		filesAt = finalizingAt
	}
	final := &finalFiles{Status: outcome, FinalizingAt: finalizingAt, DoneAt: doneAt, Completed: out.lines, Failed: errf.lines}
	if out.lines > 0 {
		if err := out.commit(ctx, rec.Owner, "batch_"+rec.ID+"_output.jsonl", filesAt); err != nil {
			return err
		}
		final.OutputFileID = outID
	}
	if errf.lines > 0 {
		if err := errf.commit(ctx, rec.Owner, "batch_"+rec.ID+"_error.jsonl", filesAt); err != nil {
			return err
		}
		final.ErrorFileID = errID
	}
	rec.Final = final
	if err := s.putBatch(ctx, rec); err != nil {
		return err
	}
	s.log.Info("batch finalized", "id", rec.ID, "status", outcome, "completed", out.lines, "failed", errf.lines)
	if s.met != nil {
		s.met.finalized.WithLabelValues(outcome).Inc()
	}
	if err := s.cfg.Store.Delete(ctx, activeKey(rec.ID)); err != nil {
		s.log.Warn("removing a finalized batch from the active list", "id", rec.ID, "error", err)
	}
	if !s.cfg.KeepRuns {
		s.dropRun(ctx, rec.ID)
	}
	return nil
}

// dropRun deletes a finalized batch's run from the ledger and then its
// objects (inputs and results) from the store: the output and error files
// hold every result. A failure is logged; the run then stays (an operator
// may delete it, and rollout gc removes objects no run references).
func (s *Server) dropRun(ctx context.Context, id string) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	if _, err := s.cfg.Cluster.DeleteRun(cctx, &rolloutv1.DeleteRunRequest{Run: id}); err != nil && status.Code(err) != codes.NotFound {
		s.log.Warn("deleting a finalized batch's run from the ledger", "id", id, "error", err)
		return
	}
	if err := s.deleteRunObjects(ctx, id); err != nil {
		s.log.Warn("deleting a finalized batch's run objects", "id", id, "error", err)
	}
}

// deleteRunObjects removes the objects of batch id's run from the store:
// every incarnation of the run name on this cluster
// (clusters/CLUSTER/runs/ID/, the run was created by this gateway under a
// batch id no other batch has; a submit refused before its run was
// created leaves an incarnation the ledger never named) and the layout
// before cluster identities (runs/ID/). Nothing of another cluster.
func (s *Server) deleteRunObjects(ctx context.Context, id string) error {
	cluster, err := runs.ClusterID(ctx, s.cfg.Cluster, s.cfg.CallTimeout)
	if err != nil {
		return err
	}
	for _, p := range []string{storeurl.ClusterPrefix(cluster) + store.RunPrefix(id), store.RunPrefix(id)} {
		if _, err := s.cfg.Store.DeletePrefix(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// renderItem is an item's line: batch.RenderLine for a Done or Dead item;
// for one that did not run (cancelled, or still pending in an expired
// run), an error line with code and msg.
func renderItem(it *rolloutv1.ResultItem, code, msg string) ([]byte, bool) {
	fi, finished := runs.FinishedItem(it)
	if finished && it.GetState() != rolloutv1.ItemState_ITEM_STATE_CANCELLED {
		line, isErr, _ := batch.RenderLine(fi)
		return line, isErr
	}
	customID := ""
	if req, err := batch.ParseRequest(fi.Payload); err == nil {
		customID = req.CustomID
	}
	if code == "" {
		code, msg = codeCancelled, "This request was not executed."
	}
	return batch.OpenAIErrorLine(customID, fi.SampleID, code, msg), true
}

// objectFile is an output or error file being written to the store.
type objectFile struct {
	s     *Server
	id    string
	w     io.WriteCloser
	bw    *bufio.Writer
	cnt   *countWriter
	sum   *blake3.Hasher
	lines uint64
	done  bool
	stop  context.CancelFunc
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func newObjectFile(ctx context.Context, s *Server, id string) (*objectFile, error) {
	wctx, stop := context.WithCancel(ctx)
	w, err := s.cfg.Store.NewWriter(wctx, fileContentKey(id))
	if err != nil {
		stop()
		return nil, err
	}
	h := blake3.New(32, nil)
	cw := &countWriter{w: io.MultiWriter(w, h)}
	return &objectFile{s: s, id: id, w: w, cnt: cw, sum: h, bw: bufio.NewWriterSize(cw, 1<<16), stop: stop}, nil
}

func (f *objectFile) line(b []byte) error {
	f.lines++
	if _, err := f.bw.Write(b); err != nil {
		return err
	}
	return f.bw.WriteByte('\n')
}

// commit stores the bytes and then the file's metadata.
func (f *objectFile) commit(ctx context.Context, owner, name string, createdAt int64) error {
	if err := f.bw.Flush(); err != nil {
		return err
	}
	f.done = true
	err := f.w.Close()
	f.stop()
	if err != nil {
		return fmt.Errorf("storing %s: %w", f.id, err)
	}
	return f.s.putFile(ctx, &fileRecord{ID: f.id, Owner: owner, Bytes: f.cnt.n, CreatedAt: createdAt, Filename: name,
		Purpose: PurposeBatchOutput, Blake3: hex.EncodeToString(f.sum.Sum(nil))})
}

// abort drops an uncommitted file (nothing is stored).
func (f *objectFile) abort() {
	if f.done {
		return
	}
	f.done = true
	f.stop()
	_ = f.w.Close()
}

func (s *Server) getBatch(w http.ResponseWriter, r *http.Request) {
	rec, err := s.batch(r.Context(), ownerOf(r), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	obj, err := s.view(r.Context(), rec)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, obj)
}

func (s *Server) cancelBatch(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	rec, err := s.batch(ctx, ownerOf(r), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	switch {
	case rec.Final != nil || rec.Status == recFailed:
		outcome := statusFailed
		if rec.Final != nil {
			outcome = rec.Final.Status
		}
		writeError(w, &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: "invalid_status",
			Message: fmt.Sprintf("Cannot cancel a batch with status '%s'.", outcome)})
		return
	case rec.Status == recValidating:
		writeError(w, &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Code: "invalid_status",
			Message: "Cannot cancel a batch with status 'validating': its run is being submitted; cancel it once it is in_progress."})
		return
	}
	if err := s.cancelRun(ctx, rec.ID); err != nil {
		writeError(w, err)
		return
	}
	if rec.CancellingAt == 0 && rec.ExpiredAt == 0 {
		rec.CancellingAt = s.now()
		if err := s.putBatch(ctx, rec); err != nil {
			writeError(w, err)
			return
		}
	}
	obj, err := s.view(ctx, rec)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, obj)
}

func (s *Server) listBatches(w http.ResponseWriter, r *http.Request) {
	p, err := parseList(r, 20, 100)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, owner := r.Context(), ownerOf(r)
	recs := map[string]*batchRecord{}
	ids, more, err := s.listIDs(ctx, owner, "batches", p, func(id string) bool {
		rec, err := s.batch(ctx, owner, id)
		if err != nil {
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
		obj, err := s.view(ctx, recs[id])
		if err != nil {
			writeError(w, err)
			return
		}
		data = append(data, obj)
	}
	writeJSON(w, http.StatusOK, listObject(data, more))
}
