package history

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
)

// Writer appends events to a history file. It is safe for concurrent use.
type Writer struct {
	process string

	mu   sync.Mutex
	f    *os.File
	err  error // the first write error, kept for Close
	seq  uint64
	errs uint64
}

// Create opens (creating or appending to) the history file at path for the
// process named process, which stamps every event that names none.
func Create(path, process string) (*Writer, error) {
	if process == "" {
		return nil, fmt.Errorf("%w: empty process name", ErrBadEvent)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return &Writer{process: process, f: f}, nil
}

// Process returns the writer's process name.
func (w *Writer) Process() string { return w.process }

// NextCall returns a fresh call id for pairing an invocation with its
// completion (1, 2, ...).
func (w *Writer) NextCall() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	return w.seq
}

// Write stamps ev with Now (when its Time is zero) and the writer's process
// (when it names none) and appends it as one line. A write error is kept
// and returned by Close; later events are still attempted.
func (w *Writer) Write(ev Event) {
	if ev.Time == 0 {
		ev.Time = Now()
	}
	if ev.Process == "" {
		ev.Process = w.process
	}
	line, err := json.Marshal(ev)
	if err != nil {
		w.fail(fmt.Errorf("%w: %v", ErrBadEvent, err))
		return
	}
	line = append(line, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return
	}
	if _, err := w.f.Write(line); err != nil {
		w.errs++
		if w.err == nil {
			w.err = fmt.Errorf("history: %w", err)
		}
	}
}

func (w *Writer) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs++
	if w.err == nil {
		w.err = err
	}
}

// Close closes the file and returns the first error of any write (or of
// closing). Writes after Close are dropped.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return w.err
	}
	if err := w.f.Close(); err != nil && w.err == nil {
		w.err = fmt.Errorf("history: %w", err)
	}
	w.f = nil
	return w.err
}
