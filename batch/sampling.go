package batch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
)

// samplingJSON is the wire shape of SamplingParams; its fields are in key
// order so that encoding/json writes the keys sorted.
type samplingJSON struct {
	MaxTokens   *uint32  `json:"max_tokens"`
	Passthrough bool     `json:"passthrough,omitempty"`
	Seed        *uint64  `json:"seed"`
	Temperature *float64 `json:"temperature"`
	TopP        *float64 `json:"top_p"`
}

// JSON returns the canonical JSON of p, the form it travels in as a run's
// RunSpec.sampling and reaches backends in:
//
//	{"max_tokens":256,"seed":0,"temperature":1,"top_p":1}
//
// with "passthrough":true after "max_tokens" when Passthrough is set (and
// no such key otherwise).
// Keys are sorted, there is no whitespace, and floats take encoding/json's
// shortest round-tripping form, so equal parameters always give equal bytes.
// p must be valid (see Validate): NaN and infinities have no JSON form and
// are written as 0.
func (p SamplingParams) JSON() []byte {
	t, tp := p.Temperature, p.TopP
	if math.IsNaN(t) || math.IsInf(t, 0) {
		t = 0
	}
	if math.IsNaN(tp) || math.IsInf(tp, 0) {
		tp = 0
	}
	if t == 0 {
		t = 0 // -0 encodes as "-0"
	}
	b, _ := json.Marshal(samplingJSON{MaxTokens: &p.MaxTokens, Passthrough: p.Passthrough, Seed: &p.Seed, Temperature: &t, TopP: &tp})
	return b
}

// ParseSamplingJSON decodes sampling parameters written by
// SamplingParams.JSON. A missing key takes its DefaultSamplingParams value;
// an unknown key, a wrong type or an out-of-range value is an error matching
// ErrInvalidSampling. Empty input gives the defaults.
func ParseSamplingJSON(b []byte) (SamplingParams, error) {
	p := DefaultSamplingParams()
	if len(bytes.TrimSpace(b)) == 0 {
		return p, nil
	}
	var s samplingJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return SamplingParams{}, fmt.Errorf("%w: %v", ErrInvalidSampling, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return SamplingParams{}, fmt.Errorf("%w: data after the JSON object", ErrInvalidSampling)
	}
	if s.MaxTokens != nil {
		p.MaxTokens = *s.MaxTokens
	}
	if s.Seed != nil {
		p.Seed = *s.Seed
	}
	if s.Temperature != nil {
		p.Temperature = *s.Temperature
	}
	if s.TopP != nil {
		p.TopP = *s.TopP
	}
	p.Passthrough = s.Passthrough
	if err := p.Validate(); err != nil {
		return SamplingParams{}, err
	}
	return p, nil
}
