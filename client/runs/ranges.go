package runs

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/api/validate"
	"github.com/rollout/rollout/batch"
	"github.com/rollout/rollout/store"
)

// Range runs from the client's side: Submit records a run with a store as
// ranges (SubmitConfig.Layout), one ledger record per range chunk
// (store.RangeChunk), and the results walk (WriteFile, WriteDir) renders a
// range run's records index by index from the chunks and the range result
// objects (store.DecodeRangeResults).

// RangeSubmitter is what a range submit needs of a coordinator beyond
// Coordinator (*coordclient.Client implements it).
type RangeSubmitter interface {
	SubmitRanges(ctx context.Context, req *rolloutv1.SubmitRangesRequest) (*rolloutv1.SubmitRangesResponse, error)
}

// ErrSampleIDMismatch: a range result object holds, for an index, a sample
// id that is not the id of the run's input line at that index (another
// input, model or sampling than the run's, or a worker that computed it
// wrong). Nothing is written for the run.
var ErrSampleIDMismatch = errors.New("a result's sample id is not its input line's")

// isRangeRecord reports whether a Results record is a range run's: a
// range record stands for [index, index+count) of its chunk (count > 0);
// an item's count is 0.
func isRangeRecord(it *rolloutv1.ResultItem) bool { return it.GetCount() > 0 }

// chooseRanges decides whether Submit records the run as ranges. A run the
// ledger holds decides for itself (a run is ranges or items, never both);
// else cfg.Layout (DefaultLayout when LayoutDefault) for a run with a store,
// not in place, without invalid lines, when the coordinator can take
// ranges (for the default layout: when the cluster has SubmitRanges,
// clusterTakesRanges). An explicit LayoutRanges that cannot be honoured is
// an error.
func chooseRanges(ctx context.Context, c Coordinator, cfg SubmitConfig, rep *batch.InputReport, pre *preflight) (bool, error) {
	if cfg.Store == nil || cfg.InPlace {
		return false, nil // Validate refused an explicit LayoutRanges
	}
	_, canRanges := c.(RangeSubmitter)
	if pre != nil && pre.first != nil {
		ranged := isRangeRecord(pre.first)
		if ranged && !canRanges {
			return false, fmt.Errorf("%w: run %q is a range run and this client cannot submit ranges; nothing was submitted", ErrInvalidConfig, cfg.Run)
		}
		if ranged && rep.Invalid > 0 {
			return false, fmt.Errorf("%w: run %q is a range run, which cannot record invalid lines as failed items; fix the %d invalid line(s); nothing was submitted",
				ErrInvalidConfig, cfg.Run, rep.Invalid)
		}
		return ranged, nil
	}
	layout := cfg.Layout
	if layout == LayoutDefault {
		layout = DefaultLayout
	}
	if layout != LayoutRanges {
		return false, nil
	}
	explicit := cfg.Layout == LayoutRanges
	switch {
	case rep.Invalid > 0 && explicit:
		return false, fmt.Errorf("%w: a range run cannot record invalid lines as failed items (--skip-invalid): fix the %d invalid line(s) or submit as items; nothing was submitted",
			ErrInvalidConfig, rep.Invalid)
	case !canRanges && explicit:
		return false, fmt.Errorf("%w: LayoutRanges: this coordinator client cannot submit ranges; nothing was submitted", ErrInvalidConfig)
	case explicit:
		return true, nil
	case rep.Invalid > 0 || !canRanges:
		return false, nil
	}
	return clusterTakesRanges(ctx, c.(RangeSubmitter), cfg.Run, cfg.Timeout)
}

