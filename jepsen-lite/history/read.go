package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// maxLine bounds one history line.
const maxLine = 16 << 20

// Read decodes a history. A last line without its newline that does not
// decode is dropped (a writer killed mid-line); any other bad line is an
// error naming its line number.
func Read(r io.Reader) ([]Event, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var out []Event
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > maxLine {
			return nil, fmt.Errorf("%w: line %d is longer than %d bytes", ErrBadEvent, n, maxLine)
		}
		complete := err == nil
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("history: %w", err)
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			var ev Event
			if derr := json.Unmarshal(trimmed, &ev); derr != nil {
				if !complete {
					break // torn last line
				}
				return nil, fmt.Errorf("%w: line %d: %v", ErrBadEvent, n, derr)
			}
			out = append(out, ev)
		}
		if !complete {
			break
		}
	}
	return out, nil
}

// ReadFile reads the history file at path.
func ReadFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	evs, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return evs, nil
}

// ReadDir reads every *.jsonl file in dir and merges them (see Merge).
func ReadDir(dir string) ([]Event, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	sort.Strings(paths)
	var all [][]Event
	for _, p := range paths {
		evs, err := ReadFile(p)
		if err != nil {
			return nil, err
		}
		all = append(all, evs)
	}
	return Merge(all...), nil
}

// Merge returns the events of several histories in time order; events of
// one history with equal times keep their order.
func Merge(hs ...[]Event) []Event {
	var out []Event
	for _, h := range hs {
		out = append(out, h...)
	}
	slices.SortStableFunc(out, func(a, b Event) int {
		switch {
		case a.Time < b.Time:
			return -1
		case a.Time > b.Time:
			return 1
		}
		return 0
	})
	return out
}

// WriteFile writes events to path as JSON Lines, replacing the file.
func WriteFile(path string, events []Event) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	bw := bufio.NewWriterSize(f, 256<<10)
	enc := json.NewEncoder(bw)
	for _, ev := range events {
		if err := enc.Encode(ev); err != nil {
			f.Close()
			return fmt.Errorf("%w: %v", ErrBadEvent, err)
		}
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("history: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	return nil
}
