package batch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// maxInvalidSnippet bounds how much of an invalid line its failed item keeps.
const maxInvalidSnippet = 4096

// ExpandGlob returns the regular files matching pattern (filepath.Match
// syntax) in lexical order, the order their lines are indexed in. A pattern
// without meta characters names one file, which must exist. No match is an
// error matching ErrNoInput; a malformed pattern is an error too.
func ExpandGlob(pattern string) ([]string, error) {
	if pattern == "" {
		return nil, fmt.Errorf("%w: empty input pattern", ErrNoInput)
	}
	matches, err := filepath.Glob(pattern)
	if err != nil {
		return nil, fmt.Errorf("batch: input pattern %q: %w", pattern, err)
	}
	var files []string
	for _, m := range matches {
		fi, err := os.Stat(m)
		if err != nil {
			return nil, fmt.Errorf("batch: input %s: %w", m, err)
		}
		if fi.Mode().IsRegular() {
			files = append(files, m)
		}
	}
	if len(files) == 0 {
		if !strings.ContainsAny(pattern, `*?[\`) {
			if _, err := os.Stat(pattern); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrNoInput, err)
			}
			return nil, fmt.Errorf("%w: %s is not a regular file", ErrNoInput, pattern)
		}
		return nil, fmt.Errorf("%w: no file matches %q", ErrNoInput, pattern)
	}
	return files, nil
}

// Record is one non-blank line of an input set.
type Record struct {
	// Index is the 0-based position of the line among the non-blank lines
	// of all files, files in the given order: the item's input index.
	Index uint64
	// File and Line (1-based, counting every physical line) locate it.
	File string
	Line int
	// Request is the parsed line when Err is nil.
	Request Request
	// Offset is where Raw starts in its file (for a valid line: the JSON
	// object's first byte), so that a reference to the input where it is
	// can name Raw's bytes.
	Offset int64
	// Raw is the JSON object verbatim (trimmed of surrounding whitespace)
	// when Err is nil; for an invalid line, the line as read (nil when it
	// was too long to keep). It is owned by the Record.
	Raw []byte
	// Err is set for an invalid line.
	Err *LineError
}

// Scanner streams the non-blank lines of several JSONL files, in order, each
// file opened only while it is read. Every non-blank line, valid or not,
// takes the next index. It holds at most one line (bounded by
// Config.MaxLineBytes) in memory. A Scanner is not safe for concurrent use;
// Close it when done.
type Scanner struct {
	files []string
	cfg   Config
	i     int // the file now open is files[i-1]
	f     io.ReadCloser
	lr    lineReader
	next  uint64
	lines int // physical lines of the finished files
	blank int
	err   error // sticky
}

// NewScanner returns a Scanner over files (read in the given order).
func NewScanner(files []string, cfg Config) (*Scanner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no input files", ErrNoInput)
	}
	return &Scanner{files: files, cfg: cfg}, nil
}

// Next returns the next non-blank line's Record, valid or invalid. At the
// end of the last file it returns io.EOF. Any other error (a file that cannot
// be opened or read) is sticky.
func (s *Scanner) Next() (Record, error) {
	for {
		if s.err != nil {
			return Record{}, s.err
		}
		if s.f == nil {
			if s.i == len(s.files) {
				s.err = io.EOF
				return Record{}, io.EOF
			}
			open := s.cfg.Open
			if open == nil {
				open = func(name string) (io.ReadCloser, error) { return os.Open(name) }
			}
			f, err := open(s.files[s.i])
			if err != nil {
				s.err = fmt.Errorf("batch: input: %w", err)
				return Record{}, s.err
			}
			s.f = f
			s.lr = newLineReader(f, s.files[s.i], s.cfg.MaxLineBytes)
			s.i++
		}
		raw, tooLong, err := s.lr.next()
		if errors.Is(err, io.EOF) {
			s.lines += s.lr.lineNo
			s.f.Close()
			s.f = nil
			continue
		}
		if err != nil {
			s.err = err
			return Record{}, err
		}
		rec, blank := recordOf(raw, tooLong, s.lr.file, s.lr.lineNo, s.lr.lineOff, s.cfg, true, false)
		if blank {
			s.blank++
			continue
		}
		rec.Raw = bytes.Clone(rec.Raw) // the line reader reuses raw
		rec.Index = s.next
		s.next++
		return rec, nil
	}
}

// recordOf is the Record of one physical line (raw, without its '\n' and,
// on a file's first line, its byte order mark; tooLong: longer than
// cfg.MaxLineBytes, raw nil) at line lineNo of file, starting at byte
// lineOff; blank says it is blank (it takes no index). Index is the
// caller's to set. Raw shares raw's bytes: the caller copies it when raw
// is reused. Request owns its bytes when own; else (raw is never changed
// afterwards) its Body may share raw's. With formatOnly, Request holds
// only its Format.
func recordOf(raw []byte, tooLong bool, file string, lineNo int, lineOff int64, cfg Config, own, formatOnly bool) (rec Record, blank bool) {
	rec = Record{File: file, Line: lineNo}
	if tooLong {
		rec.Err = &LineError{File: file, Line: lineNo,
			Reason: fmt.Sprintf("line is longer than the limit of %d bytes", cfg.MaxLineBytes)}
		return rec, false
	}
	obj := bytes.Trim(raw, jsonSpace)
	if len(obj) == 0 {
		return Record{}, true
	}
	req, obj, err := parseRequestIn(obj, own, formatOnly)
	switch {
	case err != nil:
		rec.Err = &LineError{File: file, Line: lineNo, Reason: err.Error()}
		rec.Raw = bytes.Trim(raw, jsonSpace)
	case cfg.MaxItemBytes > 0 && len(obj) > cfg.MaxItemBytes:
		rec.Err = &LineError{File: file, Line: lineNo,
			Reason: fmt.Sprintf("line is %d bytes, exceeds the per-item limit of %d bytes", len(obj), cfg.MaxItemBytes)}
	default:
		rec.Request, rec.Raw = req, obj
		// obj is a subslice of raw: its start is cap(raw)-cap(obj) bytes
		// into the line.
		rec.Offset = lineOff + int64(cap(raw)-cap(obj))
	}
	return rec, false
}

// Count returns how many records Next has returned (the next index).
func (s *Scanner) Count() uint64 { return s.next }

// Lines returns the physical lines read so far; Blank of them were blank.
func (s *Scanner) Lines() int {
	if s.f != nil {
		return s.lines + s.lr.lineNo
	}
	return s.lines
}

// Blank returns the number of blank lines skipped so far.
func (s *Scanner) Blank() int { return s.blank }

// Close closes the file being read, if any.
func (s *Scanner) Close() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	if s.err == nil {
		s.err = errors.New("batch: scanner closed")
	}
	return err
}

// InputReport is the outcome of a validation pass over an input set.
type InputReport struct {
	Files []string
	// Records counts the non-blank lines (the indexes a submit assigns);
	// Valid of them are valid: Prompt in the prompt format, OpenAI in the
	// OpenAI Batch format.
	Records, Valid, Prompt, OpenAI uint64
	// Lines counts physical lines; Blank of them were blank.
	Lines, Blank int
	// Invalid counts invalid lines; Errors keeps the first
	// Config.MaxReportedErrors of them in input order.
	Invalid int
	Errors  []*LineError
	// maxErrors is Config.MaxReportedErrors (NewInputReport).
	maxErrors int
}

// OK reports whether the input may be submitted as it is: no invalid line
// and at least one item.
func (r *InputReport) OK() bool { return r.Invalid == 0 && r.Valid > 0 }

// Err is nil when OK. Otherwise it matches ErrInvalidInput and says how many
// lines are invalid or that there is no item.
func (r *InputReport) Err() error {
	where := fmt.Sprintf("%d files", len(r.Files))
	if len(r.Files) == 1 {
		where = r.Files[0]
	}
	switch {
	case r.Invalid > 0:
		return fmt.Errorf("%w: %s has %d invalid line(s) of %d", ErrInvalidInput, where, r.Invalid, r.Lines)
	case r.Valid == 0:
		return fmt.Errorf("%w: %s has no items (no non-blank lines)", ErrInvalidInput, where)
	}
	return nil
}

// Omitted is the number of invalid lines counted but not kept in Errors.
func (r *InputReport) Omitted() int { return r.Invalid - len(r.Errors) }

// ValidateInputs reads every file (streaming, CheckBlocks: each byte once,
// parsed on every core) and reports every invalid line. The error is only for a bad Config, a file that cannot be read, or
// ctx ending; invalid lines are in the report (see InputReport.Err).
func ValidateInputs(ctx context.Context, files []string, cfg Config) (*InputReport, error) {
	rep := NewInputReport(files, cfg)
	if err := CheckBlocks(ctx, files, cfg, 0, func(b *Block) error {
		rep.Add(b)
		return nil
	}); err != nil {
		return nil, err
	}
	return rep, nil
}

// NewInputReport returns the empty report of a validation pass over files
// under cfg, to Add blocks to.
func NewInputReport(files []string, cfg Config) *InputReport {
	return &InputReport{Files: files, maxErrors: cfg.MaxReportedErrors}
}

// Add counts the records of b, the next block of the input (ScanBlocks).
func (r *InputReport) Add(b *Block) {
	for k := range b.Records {
		rec := &b.Records[k]
		switch {
		case rec.Err != nil:
			r.Invalid++
			if len(r.Errors) < r.maxErrors {
				r.Errors = append(r.Errors, rec.Err)
			}
		case rec.Request.Format == FormatOpenAI:
			r.Valid++
			r.OpenAI++
		default:
			r.Valid++
			r.Prompt++
		}
	}
	r.Records += uint64(len(b.Records))
	r.Lines += b.Lines
	r.Blank += b.Blank
}

// Keys of the payload that stands in for an invalid input line.
const (
	KeyInvalidLine = "invalid_line"
	KeyFile        = "file"
	KeyLine        = "line"
	KeyCustomID    = "custom_id"
)

// InvalidPayload is the payload of the failed item that records an invalid
// line (submit --skip-invalid): {"invalid_line": the line's first 4 KiB as a
// string (invalid UTF-8 replaced by U+FFFD), "file": ..., "line": N}, plus "custom_id" when the line is an
// object with a string custom_id (its output then goes with the OpenAI Batch
// errors).
func InvalidPayload(rec Record) []byte {
	snippet := rec.Raw
	if len(snippet) > maxInvalidSnippet {
		snippet = snippet[:maxInvalidSnippet] // a cut rune becomes U+FFFD
	}
	var b bytes.Buffer
	b.WriteString(`{"` + KeyInvalidLine + `":`)
	b.Write(jsonString(string(snippet)))
	b.WriteString(`,"` + KeyFile + `":`)
	b.Write(jsonString(rec.File))
	fmt.Fprintf(&b, `,"%s":%d`, KeyLine, rec.Line)
	if fields, err := parseObject(rec.Raw); err == nil {
		if v := findField(fields, KeyCustomID); v != nil && v[0] == '"' {
			b.WriteString(`,"` + KeyCustomID + `":`)
			b.Write(compactJSON(v))
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

// CountRecords returns how many non-blank lines files hold (the indexes a
// submit of them assigns, invalid lines included), reading them as a
// Scanner does (cfg.MaxLineBytes, cfg.Open) without parsing a line. The
// error is for a bad Config, a file that cannot be read, or ctx ending.
func CountRecords(ctx context.Context, files []string, cfg Config) (uint64, error) {
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("%w: no input files", ErrNoInput)
	}
	open := cfg.Open
	if open == nil {
		open = func(name string) (io.ReadCloser, error) { return os.Open(name) }
	}
	var n uint64
	for _, name := range files {
		f, err := open(name)
		if err != nil {
			return n, fmt.Errorf("batch: input: %w", err)
		}
		lr := newLineReader(f, name, cfg.MaxLineBytes)
		for k := 0; ; k++ {
			if k%1024 == 0 {
				if err := ctx.Err(); err != nil {
					f.Close()
					return n, err
				}
			}
			raw, tooLong, err := lr.next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				f.Close()
				return n, err
			}
			if tooLong || len(bytes.Trim(raw, jsonSpace)) > 0 {
				n++
			}
		}
		f.Close()
	}
	return n, nil
}