// clusterTakesRanges asks the cluster whether it takes SubmitRanges before
// a default-layout submit uploads a chunk: a request without ranges, which
// a cluster that has the call refuses at its edge (INVALID_ARGUMENT,
// nothing changed) and one that has not answers UNIMPLEMENTED (a test
// double, a cluster of an older version): the run is then items.
func clusterTakesRanges(ctx context.Context, c RangeSubmitter, run string, timeout time.Duration) (bool, error) {
	timeout = orDefault(timeout, DefaultTimeout)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := c.SubmitRanges(cctx, &rolloutv1.SubmitRangesRequest{Run: run})
	switch status.Code(err) {
	case codes.Unimplemented:
		return false, nil
	case codes.InvalidArgument, codes.OK:
		return true, nil
	}
	return false, callError("asking the cluster whether it takes range runs", timeout, err)
}

// submitRanges is Submit's range path: it streams the input (validated,
// total lines) into range chunks of at most cfg.ChunkItems lines and
// cfg.ChunkObjectBytes bytes (store.DefaultChunkBytes when 0, line index
// included; a longer line makes a chunk of its own; where the run already
// holds a chunk, cut as that chunk was: preflight.chunkEnd), checks each chunk
// against the run (preflight) and stores it under store.InputPrefix(run)
// before the ledger hears of it, and describes the stored chunks with
// SubmitRanges, as many chunks a request as max_items_per_request and the
// request bytes (cfg.ChunkBytes and max_request_bytes) allow. res.Chunks
// counts the range chunks.
func submitRanges(ctx context.Context, c RangeSubmitter, cfg SubmitConfig, lim validate.Limits, spec *rolloutv1.RunSpec,
	total uint64, pre *preflight, files []string, read batch.Config) (*SubmitResult, error) {
	co := c.(Coordinator)
	sc, err := batch.NewScanner(files, read)
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	res := &SubmitResult{}
	maxRanges := lim.MaxItemsPerRequest
	maxBytes := min(cfg.ChunkBytes, lim.MaxRequestBytes)
	maxLines := min(uint64(cfg.ChunkItems), 1<<32)
	maxObject := orDefaultInt(cfg.ChunkObjectBytes, store.DefaultChunkBytes)
	prefix := store.RunInputs(cfg.Run, spec.GetDataPrefix())
	req := &rolloutv1.SubmitRangesRequest{Run: cfg.Run, Spec: spec, RetryDead: cfg.RetryDead,
		StaleAfterMs: uint64(cfg.StaleAfter / time.Millisecond)}
	baseBytes := proto.Size(req)
	reqBytes := baseBytes
	var sent uint64 // indexes described to the ledger
	var uploaded, reused int
	var stored int64
	send := func() error {
		if len(req.Ranges) == 0 {
			return nil
		}
		first := req.Ranges[0].GetIndex()
		last := req.Ranges[len(req.Ranges)-1]
		lastIdx := last.GetIndex() + last.GetCount() - 1
		if err := lim.CheckRangesRequest(req); err != nil {
			return fmt.Errorf("chunks of items %d..%d do not pass the coordinator's checks: %w", first, lastIdx, err)
		}
		resp, err := submitRetrying(ctx, co, cfg.Run, req.Spec, cfg.Timeout, func(ctx context.Context) (*rolloutv1.SubmitRangesResponse, error) {
			return c.SubmitRanges(ctx, req)
		})
		if err != nil {
			what := fmt.Sprintf("submitting the chunks of items %d..%d", first, lastIdx)
			if res.Chunks > 0 {
				what += fmt.Sprintf(" (the first %d items were submitted; submit again to resume)", res.Items)
			}
			return callError(what, cfg.Timeout, err)
		}
		res.AddRanges(resp)
		res.Chunks += len(req.Ranges)
		for _, r := range req.Ranges {
			res.Items += r.GetCount()
		}
		req.Ranges, reqBytes = nil, baseBytes
		if cfg.Progress != nil {
			cfg.Progress(res.Items, total)
		}
		return nil
	}
	var ch store.RangeChunk
	// chunkFirst is the chunk's first index; bound, when > 0, the end of
	// the run's chunk there (a resubmit: preflight.chunkEnd).
	var chunkFirst, bound uint64
	flush := func() error {
		if ch.Lines() == 0 {
			return nil
		}
		data := ch.Bytes()
		n := uint64(ch.Lines())
		sum := store.Hash(data)
		key := prefix + hex.EncodeToString(sum[:])
		// Would the ledger take this chunk at these indexes? Asked before
		// a byte of it is stored.
		if err := pre.checkChunk(ctx, chunkFirst, n, key); err != nil {
			return err
		}
		got, _, up, err := cfg.Store.PutContent(ctx, prefix, data)
		if err != nil {
			return fmt.Errorf("storing the range chunk of items %d..%d (%d bytes): %w", chunkFirst, chunkFirst+n-1, len(data), err)
		}
		if up {
			uploaded++
		} else {
			reused++
		}
		stored += int64(len(data))
		r := &rolloutv1.InputRange{Index: chunkFirst, Count: n,
			PayloadRef: &rolloutv1.DataRef{Object: got, Offset: 0, Length: uint64(ch.DataLen())}}
		size := protowire.SizeTag(3) + protowire.SizeBytes(proto.Size(r))
		if len(req.Ranges) > 0 && (len(req.Ranges) >= maxRanges || reqBytes+size > maxBytes) {
			if err := send(); err != nil {
				return err
			}
		}
		req.Ranges = append(req.Ranges, r)
		reqBytes += size
		sent += n
		ch.Reset()
		return nil
	}
	for {
		rec, err := sc.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("input changed since it was validated: %w", err)
		}
		if rec.Err != nil {
			return nil, fmt.Errorf("input changed since it was validated: %w", rec.Err)
		}
		var full bool
		if bound > 0 {
			// A chunk the run holds: cut where it was cut.
			full = rec.Index >= bound
		} else {
			full = uint64(ch.Lines()) >= maxLines || ch.Size()+len(rec.Raw)+1+8 > maxObject
		}
		if ch.Lines() > 0 && (full || rec.Index != chunkFirst+uint64(ch.Lines())) {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		if ch.Lines() == 0 {
			chunkFirst = rec.Index
			if bound, err = pre.chunkEnd(ctx, chunkFirst); err != nil {
				return nil, err
			}
		}
		ch.Add(rec.Raw)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if err := send(); err != nil {
		return nil, err
	}
	if cfg.Chunks != nil {
		cfg.Chunks(uploaded, reused, stored)
	}
	if res.Items != total || sent != total {
		return nil, fmt.Errorf("input changed since it was validated: %d items then, %d now", total, res.Items)
	}
	return res, nil
}

// checkChunk refuses the range chunk key over the indexes [first,
// first+n) when the run holds other records there, as the ledger would: a
// record at one of the chunk's indexes must be the chunk's own (its first
// record at first, naming key). It reads one record, and nothing once a
// check found that the run holds nothing at or after a chunk's first
// index.
func (p *preflight) checkChunk(ctx context.Context, first, n uint64, key string) error {
	if p == nil || !p.overlap {
		return nil
	}
	seen := false
	err := resultsFrom(ctx, p.c, p.run, first, ResultsConfig{PageSize: 1, Timeout: p.timeout},
		func(it *rolloutv1.ResultItem) error {
			seen = true
			if it.GetIndex() >= first+n {
				return errStopWalk
			}
			if it.GetIndex() != first || !isRangeRecord(it) || it.GetBase() != first || it.GetPayloadRef().GetObject() != key {
				return fmt.Errorf("%w: run %q holds other records at items %d..%d (at index %d, object %q; this input's chunk is %q): the input, "+
					"or how it was cut into chunks, differs from the run's (submit it under another run name, or with the run's chunk settings); the chunk was not uploaded",
					ErrSubmitRefused, p.run, first, first+n-1, it.GetIndex(), it.GetPayloadRef().GetObject(), key)
			}
			return errStopWalk
		})
	switch {
	case errors.Is(err, errStopWalk), err == nil:
	case errors.Is(err, ErrRunNotFound):
		p.overlap = false // deleted meanwhile: the ledger decides
		return nil
	default:
		return err
	}
	if !seen {
		p.overlap = false
	}
	return nil
}

// chunkEnd is, when the run held a range chunk starting at first before
// this submit, where that chunk ends (0 otherwise): a resubmit cuts its
// input there again, whatever its chunk settings, so that the same lines
// make the same chunk (the same object) even when the input has more lines
// after them (a resume that appends lines, as for an item run). It reads
// the chunk's records (one call for an unsplit chunk), and nothing once the
// run is known to hold nothing from here on.
func (p *preflight) chunkEnd(ctx context.Context, first uint64) (uint64, error) {
	if p == nil || !p.overlap {
		return 0, nil
	}
	var end uint64
	err := resultsFrom(ctx, p.c, p.run, first, ResultsConfig{PageSize: 8, Timeout: p.timeout},
		func(it *rolloutv1.ResultItem) error {
			if !isRangeRecord(it) || it.GetBase() != first {
				return errStopWalk
			}
			end = it.GetIndex() + it.GetCount()
			return nil
		})
	switch {
	case errors.Is(err, errStopWalk), err == nil:
	case errors.Is(err, ErrRunNotFound):
		p.overlap = false // deleted meanwhile: the ledger decides
		return 0, nil
	default:
		return 0, err
	}
	return end, nil
}

// maxLinesParsed bounds the lines of a record parsed at once (their
// members and sample ids are held until rendered).
const maxLinesParsed = 1024

// rangeWalk renders a range run's records index by index, in index order.
// Each record (record) stands for [index, index+count) of the chunk its
// payload_ref names whole, whose first index is base (ResultItem.count and
// base). The objects a record needs, its input chunk and its result
// object, are each read whole once, checked against their recorded blake3
// (one hash over each object: readChunk, readResults) and kept while
// consecutive records name them; rendering takes a record's lines from the
// chunk's bytes it checked. The objects are read on the walk's goroutine
// (record), or ahead of it by an aheadWalk (step).
type rangeWalk struct {
	st       *store.Store
	model    string
	sampling batch.SamplingParams
	m        *Missing
	fn       func(fi batch.FinishedItem, unreadable bool) error
	// unfinished, when set, is called for each index of a Pending or
	// Running record, its record rec, with its input line and sample id
	// (lerr: the line cannot be read), instead of counting it in m.
	unfinished func(rec *rolloutv1.ResultItem, idx uint64, line []byte, sid [32]byte, lerr error) error
	// seen counts the indexes of the records rendered; end is where the
	// last one ended.
	seen, end uint64

	// The objects record read last: the next record that names the same
	// reuses them.
	chunk *chunkObject
	res   *resultObject
}

// chunkObject is an input chunk read whole and checked (readChunk).
type chunkObject struct {
	key     string
	dataLen uint64
	// lines are the chunk's lines (without their '\n'), sharing the bytes
	// the check read.
	lines [][]byte
	// err says why the chunk cannot be used (nil: it is the chunk
	// recorded).
	err error
}

// resultObject is a range result object read whole, checked against its
// recorded blake3 and decoded (readResults).
type resultObject struct {
	key     string
	sum     []byte
	results []store.RangeResult
	// err says why the object cannot be used.
	err error
}

func newRangeWalk(st *store.Store, model string, sp batch.SamplingParams, m *Missing, fn func(batch.FinishedItem, bool) error) *rangeWalk {
	return &rangeWalk{st: st, model: model, sampling: sp, m: m, fn: fn}
}

// fatal reports a store error that ends the walk (the store is
// unavailable, or the walk was cancelled) rather than making lines
// unreadable.
func fatal(ctx context.Context, err error) bool {
	return errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil
}

// needs says which objects rendering the record it takes: a done record
// its input chunk and its result object, a dead or cancelled one its
// chunk, an unfinished one its chunk only when the walk renders unfinished
// indexes (unfinished set). A record that names no chunk needs none.
func (w *rangeWalk) needs(it *rolloutv1.ResultItem) (chunk, result bool) {
	switch it.GetState() {
	case rolloutv1.ItemState_ITEM_STATE_DONE:
		chunk, result = true, true
	case rolloutv1.ItemState_ITEM_STATE_DEAD, rolloutv1.ItemState_ITEM_STATE_CANCELLED:
		chunk = true
	default:
		chunk = w.unfinished != nil
	}
	return chunk && it.GetPayloadRef().GetObject() != "", result
}

// isChunk reports whether c is the chunk pr names.
func (c *chunkObject) isChunk(pr *rolloutv1.DataRef) bool {
	return c != nil && sameChunk(&rolloutv1.DataRef{Object: c.key, Length: c.dataLen}, pr)
}

// isResults reports whether r is the result object ref names.
func (r *resultObject) isResults(ref *rolloutv1.DataRef) bool {
	return r != nil && sameResults(&rolloutv1.DataRef{Object: r.key, Blake3: r.sum}, ref)
}

// sameChunk reports whether the payload references a and b name the same
// chunk (its key and lines length).
func sameChunk(a, b *rolloutv1.DataRef) bool {
	return a.GetObject() == b.GetObject() && a.GetLength() == b.GetLength()
}

// sameResults reports whether the result references a and b name the same
// result object (its key, not empty, and its recorded blake3).
func sameResults(a, b *rolloutv1.DataRef) bool {
	return a.GetObject() != "" && a.GetObject() == b.GetObject() && string(a.GetBlake3()) == string(b.GetBlake3())
}

// record renders the range record it: the indexes [index, index+count) of
// the chunk starting at base, reading the objects it needs unless the
// previous record read them.
func (w *rangeWalk) record(ctx context.Context, it *rolloutv1.ResultItem) error {
	needChunk, needRes := w.needs(it)
	var chunk *chunkObject
	var res *resultObject
	if needRes {
		if ref := it.GetResultRef(); !w.res.isResults(ref) {
			w.res = readResults(ctx, w.st, ref)
		}
		res = w.res
	}
	if needChunk {
		if pr := it.GetPayloadRef(); !w.chunk.isChunk(pr) {
			w.chunk = readChunk(ctx, w.st, pr)
		}
		chunk = w.chunk
	}
	return w.step(ctx, it, chunk, res)
}

// step renders the record it with the objects it needs (needs): chunk and
// res, nil when it needs none.
func (w *rangeWalk) step(ctx context.Context, it *rolloutv1.ResultItem, chunk *chunkObject, res *resultObject) error {
	lo, n, base := it.GetIndex(), it.GetCount(), it.GetBase()
	switch {
	case n == 0:
		return fmt.Errorf("record at index %d of a range run is not a range (count 0, id %x)", lo, it.GetId())
	case lo+n < lo:
		return fmt.Errorf("range record at index %d: count %d overflows", lo, n)
	case base > lo:
		return fmt.Errorf("range record at index %d: its chunk starts at %d, after it", lo, base)
	case w.seen > 0 && lo < w.end:
		return fmt.Errorf("range records overlap: the record at index %d starts before the previous one ends (%d)", lo, w.end)
	}
	hi := lo + n
	w.seen += n
	w.end = hi
	finished := false
	switch it.GetState() {
	case rolloutv1.ItemState_ITEM_STATE_DONE, rolloutv1.ItemState_ITEM_STATE_DEAD, rolloutv1.ItemState_ITEM_STATE_CANCELLED:
		finished = true
	case rolloutv1.ItemState_ITEM_STATE_RUNNING:
		if w.unfinished == nil {
			w.m.Running += n
			return nil
		}
	default:
		if w.unfinished == nil {
			w.m.Pending += n
			return nil
		}
	}
	fi0, _ := FinishedItem(it)
	if res != nil && res.err != nil && fatal(ctx, res.err) {
		return fmt.Errorf("item %d: %w", lo, res.err)
	}
	pr := it.GetPayloadRef()
	var cerr error
	if chunk != nil {
		cerr = chunk.err
	}
	if cerr != nil && fatal(ctx, cerr) {
		return fmt.Errorf("items %d..%d: %w", lo, hi-1, cerr)
	}
	for a := lo; a < hi; a += min(hi-a, maxLinesParsed) {
		k := min(hi-a, maxLinesParsed)
		var lines [][]byte
		var lerr error
		switch {
		case pr.GetObject() == "":
			lerr = fmt.Errorf("%w: the ledger recorded no input chunk for items %d..%d", store.ErrBadRangeObject, lo, hi-1)
		case cerr != nil:
			lerr = cerr
		case chunk == nil:
			lerr = fmt.Errorf("items %d..%d: their input chunk %q was not read", a, a+k-1, pr.GetObject())
		case a-base+k > uint64(len(chunk.lines)):
			lerr = fmt.Errorf("%w: chunk %s holds %d lines; items %d..%d are its lines %d..%d", store.ErrBadRangeObject,
				chunk.key, len(chunk.lines), a, a+k-1, a-base, a-base+k-1)
		default:
			lines = chunk.lines[a-base : a-base+k]
		}
		var parsed []parsedLine
		if lerr == nil {
			parsed = parseLines(lines, w.model, w.sampling, a)
		}
		for j := uint64(0); j < k; j++ {
			var err error
			if finished {
				err = w.index(fi0, a+j, parsed, j, lerr, res)
			} else {
				var line []byte
				var sid [32]byte
				if lerr == nil {
					line, sid = lines[j], parsed[j].sid
				}
				err = w.unfinished(it, a+j, line, sid, lerr)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// parsedLine is an input line parsed once (batch.ParseInput) with its
// sample id.
type parsedLine struct {
	line []byte
	in   *batch.Input
	sid  [32]byte
}

// parseLinesSerial is how many lines parseLines parses without spreading
// them over goroutines.
const parseLinesSerial = 128

// parseLines parses lines, the input lines of the indexes first,
// first+1, ..., and computes their sample ids (model, sp): parsing and
// hashing are most of a results walk's work besides rendering, so a block
// of lines is split over GOMAXPROCS goroutines.
func parseLines(lines [][]byte, model string, sp batch.SamplingParams, first uint64) []parsedLine {
	out := make([]parsedLine, len(lines))
	do := func(from, to int) {
		for j := from; j < to; j++ {
			in := batch.ParseInputShared(lines[j]) // the chunk's bytes, held until rendered
			out[j] = parsedLine{line: lines[j], in: in, sid: in.SampleID(model, sp, first+uint64(j))}
		}
	}
	parts := min(runtime.GOMAXPROCS(0), len(lines)/parseLinesSerial)
	if parts <= 1 {
		do(0, len(lines))
		return out
	}
	var wg sync.WaitGroup
	for p := range parts {
		from, to := p*len(lines)/parts, (p+1)*len(lines)/parts
		wg.Go(func() { do(from, to) })
	}
	wg.Wait()
	return out
}

// readChunk reads the input chunk pr names whole, once, and checks it
// (store.CheckRangeChunk: its line index, and its blake3 against the
// reference's or the one its content-addressed key names), so that no line
// of a chunk changed after submit is rendered as the item's input; the
// lines rendered are the bytes checked. A chunk that cannot be used has
// err set.
func readChunk(ctx context.Context, st store.RangeReader, pr *rolloutv1.DataRef) *chunkObject {
	c := &chunkObject{key: pr.GetObject(), dataLen: pr.GetLength()}
	var sum *store.Sum
	if b := pr.GetBlake3(); len(b) == len(store.Sum{}) {
		s := store.Sum(b)
		sum = &s
	} else if s, ok := store.KeySum(pr.GetObject()); ok {
		sum = &s
	}
	kept := &keptReads{r: st, dataLen: int64(c.dataLen)}
	n, err := store.CheckRangeChunk(ctx, kept, c.key, c.dataLen, sum)
	if err != nil {
		c.err = err
		return c
	}
	if uint64(len(kept.data)) != c.dataLen || uint64(len(kept.idx)) != 8*(n+1) {
		// The check read the chunk otherwise than keptReads expects:
		// read its lines again.
		c.lines, c.err = store.ReadChunkLines(ctx, st, c.key, c.dataLen, 0, n)
		return c
	}
	c.lines = make([][]byte, n)
	start := binary.BigEndian.Uint64(kept.idx)
	for k := range c.lines {
		// The check found every offset at the start of its line.
		next := binary.BigEndian.Uint64(kept.idx[8*(k+1):])
		c.lines[k] = kept.data[start : next-1 : next-1]
		start = next
	}
	return c
}

// keptReads is a store.RangeReader that keeps the bytes
// store.CheckRangeChunk reads of a chunk whose lines part is dataLen
// bytes: the lines (read from offset 0) and the line index (read at
// dataLen).
type keptReads struct {
	r         store.RangeReader
	dataLen   int64
	data, idx []byte
}

func (k *keptReads) ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	b, err := k.r.ReadRange(ctx, key, off, n)
	if err == nil {
		switch off {
		case 0:
			k.data = b
		case k.dataLen:
			k.idx = b
		}
	}
	return b, err
}

// maxRangedResultRead bounds the result object readResults reads with one
// ranged read of its recorded length, a buffer of that length made first
// (a longer one is read whole, its buffer the size the store reports, as
// any object whose reference gives an offset or no length).
const maxRangedResultRead = 64 << 20

// readResults reads the result object ref names, once, checks it whole
// against the recorded blake3 and decodes it
// (store.DecodeRangeResultsHashed: its results are not hashed again). An
// object that cannot be used has err set.
func readResults(ctx context.Context, st *store.Store, ref *rolloutv1.DataRef) *resultObject {
	r := &resultObject{key: ref.GetObject(), sum: ref.GetBlake3()}
	if r.key == "" {
		r.err = errors.New("the ledger recorded no result object")
		return r
	}
	var data []byte
	var err error
	off, n := ref.GetOffset(), ref.GetLength()
	if off == 0 && n > 0 && n <= maxRangedResultRead {
		// Exactly the bytes recorded; an object that cannot be read so
		// (missing, shorter) is read whole, to say what is wrong with it
		// as a walk always has.
		data, err = st.ReadRange(ctx, r.key, 0, int64(n))
		if err != nil && !fatal(ctx, err) {
			data, err = st.ReadAll(ctx, r.key)
		}
	} else {
		data, err = st.ReadAll(ctx, r.key)
	}
	if err != nil {
		r.err = err
		return r
	}
	if off != 0 || (n != 0 && n != uint64(len(data))) {
		if off > uint64(len(data)) || n > uint64(len(data))-off {
			r.err = fmt.Errorf("%w: %q has %d bytes, the reference asks for %d at offset %d", store.ErrShortObject, r.key, len(data), n, off)
			return r
		}
		data = data[off : off+n]
	}
	if len(r.sum) == 0 {
		r.err = fmt.Errorf("%w: the ledger recorded no blake3 for %q: its bytes cannot be checked", store.ErrHashMismatch, r.key)
		return r
	}
	if h := store.Hash(data); string(h[:]) != string(r.sum) {
		r.err = fmt.Errorf("%w: %q (%d bytes) does not match the blake3 the ledger recorded", store.ErrHashMismatch, r.key, len(data))
		return r
	}
	r.results, r.err = store.DecodeRangeResultsHashed(data)
	if r.err != nil {
		r.err = fmt.Errorf("result object %q: %w", r.key, r.err)
	}
	return r
}

// index renders the index idx of a finished record (fi0 its state), whose
// input line is parsed[k] (lerr: the lines cannot be read) and whose
// result object, when done, is res.
func (w *rangeWalk) index(fi0 batch.FinishedItem, idx uint64, parsed []parsedLine, k uint64, lerr error, res *resultObject) error {
	if lerr != nil {
		// Without its input line the item cannot be rendered as itself:
		// say why, in a line of its own (as the item path does).
		w.m.Unreadable++
		return w.fn(batch.FinishedItem{Index: idx, Payload: []byte(`{}`), Reason: fmt.Sprintf("input bytes unreadable: %v", lerr)}, true)
	}
	pl := parsed[k]
	sid := pl.sid
	fi := batch.FinishedItem{Index: idx, ID: append([]byte{}, sid[:]...), SampleID: sid, Payload: pl.line,
		Reason: fi0.Reason, Cancelled: fi0.Cancelled, Parsed: pl.in}
	if !fi0.Done {
		return w.fn(fi, false)
	}
	if res == nil {
		res = &resultObject{err: errors.New("the result object was not read")}
	}
	if res.err != nil {
		w.m.Unreadable++
		fi.Reason = fmt.Sprintf("result bytes unreadable: %v", res.err)
		return w.fn(fi, true)
	}
	r, ok := res.result(idx)
	if !ok {
		w.m.Unreadable++
		fi.Reason = fmt.Sprintf("result bytes unreadable: %v: result object %q holds no result for index %d", store.ErrBadRangeObject, res.key, idx)
		return w.fn(fi, true)
	}
	if r.SampleID != sid {
		return fmt.Errorf("%w: index %d: result object %q holds sample id %x, the input line's is %x (model %q, sampling %s): "+
			"the result is not this line's, or the run's model or sampling is not the one given (the ledger records the run's own)",
			ErrSampleIDMismatch, idx, res.key, r.SampleID, sid, w.model, w.sampling.JSON())
	}
	fi.Done, fi.Result, fi.Reason = true, r.Result, ""
	return w.fn(fi, false)
}

// result finds idx in the object's results.
func (r *resultObject) result(idx uint64) (store.RangeResult, bool) {
	rs := r.results
	lo, hi := 0, len(rs)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if rs[mid].Index < idx {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(rs) && rs[lo].Index == idx {
		return rs[lo], true
	}
	return store.RangeResult{}, false
}

// runStatusReader is a reader that can also read a run's status.
type runStatusReader interface {
	RunStatus(ctx context.Context, req *rolloutv1.RunStatusRequest) (*rolloutv1.RunStatusResponse, error)
}

// rangeParams is the model and sampling a range run's sample ids are
// computed with: cfg's when it gives a sampling; else the run's as the
// ledger records them (RunCounters.model and sampling; cfg.Model when
// set), read with RunStatus when c has it; else cfg.Model and the default
// sampling.
func rangeParams(ctx context.Context, c ResultsReader, run string, cfg ResultsConfig) (string, batch.SamplingParams, error) {
	if cfg.Sampling != nil {
		return cfg.Model, *cfg.Sampling, nil
	}
	sr, ok := c.(runStatusReader)
	if !ok {
		return cfg.Model, batch.DefaultSamplingParams(), nil
	}
	rc, err := runCounters(ctx, sr, run, cfg.Timeout)
	if err != nil {
		return "", batch.SamplingParams{}, err
	}
	return runParams(rc, cfg.Model)
}

// runParams is the model (model when set) and sampling that rc records.
func runParams(rc *rolloutv1.RunCounters, model string) (string, batch.SamplingParams, error) {
	sp, err := batch.ParseSamplingJSON(rc.GetSampling())
	if err != nil {
		return "", batch.SamplingParams{}, fmt.Errorf("run %q: the sampling the ledger records cannot be read: %w", rc.GetName(), err)
	}
	if model == "" {
		model = rc.GetModel()
	}
	return model, sp, nil
}

// runCounters reads the counters of run (Status with a reader that only
// has RunStatus).
func runCounters(ctx context.Context, c runStatusReader, run string, timeout time.Duration) (*rolloutv1.RunCounters, error) {
	timeout = orDefault(timeout, DefaultTimeout)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.RunStatus(cctx, &rolloutv1.RunStatusRequest{Run: run})
	if isNotFound(err) {
		return nil, newNotFound(run, err)
	}
	if err != nil {
		return nil, callError("reading run status", timeout, err)
	}
	rc := findRun(resp, run)
	if rc == nil {
		return nil, newNotFound(run, nil)
	}
	return rc, nil
}
