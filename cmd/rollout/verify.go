package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"

	"github.com/rollout/rollout/batch"
)

// maxProblems is how many verification problems are collected before
// stopping.
const maxProblems = 20

// verifyDemoResults checks the demo's output against its input, streaming
// both: exactly one output line per input line, in input order (each line's
// sample_id is that of the input line at the same position), the input's
// members kept, "completion" == "MOCK:"+prompt, no "error", no duplicate
// sample ids, nothing missing, nothing extra. It returns the number of input
// lines and the problems found (empty when the output is right); the error is
// for files that cannot be read.
func verifyDemoResults(inputPath, resultsPath string, cfg batch.Config) (uint64, []string, error) {
	in, err := os.Open(inputPath)
	if err != nil {
		return 0, nil, err
	}
	defer in.Close()
	out, err := os.Open(resultsPath)
	if err != nil {
		return 0, nil, err
	}
	defer out.Close()
	inR, err := batch.NewReader(in, inputPath, cfg)
	if err != nil {
		return 0, nil, err
	}
	outCfg := cfg
	outCfg.MaxLineBytes = 2*cfg.MaxLineBytes + 1<<20
	outR, err := batch.NewReader(out, resultsPath, outCfg)
	if err != nil {
		return 0, nil, err
	}

	var problems []string
	report := func(format string, args ...any) bool {
		problems = append(problems, fmt.Sprintf(format, args...))
		return len(problems) < maxProblems
	}
	seen := make(map[string]uint64)
	sampling := batch.DefaultSamplingParams()
	var n uint64
	for {
		want, err := inR.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, nil, fmt.Errorf("reading input: %w", err)
		}
		n++
		got, err := outR.Next()
		if errors.Is(err, io.EOF) {
			report("missing: no output line for input line %d (index %d) and after", want.LineNo, want.Index)
			return n, problems, nil
		}
		var le *batch.LineError
		if errors.As(err, &le) {
			if !report("%v", le) {
				return n, problems, nil
			}
			continue
		}
		if err != nil {
			return n, nil, fmt.Errorf("reading results: %w", err)
		}
		id := batch.SampleID("", want.Prompt, sampling, want.Index)
		if p := checkOutputLine(want, got, hex.EncodeToString(id[:]), seen); p != "" {
			if !report("%s:%d: %s", resultsPath, got.LineNo, p) {
				return n, problems, nil
			}
		}
	}
	for {
		extra, err := outR.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		line := outR.LineNo()
		if err == nil {
			line = extra.LineNo
		}
		if !report("%s:%d: extra output line: the input has only %d lines", resultsPath, line, n) {
			break
		}
	}
	return n, problems, nil
}

// checkOutputLine compares one output line with its input line; "" means
// it is right. seen maps sample ids to the output line that had them.
func checkOutputLine(want, got batch.Line, wantID string, seen map[string]uint64) string {
	in, err := decodeMembers(want.Raw)
	if err != nil {
		return fmt.Sprintf("input line %d: %v", want.LineNo, err)
	}
	o, err := decodeMembers(got.Raw)
	if err != nil {
		return err.Error()
	}
	sid, _ := o[batch.KeySampleID].(string)
	if prev, dup := seen[sid]; dup {
		return fmt.Sprintf("duplicate sample_id %s (also on output line %d)", sid, prev)
	}
	seen[sid] = uint64(got.LineNo)
	if sid != wantID {
		return fmt.Sprintf("sample_id %q is not that of input line %d (%s): out of order or wrong", sid, want.LineNo, wantID)
	}
	if reason, dead := o[batch.KeyError]; dead {
		return fmt.Sprintf("item is dead: %v", reason)
	}
	if c := o[batch.KeyCompletion]; c != "MOCK:"+want.Prompt {
		return fmt.Sprintf("completion %q, want %q", c, "MOCK:"+want.Prompt)
	}
	var extra []string
	for k, v := range o {
		switch k {
		case batch.KeyCompletion, batch.KeyFinishReason, batch.KeySampleID:
			continue
		}
		iv, ok := in[k]
		if !ok {
			extra = append(extra, k)
			continue
		}
		if !reflect.DeepEqual(iv, v) {
			return fmt.Sprintf("member %q changed: input %v, output %v", k, iv, v)
		}
	}
	for k := range in {
		if _, ok := o[k]; !ok && k != batch.KeyCompletion && k != batch.KeyFinishReason && k != batch.KeySampleID && k != batch.KeyError {
			return fmt.Sprintf("input member %q is missing", k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return fmt.Sprintf("unexpected members %q", extra)
	}
	return ""
}

// decodeMembers decodes a JSON object keeping numbers exact.
func decodeMembers(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	return m, nil
}
