package batch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
)

const (
	// DefaultMaxLineBytes is the default bound on one input line (16 MiB).
	DefaultMaxLineBytes = 16 << 20
	// DefaultMaxReportedErrors is how many invalid lines a validation pass
	// keeps by default; the rest are only counted.
	DefaultMaxReportedErrors = 100

	// readBufferSize is the bufio buffer of a Reader; longer lines are
	// assembled from several reads.
	readBufferSize = 64 << 10
)

// Config bounds input reading.
type Config struct {
	// MaxLineBytes is the longest accepted line, not counting its line
	// ending. A longer line is reported as invalid (and skipped), never
	// loaded whole.
	MaxLineBytes int
	// MaxReportedErrors is how many *LineError a ValidationReport keeps;
	// further invalid lines are only counted.
	MaxReportedErrors int
	// MaxItemBytes, when positive, is the coordinator's per-item limit
	// (validate.Limits.MaxPayloadBytes): a Scanner reports a line whose JSON
	// object is longer as invalid ("exceeds the per-item limit"), so that
	// such input is refused before anything is submitted.
	MaxItemBytes int
	// Open, when set, opens an input by name instead of os.Open (an object
	// of a store, say: see client/runs). A Scanner calls it once per input.
	Open func(name string) (io.ReadCloser, error)
}

// DefaultConfig returns MaxLineBytes 16 MiB and MaxReportedErrors 100.
func DefaultConfig() Config {
	return Config{MaxLineBytes: DefaultMaxLineBytes, MaxReportedErrors: DefaultMaxReportedErrors}
}

// Validate names every bad field (errors.Is ErrInvalidConfig).
func (c Config) Validate() error {
	var errs []error
	if c.MaxLineBytes <= 0 {
		errs = append(errs, fmt.Errorf("MaxLineBytes must be positive, got %d", c.MaxLineBytes))
	}
	if c.MaxItemBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxItemBytes must not be negative, got %d", c.MaxItemBytes))
	}
	if c.MaxReportedErrors < 0 {
		errs = append(errs, fmt.Errorf("MaxReportedErrors must not be negative, got %d", c.MaxReportedErrors))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// Line is one valid input line.
type Line struct {
	// Index is the 0-based position of the line among the valid lines of
	// the file (blank lines take no index).
	Index uint64
	// Prompt is the value of the line's "prompt" field.
	Prompt string
	// Raw is the JSON object verbatim, trimmed of surrounding whitespace.
	// It is owned by the Line (not reused by the Reader).
	Raw []byte
	// File and LineNo (1-based, counting every physical line) locate it.
	File   string
	LineNo int
}

// LineError is an invalid input line. It matches ErrInvalidLine.
type LineError struct {
	File   string
	Line   int
	Reason string
}

// Error returns "file:line: reason".
func (e *LineError) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidLine) hold.
func (e *LineError) Unwrap() error { return ErrInvalidLine }

// lineReader splits an input into physical lines, holding at most one line
// (bounded by maxLen) in memory. It is shared by Reader and Scanner.
type lineReader struct {
	br     *bufio.Reader
	file   string
	maxLen int
	buf    []byte
	lineNo int
	eof    bool
	// pos is the offset in the input of the next unread byte; lineOff is
	// the offset of the line next returned last (after a byte order mark).
	pos, lineOff int64
}

func newLineReader(r io.Reader, file string, maxLen int) lineReader {
	return lineReader{br: bufio.NewReaderSize(r, readBufferSize), file: file, maxLen: maxLen}
}

// next returns the next physical line, counting it in lineNo, without its
// line ending's '\n' (a trailing '\r' stays; callers trim it as whitespace)
// and without a UTF-8 byte order mark at the start of the input. A line
// longer than maxLen is consumed without being kept and reported with
// tooLong. The returned slice is reused by the next call. At the end of the
// input it returns io.EOF; any other error is a read error.
func (r *lineReader) next() (line []byte, tooLong bool, err error) {
	start := r.pos
	raw, tooLong, err := r.readLine()
	if err != nil {
		return nil, false, err
	}
	r.lineNo++
	r.lineOff = start
	if r.lineNo == 1 && bytes.HasPrefix(raw, []byte("\xef\xbb\xbf")) {
		raw = raw[3:] // UTF-8 byte order mark
		r.lineOff += 3
	}
	return raw, tooLong, nil
}

// Reader streams the valid lines of a JSONL input. It holds at most one line
// (bounded by Config.MaxLineBytes) in memory. A Reader is not safe for
// concurrent use.
type Reader struct {
	lineReader
	next  uint64
	blank int
	err   error // sticky read error
}

// NewReader returns a Reader over r; file names the input in errors.
func NewReader(r io.Reader, file string, cfg Config) (*Reader, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: nil io.Reader", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Reader{lineReader: newLineReader(r, file, cfg.MaxLineBytes)}, nil
}

