package batch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"runtime"
	"sync"
)

// ScanBlockBytes is about how much of an input one Block holds: whole
// lines, read at once (a longer line makes a longer block).
const ScanBlockBytes = 256 << 10

// Block is a run of consecutive non-blank lines of one input, as
// ScanBlocks yields them.
type Block struct {
	// Records are the block's non-blank lines, valid or not, in input
	// order, each as Scanner.Next returns it (Index and Line over all the
	// input). Their Raw share one buffer, which belongs to the Block and is
	// never reused: a Block may be kept.
	Records []Record
	// Lines counts the block's physical lines; Blank of them were blank.
	Lines, Blank int
	// Bytes is how many input bytes the block holds (what keeping it
	// costs); Sum is their CRC-32C (Castagnoli), so that a second read of
	// the input can tell the same block from a changed one.
	Bytes int
	Sum   uint32
}

// ScanBlocks reads files in order (cfg.Open, or os.Open) in blocks of
// whole lines of about ScanBlockBytes, parses each block's lines on
// workers goroutines (0: GOMAXPROCS) and calls yield with each Block in
// input order, from the calling goroutine: the records are those a Scanner
// over files returns, Raw included. Each input byte is read once; at most
// a few blocks per worker are held besides those yield keeps.
//
// It returns nil at the end of the input, or the first error: a bad
// Config, a file that cannot be opened or read (the blocks before it were
// yielded, as a Scanner would have returned their records), ctx ending, or
// yield's error. Every goroutine it starts has ended when it returns.
func ScanBlocks(ctx context.Context, files []string, cfg Config, workers int, yield func(*Block) error) error {
	return scanBlocks(ctx, files, cfg, workers, ScanBlockBytes, parseFull, yield)
}

// CheckBlocks is ScanBlocks for a validation pass: each record's Request
// holds only its Format (no prompt or body is copied out of the line);
// everything else is as ScanBlocks gives it, Err included.
func CheckBlocks(ctx context.Context, files []string, cfg Config, workers int, yield func(*Block) error) error {
	return scanBlocks(ctx, files, cfg, workers, ScanBlockBytes, parseFormat, yield)
}

// How scanBlocks parses a block's lines.
type parseMode int

const (
	parseFull   parseMode = iota // ScanBlocks
	parseFormat                  // CheckBlocks
	parseNone                    // ScanLines
)

// ScanLines is ScanBlocks without parsing: for an input already validated
// (its blocks' Sums known), each record has Index, File, Line, Offset and
// Raw (the line trimmed of white space) but no Request, and no Err but for
// a line longer than MaxLineBytes. The blocks are cut as ScanBlocks cuts
// the same bytes, so that their Sums can be compared. Unlike ScanBlocks',
// a Block and its records' Raw are valid only until yield returns: their
// buffer is read into again.
func ScanLines(ctx context.Context, files []string, cfg Config, workers int, yield func(*Block) error) error {
	return scanBlocks(ctx, files, cfg, workers, ScanBlockBytes, parseNone, yield)
}

