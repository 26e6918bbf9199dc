package batch

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/rollout/rollout/internal/blake3sum"
)

// SampleIDVersion is the first byte hashed into every sample id. It names the
// layout of the hashed bytes, including SamplingParams.Canonical: bump it
// whenever that layout changes, so that ids of the old and the new layout can
// never collide.
const SampleIDVersion byte = 1

// SamplingParams are the sampling parameters that take part in a sample id.
type SamplingParams struct {
	// Temperature is the sampling temperature, in [0, 2].
	Temperature float64
	// TopP is the nucleus-sampling mass, in (0, 1].
	TopP float64
	// MaxTokens bounds the completion length; it must be positive.
	MaxTokens uint32
	// Seed is the sampling seed (0 = none chosen).
	Seed uint64
	// Passthrough says that OpenAI Batch request bodies are sent as they
	// are: a backend fills in none of the parameters above that a body
	// does not set (the server's own defaults apply, as on OpenAI's
	// service). The OpenAI Batch API gateway submits its runs so. Prompt
	// lines still take the parameters above.
	Passthrough bool
}

// DefaultSamplingParams returns temperature 1.0, top_p 1.0, max_tokens 256,
// seed 0.
func DefaultSamplingParams() SamplingParams {
	return SamplingParams{Temperature: 1.0, TopP: 1.0, MaxTokens: 256, Seed: 0}
}

// Validate reports the first out-of-range field by name (errors.Is
// ErrInvalidSampling).
func (p SamplingParams) Validate() error {
	switch {
	case math.IsNaN(p.Temperature) || p.Temperature < 0 || p.Temperature > 2:
		return fmt.Errorf("%w: temperature %v is not in [0, 2]", ErrInvalidSampling, p.Temperature)
	case math.IsNaN(p.TopP) || p.TopP <= 0 || p.TopP > 1:
		return fmt.Errorf("%w: top_p %v is not in (0, 1]", ErrInvalidSampling, p.TopP)
	case p.MaxTokens == 0:
		return fmt.Errorf("%w: max_tokens must be positive", ErrInvalidSampling)
	}
	return nil
}

// canonicalParamsLen is the length of SamplingParams.Canonical's output.
const canonicalParamsLen = 8 + 8 + 4 + 8

// Canonical returns the fixed-order little-endian encoding of p that is
// hashed into sample ids: temperature (IEEE-754 float64 bits, 8 bytes), top_p
// (float64 bits, 8 bytes), max_tokens (uint32, 4 bytes), seed (uint64, 8
// bytes); 28 bytes in all, and one more byte, 1, when Passthrough is set
// (so the ids of runs without it are what they always were). Negative zero is encoded as zero and every NaN as
// the one quiet NaN 0x7ff8000000000001, so equal parameters always encode
// equally.
//
// The shape of this encoding is part of the sample id: bump SampleIDVersion
// whenever it changes (a field added, removed, reordered or re-typed).
func (p SamplingParams) Canonical() []byte {
	return p.appendCanonical(make([]byte, 0, canonicalParamsLen+1))
}

// appendCanonical appends Canonical's bytes to b.
func (p SamplingParams) appendCanonical(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, canonicalFloat(p.Temperature))
	b = binary.LittleEndian.AppendUint64(b, canonicalFloat(p.TopP))
	b = binary.LittleEndian.AppendUint32(b, p.MaxTokens)
	b = binary.LittleEndian.AppendUint64(b, p.Seed)
	if p.Passthrough {
		b = append(b, 1)
	}
	return b
}

func canonicalFloat(f float64) uint64 {
	switch {
	case math.IsNaN(f):
		return 0x7ff8000000000001
	case f == 0:
		return 0 // folds -0 into +0
	}
	return math.Float64bits(f)
}

// SampleID is the content address of one sample: the 32-byte blake3 hash of
//
//	SampleIDVersion                          (1 byte, always first)
//	len(model)  as uint64 LE, then model     (UTF-8 bytes)
//	len(prompt) as uint64 LE, then prompt    (UTF-8 bytes)
//	p.Canonical()                            (28 bytes)
//	index       as uint64 LE                 (8 bytes)
//
// The length prefixes make the encoding injective: no two different
// (model, prompt) pairs hash the same bytes.
func SampleID(model, prompt string, p SamplingParams, index uint64) [32]byte {
	// One buffer and one-shot hashing (the same bytes as a streaming
	// hasher's, without its allocation): this runs for every line a worker
	// executes and every line rollout results renders. The buffer is on
	// the stack up to sampleIDStackBytes, and blake3sum hashes a few KiB
	// without blake3.Sum256's goroutines and copy.
	var stack [sampleIDStackBytes]byte
	b := stack[:0]
	if n := 1 + 8 + len(model) + 8 + len(prompt) + canonicalParamsLen + 1 + 8; n > len(stack) {
		b = make([]byte, 0, n)
	}
	b = append(b, SampleIDVersion)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(model)))
	b = append(b, model...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(prompt)))
	b = append(b, prompt...)
	b = p.appendCanonical(b)
	b = binary.LittleEndian.AppendUint64(b, index)
	return blake3sum.Sum256(b)
}

// sampleIDStackBytes bounds the bytes SampleID hashes from a buffer on the
// stack (a prompt of about 4 KiB); a longer one's buffer is allocated.
const sampleIDStackBytes = 4096

// SampleIDOfLine is the sample id of the input line at index, exactly as
// the CLI's submit computes it from a Scanner's Record: the prompt hashed
// is the parsed request's SamplePrompt (Prompt for a prompt line,
// CanonicalJSON of the body for an OpenAI Batch line), or, for a line that
// does not parse, the line trimmed of surrounding JSON whitespace. A worker
// that read an item's payload by reference recomputes the id with it and
// refuses bytes whose id is not the item's.
func SampleIDOfLine(model string, line []byte, p SamplingParams, index uint64) [32]byte {
	return ParseInput(line).SampleID(model, p, index)
}
