package batch

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/quick"

	"github.com/stretchr/testify/require"
	"lukechampine.com/blake3"
)

// The locked test vector: changing it breaks every existing run's ids. If a
// change is intended, bump SampleIDVersion and pin the new value.
const helloVector = "789a305441150f499e0886a6264df5672003e7bf76f84ac6a50a1f535f24992a"

func TestSampleIDLockedVector(t *testing.T) {
	require.Equal(t, byte(1), SampleIDVersion)
	id := SampleID("", "hello", DefaultSamplingParams(), 0)
	require.Equal(t, helloVector, hex.EncodeToString(id[:]))
}

func TestBlake3ReferenceVector(t *testing.T) {
	// The published BLAKE3 hash of the empty input: proves the library is
	// BLAKE3 with 32-byte output, not a look-alike.
	sum := blake3.Sum256(nil)
	require.Equal(t, "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262", hex.EncodeToString(sum[:]))
}

func TestSampleIDLayoutByHand(t *testing.T) {
	p := SamplingParams{Temperature: 0.7, TopP: 0.9, MaxTokens: 512, Seed: 42}
	model, prompt, index := "llama-3-8b", "Write a haiku.", uint64(7)

	var b []byte
	b = append(b, SampleIDVersion) // the version byte is first
	b = binary.LittleEndian.AppendUint64(b, uint64(len(model)))
	b = append(b, model...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(prompt)))
	b = append(b, prompt...)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(0.7))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(0.9))
	b = binary.LittleEndian.AppendUint32(b, 512)
	b = binary.LittleEndian.AppendUint64(b, 42)
	b = binary.LittleEndian.AppendUint64(b, index)
	require.Equal(t, blake3.Sum256(b), SampleID(model, prompt, p, index))

	// The same bytes without the version byte, or with another version,
	// give another id: the version takes part and comes first.
	require.NotEqual(t, blake3.Sum256(b[1:]), SampleID(model, prompt, p, index))
	b[0] = SampleIDVersion + 1
	require.NotEqual(t, blake3.Sum256(b), SampleID(model, prompt, p, index))
}

func TestCanonical(t *testing.T) {
	c := DefaultSamplingParams().Canonical()
	require.Len(t, c, 28)
	require.Equal(t, "000000000000f03f"+"000000000000f03f"+"00010000"+"0000000000000000", hex.EncodeToString(c))

	negZero := SamplingParams{Temperature: math.Copysign(0, -1), TopP: 1, MaxTokens: 1}
	posZero := SamplingParams{Temperature: 0, TopP: 1, MaxTokens: 1}
	require.Equal(t, posZero.Canonical(), negZero.Canonical())

	nan1 := SamplingParams{Temperature: math.NaN(), TopP: 1, MaxTokens: 1}
	nan2 := SamplingParams{Temperature: math.Float64frombits(0x7ff0000000000abc), TopP: 1, MaxTokens: 1}
	require.True(t, math.IsNaN(nan2.Temperature))
	require.Equal(t, nan1.Canonical(), nan2.Canonical())
}

func TestSampleIDLengthPrefixes(t *testing.T) {
	// Without length prefixes these two would hash the same bytes.
	p := DefaultSamplingParams()
	require.NotEqual(t, SampleID("ab", "c", p, 0), SampleID("a", "bc", p, 0))
	require.NotEqual(t, SampleID("", "abc", p, 0), SampleID("abc", "", p, 0))
}

type idInput struct {
	Model, Prompt string
	P             SamplingParams
	Index         uint64
}