// scanBlocks is ScanBlocks, CheckBlocks or ScanLines (parse) reading
// blockBytes at a time.
func scanBlocks(ctx context.Context, files []string, cfg Config, workers, blockBytes int, parse parseMode, yield func(*Block) error) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("%w: no input files", ErrNoInput)
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel: every goroutine is gone on return
	defer cancel()
	work := make(chan *blockJob, 2*workers)
	ordered := make(chan *blockJob, 2*workers+1)
	// free takes back, from ScanLines, the buffers of blocks yielded (the
	// reader reads into them again); nil for ScanBlocks, whose blocks may
	// be kept.
	var free chan []byte
	if parse == parseNone {
		free = make(chan []byte, 2)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(work)
		defer close(ordered)
		r := blockReader{ctx: ctx, cfg: cfg, blockBytes: max(blockBytes, 1), work: work, ordered: ordered, free: free}
		for _, name := range files {
			if !r.file(name) {
				return
			}
		}
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				if ctx.Err() == nil {
					j.parse(cfg, parse)
				}
				close(j.done)
			}
		}()
	}
	var index uint64
	var fileLines int // lines of the current file before the next block
	for j := range ordered {
		select {
		case <-j.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if j.err != nil {
			return j.err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if j.first {
			fileLines = 0
		}
		b := &j.block
		for k := range b.Records {
			rec := &b.Records[k]
			rec.Index = index
			index++
			rec.Line += fileLines
			if rec.Err != nil {
				rec.Err.Line = rec.Line
			}
		}
		fileLines += b.Lines
		if err := yield(b); err != nil {
			return err
		}
		if free != nil && j.buf != nil {
			select {
			case free <- j.buf:
			default:
			}
		}
	}
	return ctx.Err()
}

// blockJob is one block on its way: read, then parsed by a worker (done
// closed), then yielded in order.
type blockJob struct {
	file  string
	data  []byte // whole lines; only a file's last may lack its '\n'
	buf   []byte // the buffer data starts, to be read into again (ScanLines)
	off   int64  // where data starts in the file
	first bool   // data starts at the file's first byte
	// tooLong: the block is one line longer than MaxLineBytes, not kept.
	tooLong bool
	// err is the read error the input stops at (no data).
	err   error
	block Block
	done  chan struct{}
}

// parse fills j.block with the records of j's lines, numbered from 1
// within the block (ScanBlocks adds the lines before it), as
// lineReader.next and Scanner.Next see them, parsed as mode says.
func (j *blockJob) parse(cfg Config, mode parseMode) {
	b := &j.block
	b.Bytes = len(j.data)
	b.Sum = crc32.Checksum(j.data, crc32.MakeTable(crc32.Castagnoli)) // the table is made once
	if j.tooLong {
		b.Lines = 1
		rec, _ := recordOf(nil, true, j.file, 1, j.off, cfg, false, false)
		b.Records = []Record{rec}
		return
	}
	data := j.data
	b.Records = make([]Record, 0, bytes.Count(data, []byte{'\n'})+1)
	for pos := 0; pos < len(data); {
		end := bytes.IndexByte(data[pos:], '\n')
		next := len(data)
		if end < 0 {
			end = len(data)
		} else {
			end += pos
			next = end + 1
		}
		line := data[pos:end:end]
		b.Lines++
		lineOff := j.off + int64(pos)
		// As lineReader: a line is too long when it is, without one
		// trailing '\r', longer than MaxLineBytes (its byte order mark
		// counted); the mark is dropped from the file's first line.
		tooLong := len(bytes.TrimSuffix(line, []byte("\r"))) > cfg.MaxLineBytes
		if !tooLong && j.first && b.Lines == 1 && bytes.HasPrefix(line, []byte("\xef\xbb\xbf")) {
			line = line[3:]
			lineOff += 3
		}
		if tooLong {
			line = nil
		}
		var rec Record
		var blank bool
		if mode != parseNone || tooLong {
			rec, blank = recordOf(line, tooLong, j.file, b.Lines, lineOff, cfg, false, mode == parseFormat)
		} else {
			rec, blank = lineOf(line, j.file, b.Lines, lineOff)
		}
		pos = next
		if blank {
			b.Blank++
			continue
		}
		rec.Raw = rec.Raw[:len(rec.Raw):len(rec.Raw)]
		b.Records = append(b.Records, rec)
	}
}

// lineOf is recordOf without parsing (ScanLines).
func lineOf(raw []byte, file string, lineNo int, lineOff int64) (Record, bool) {
	obj := bytes.Trim(raw, jsonSpace)
	if len(obj) == 0 {
		return Record{}, true
	}
	return Record{File: file, Line: lineNo, Raw: obj, Offset: lineOff + int64(cap(raw)-cap(obj))}, false
}

// blockReader cuts the files into blockJobs, sent to the workers and, in
// order, to ScanBlocks.
type blockReader struct {
	ctx           context.Context
	cfg           Config
	blockBytes    int
	free          <-chan []byte // buffers to read into again, or nil
	work, ordered chan<- *blockJob
}

// send hands j to a worker and to the ordered queue; false when ctx ended.
func (r *blockReader) send(j *blockJob) bool {
	j.done = make(chan struct{})
	for _, ch := range []chan<- *blockJob{r.work, r.ordered} {
		select {
		case ch <- j:
		case <-r.ctx.Done():
			if ch == r.ordered {
				// A worker has j: wait for it so no one leaks.
				<-j.done
			}
			return false
		}
	}
	return true
}

// buffer returns a buffer of at least n bytes: one given back (free) when
// it is large enough, else a new one.
func (r *blockReader) buffer(n int) []byte {
	select {
	case b := <-r.free:
		if cap(b) >= n {
			return b[:cap(b)]
		}
	default:
	}
	return make([]byte, n)
}

// fail sends err as the input's last block; it returns false.
func (r *blockReader) fail(err error) bool {
	j := &blockJob{err: err, done: make(chan struct{})}
	close(j.done)
	select {
	case r.ordered <- j:
	case <-r.ctx.Done():
	}
	return false
}

// file cuts one input into blocks; false when the scan stops (an error,
// sent as a block, or ctx ending).
func (r *blockReader) file(name string) bool {
	open := r.cfg.Open
	if open == nil {
		open = func(name string) (io.ReadCloser, error) { return os.Open(name) }
	}
	f, err := open(name)
	if err != nil {
		return r.fail(fmt.Errorf("batch: input: %w", err))
	}
	defer f.Close()
	var pending []byte // read, not yet sent: part of one line
	var off int64      // where pending starts in the file
	first := true
	skipping := false // in a line too long to keep: drop to its '\n'
	limit := r.cfg.MaxLineBytes + 2
	for eof := false; !eof; {
		if err := r.ctx.Err(); err != nil {
			return false
		}
		n := len(pending) + max(r.blockBytes, len(pending))
		// Exactly n bytes are read (a buffer given back may be larger):
		// the blocks are cut alike whatever buffers they are read into.
		buf := r.buffer(n)[:len(pending):n]
		// pending may lie in buf itself (the end of the last block's
		// buffer, given back): copy moves it to the start, overlapping or
		// not.
		copy(buf, pending)
		got, err := io.ReadFull(f, buf[len(pending):cap(buf)])
		var readErr error // sent after the whole lines read before it
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			eof = true
		case err != nil:
			readErr = fmt.Errorf("batch: reading %s: %w", name, err)
		}
		pending = buf[:len(pending)+got]
		if skipping {
			i := bytes.IndexByte(pending, '\n')
			if i < 0 {
				off += int64(len(pending))
				pending = nil
				if readErr != nil {
					return r.fail(readErr)
				}
				continue
			}
			off += int64(i + 1)
			pending, skipping = pending[i+1:], false
		}
		cut := bytes.LastIndexByte(pending, '\n') + 1
		if eof {
			cut = len(pending)
		}
		if cut > 0 {
			if !r.send(&blockJob{file: name, data: pending[:cut:cut], buf: buf[:0:cap(buf)], off: off, first: first}) {
				return false
			}
			first = false
			off += int64(cut)
			pending = pending[cut:]
		}
		if readErr != nil {
			return r.fail(readErr)
		}
		if !eof && len(pending) > limit {
			// A line longer than any accepted one: report it, keep none
			// of it.
			if !r.send(&blockJob{file: name, off: off, first: first, tooLong: true}) {
				return false
			}
			first, skipping = false, true
			off += int64(len(pending))
			pending = nil
		}
	}
	return true
}
