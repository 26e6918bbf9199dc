// Package batch is the pure, I/O-light core of the user's front door: it
// turns a JSONL input file into ledger items and ledger results back into a
// JSONL output file. It has no gRPC and no knowledge of the coordinator.
//
// The pieces:
//
//   - Sample ids. SampleID is the content address of one sample: blake3 over a
//     schema-version byte, the model, the prompt, the canonical sampling
//     parameters and the input index. The same inputs always give the same id,
//     so resubmitting a file is idempotent at the ledger.
//   - Input. Reader streams a JSONL file line by line (never loading it whole)
//     and ValidateInput reports every invalid line with file:line so that a run
//     never starts on bad input.
//   - Output. MergeResult builds one output line from an input line and its
//     result, and AtomicWriter writes the output file so that a reader never
//     sees a partial file.
//   - Progress. ProgressMeter turns counter samples into a rate and an ETA.
//
// # Input format
//
// Every non-blank line is one JSON object with a string field "prompt"; any
// other fields are kept verbatim and copied to the output. Lines are split on
// '\n'; a trailing '\r' and surrounding whitespace are trimmed. A line that is
// empty or holds only whitespace is skipped: it takes no index, but it still
// counts in line numbers, so errors point at the physical line of the file.
// Indexes are 0-based and count the valid lines only. A UTF-8 byte order mark
// at the start of the file is ignored. Invalid UTF-8, duplicate keys and data
// after the object are errors.
package batch

import "errors"

var (
	// ErrInvalidLine is matched (errors.Is) by every *LineError: an input line
	// that is not a JSON object with a string "prompt".
	ErrInvalidLine = errors.New("batch: invalid input line")

	// ErrInvalidInput is returned by ValidationReport.Err when an input file
	// has at least one invalid line or no items at all.
	ErrInvalidInput = errors.New("batch: invalid input")

	// ErrInvalidResult is returned by MergeResult when the result of a done
	// item is not a JSON object with a "completion" field.
	ErrInvalidResult = errors.New("batch: invalid result")

	// ErrInvalidConfig is returned by Config.Validate and by constructors given
	// a bad Config.
	ErrInvalidConfig = errors.New("batch: invalid config")

	// ErrInvalidSampling is returned by SamplingParams.Validate.
	ErrInvalidSampling = errors.New("batch: invalid sampling parameters")

	// ErrWriterClosed is returned by AtomicWriter methods after Commit or
	// Abort.
	ErrWriterClosed = errors.New("batch: atomic writer already closed")
)