func TestSampleIDChangesWithEveryField(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	mutations := map[string]func(in *idInput){
		"model":       func(in *idInput) { in.Model += "x" },
		"prompt":      func(in *idInput) { in.Prompt += " " },
		"index":       func(in *idInput) { in.Index++ },
		"temperature": func(in *idInput) { in.P.Temperature = math.Nextafter(in.P.Temperature, 3) },
		"top_p":       func(in *idInput) { in.P.TopP = math.Nextafter(in.P.TopP, -1) },
		"max_tokens":  func(in *idInput) { in.P.MaxTokens ^= 1 << uint(rng.IntN(32)) },
		"seed":        func(in *idInput) { in.P.Seed ^= 1 << uint(rng.IntN(64)) },
	}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			f := func(model, prompt string, temp, topP float64, maxTokens uint32, seed, index uint64) bool {
				in := idInput{Model: model, Prompt: prompt, Index: index, P: SamplingParams{
					Temperature: math.Abs(math.Mod(temp, 2)) + 0.01, TopP: math.Abs(math.Mod(topP, 1)) + 0.01,
					MaxTokens: maxTokens, Seed: seed}}
				before := SampleID(in.Model, in.Prompt, in.P, in.Index)
				again := SampleID(in.Model, in.Prompt, in.P, in.Index)
				mutate(&in)
				after := SampleID(in.Model, in.Prompt, in.P, in.Index)
				return before == again && before != after
			}
			require.NoError(t, quick.Check(f, &quick.Config{MaxCount: 300, Rand: nil}))
		})
	}
}

func TestSamplingParamsValidate(t *testing.T) {
	tests := []struct {
		name string
		p    SamplingParams
		want string // "" = valid
	}{
		{"defaults", DefaultSamplingParams(), ""},
		{"greedy", SamplingParams{Temperature: 0, TopP: 1, MaxTokens: 1}, ""},
		{"temperature high", SamplingParams{Temperature: 2.5, TopP: 1, MaxTokens: 1}, "temperature"},
		{"temperature NaN", SamplingParams{Temperature: math.NaN(), TopP: 1, MaxTokens: 1}, "temperature"},
		{"top_p zero", SamplingParams{Temperature: 1, TopP: 0, MaxTokens: 1}, "top_p"},
		{"top_p high", SamplingParams{Temperature: 1, TopP: 1.5, MaxTokens: 1}, "top_p"},
		{"max_tokens zero", SamplingParams{Temperature: 1, TopP: 1}, "max_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidSampling)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestPassthrough(t *testing.T) {
	p := DefaultSamplingParams()
	require.Len(t, p.Canonical(), canonicalParamsLen)
	require.Equal(t, `{"max_tokens":256,"seed":0,"temperature":1,"top_p":1}`, string(p.JSON()), "no passthrough key unless set")
	q := p
	q.Passthrough = true
	require.Len(t, q.Canonical(), canonicalParamsLen+1)
	require.NotEqual(t, SampleID("m", "x", p, 0), SampleID("m", "x", q, 0))
	require.Equal(t, `{"max_tokens":256,"passthrough":true,"seed":0,"temperature":1,"top_p":1}`, string(q.JSON()))
	back, err := ParseSamplingJSON(q.JSON())
	require.NoError(t, err)
	require.Equal(t, q, back)
}

// TestSampleIDOneShotMatchesStreaming: SampleID hashes one buffer with
// blake3.Sum256; the bytes and the hash are those of the layout streamed
// into a 32-byte hasher, for prompts around blake3's block (64 B) and chunk
// (1 KiB) sizes.
func TestSampleIDOneShotMatchesStreaming(t *testing.T) {
	p := SamplingParams{Temperature: 0.7, TopP: 0.9, MaxTokens: 64, Seed: 5, Passthrough: true}
	for _, n := range []int{0, 1, 20, 63, 64, 65, 1000, 1023, 1024, 1025, 5000} {
		prompt := strings.Repeat("é", n/2) + strings.Repeat("x", n%2)
		h := blake3.New(32, nil)
		var b [8]byte
		h.Write([]byte{SampleIDVersion})
		binary.LittleEndian.PutUint64(b[:], uint64(len("model-a")))
		h.Write(b[:])
		h.Write([]byte("model-a"))
		binary.LittleEndian.PutUint64(b[:], uint64(len(prompt)))
		h.Write(b[:])
		h.Write([]byte(prompt))
		h.Write(p.Canonical())
		binary.LittleEndian.PutUint64(b[:], uint64(n))
		h.Write(b[:])
		var want [32]byte
		h.Sum(want[:0])
		require.Equal(t, want, SampleID("model-a", prompt, p, uint64(n)), "prompt of %d bytes", len(prompt))
	}
}
