// Package batch is the pure, I/O-light core of the user's front door: it
// turns a JSONL input file into ledger items and ledger results back into a
// JSONL output file. It has no gRPC and no knowledge of the coordinator.
//
// The pieces:
//
//   - Run configs. ParseRunConfig and LoadRunConfig read the TOML description
//     of a run (see RunConfig); every unknown key, wrong type and out-of-range
//     value is a *ConfigError naming the file, line and key.
//   - Sample ids. SampleID is the content address of one sample: blake3 over a
//     schema-version byte, the model, the prompt, the canonical sampling
//     parameters and the input index. The same inputs always give the same id,
//     so resubmitting a file is idempotent at the ledger. For an OpenAI Batch
//     line the prompt hashed is CanonicalJSON of its request body
//     (Request.SamplePrompt). SamplingParams.JSON is the parameters' canonical
//     JSON, the form they travel in to the backends.
//   - Input. ExpandGlob lists a run's input files in index order; Scanner
//     streams them line by line (never loading a file whole), classifying each
//     line with ParseRequest as a prompt line or an OpenAI Batch request; and
//     ValidateInputs reports every invalid line with file:line so that a run
//     never starts on bad input. Reader and ValidateInput are the one-file,
//     prompt-only forms.
//   - Output. OutputLine builds the output line of one finished item (a prompt
//     line merged with its result by MergeResult, or an OpenAI Batch output or
//     error line); OutputDir writes results.jsonl and errors.jsonl, and
//     AtomicWriter any one file, so that a reader never sees a partial file.
//     EncodeCompletionResult and OpenAIResult are the results backends report.
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
//
// A Scanner (a run's input) also accepts OpenAI Batch request lines (see
// ParseRequest), and gives every non-blank line, valid or not, the next index
// over the files in order; an invalid line submitted with --skip-invalid keeps
// its place as a failed item (InvalidPayload).
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

	// ErrInvalidRunConfig is matched by every error of ParseRunConfig and
	// LoadRunConfig about the file's content (each a *ConfigError naming
	// the file, line and key).
	ErrInvalidRunConfig = errors.New("batch: invalid run config")

	// ErrNoInput is returned when an input pattern matches no file.
	ErrNoInput = errors.New("batch: no input")
)