// Next returns the next valid line. Blank lines are skipped. At the end of
// the input it returns io.EOF. An invalid line (including one longer than
// MaxLineBytes) is returned as a *LineError; it takes no index and the Reader
// stays usable, so a caller may go on to find every invalid line. Any other
// error is a read error of the underlying io.Reader; it is sticky.
func (r *Reader) Next() (Line, error) {
	for {
		if r.err != nil {
			return Line{}, r.err
		}
		raw, tooLong, err := r.lineReader.next()
		if err != nil {
			r.err = err
			return Line{}, err
		}
		if tooLong {
			return Line{}, &LineError{File: r.file, Line: r.lineNo,
				Reason: fmt.Sprintf("line is longer than the limit of %d bytes", r.maxLen)}
		}
		if len(bytes.Trim(raw, jsonSpace)) == 0 {
			r.blank++
			continue
		}
		prompt, obj, err := parseLine(raw)
		if err != nil {
			return Line{}, &LineError{File: r.file, Line: r.lineNo, Reason: err.Error()}
		}
		l := Line{Index: r.next, Prompt: prompt, Raw: bytes.Clone(obj), File: r.file, LineNo: r.lineNo}
		r.next++
		return l, nil
	}
}

// readLine returns the next physical line without its '\n' (a trailing
// '\r' stays; it is trimmed as whitespace). A line longer than maxLen is
// consumed to its end without being kept, and reported with tooLong.
// It returns io.EOF only when no bytes are left.
func (r *lineReader) readLine() (line []byte, tooLong bool, err error) {
	if r.eof {
		return nil, false, io.EOF
	}
	r.buf = r.buf[:0]
	// A line of exactly maxLen bytes may carry "\r\n"; keep up to maxLen+2
	// bytes and decide once the line is complete.
	limit := r.maxLen + 2
	for {
		chunk, err := r.br.ReadSlice('\n')
		r.pos += int64(len(chunk))
		if !tooLong {
			if len(r.buf)+len(chunk) > limit {
				tooLong = true
				r.buf = r.buf[:0]
			} else {
				r.buf = append(r.buf, chunk...)
			}
		}
		switch {
		case err == nil:
			return r.finishLine(tooLong)
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			r.eof = true
			if len(r.buf) == 0 && !tooLong {
				return nil, false, io.EOF
			}
			return r.finishLine(tooLong)
		default:
			return nil, false, fmt.Errorf("batch: reading %s: %w", r.file, err)
		}
	}
}

func (r *lineReader) finishLine(tooLong bool) ([]byte, bool, error) {
	if tooLong {
		return nil, true, nil
	}
	line := bytes.TrimSuffix(r.buf, []byte("\n"))
	if len(bytes.TrimSuffix(line, []byte("\r"))) > r.maxLen {
		return nil, true, nil
	}
	return line, false, nil
}

// LineNo returns the number of physical lines read so far.
func (r *Reader) LineNo() int { return r.lineNo }

// Count returns the number of valid lines returned so far (the next index).
func (r *Reader) Count() uint64 { return r.next }

// Blank returns the number of blank lines skipped so far.
func (r *Reader) Blank() int { return r.blank }

// Lines returns an iterator over the remaining valid lines for a pass over
// an input already known to be valid (the submit pass). It stops after the
// first error, which it yields: a *LineError or a read error. It ends
// without an error at the end of the input.
func (r *Reader) Lines() iter.Seq2[Line, error] {
	return func(yield func(Line, error) bool) {
		for {
			l, err := r.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(Line{}, err)
				return
			}
			if !yield(l, nil) {
				return
			}
		}
	}
}

// ValidationReport is the outcome of a validation pass over one input.
type ValidationReport struct {
	File string
	// Items is the number of valid lines (the items a submit would send).
	Items uint64
	// Lines is the number of physical lines; Blank of them were blank.
	Lines int
	Blank int
	// Invalid counts every invalid line; Errors holds the first
	// Config.MaxReportedErrors of them in file order.
	Invalid int
	Errors  []*LineError
}

// OK reports whether the input may be submitted: no invalid line and at
// least one item.
func (v *ValidationReport) OK() bool { return v.Invalid == 0 && v.Items > 0 }

// Err is nil when OK, else an error matching ErrInvalidInput that says how
// many lines are invalid (or that there are no items).
func (v *ValidationReport) Err() error {
	switch {
	case v.Invalid > 0:
		return fmt.Errorf("%w: %s has %d invalid line(s) of %d", ErrInvalidInput, v.File, v.Invalid, v.Lines)
	case v.Items == 0:
		return fmt.Errorf("%w: %s has no items (no non-blank lines)", ErrInvalidInput, v.File)
	}
	return nil
}

// Omitted is the number of invalid lines counted but not kept in Errors.
func (v *ValidationReport) Omitted() int { return v.Invalid - len(v.Errors) }

// ValidateInput reads all of r (streaming) and reports every invalid line.
// The returned error is only for a bad Config, a read error or ctx ending;
// invalid lines are in the report (see ValidationReport.Err).
func ValidateInput(ctx context.Context, r io.Reader, file string, cfg Config) (*ValidationReport, error) {
	rd, err := NewReader(r, file, cfg)
	if err != nil {
		return nil, err
	}
	rep := &ValidationReport{File: file}
	for n := 0; ; n++ {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		_, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		var le *LineError
		switch {
		case errors.As(err, &le):
			rep.Invalid++
			if len(rep.Errors) < cfg.MaxReportedErrors {
				rep.Errors = append(rep.Errors, le)
			}
		case err != nil:
			return nil, err
		}
	}
	rep.Items = rd.Count()
	rep.Lines = rd.LineNo()
	rep.Blank = rd.Blank()
	return rep, nil
}
