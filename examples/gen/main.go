// Command gen writes examples/prompts.jsonl, the demo's input: 1,200 JSONL
// lines, each an object with a "prompt" string plus extra fields ("id",
// "topic", a nested "meta") that the pipeline must carry through verbatim.
// The output is a pure function of the line index (no randomness, no
// clock), so the committed file can be checked against a fresh run:
//
//	go run ./examples/gen -o examples/prompts.jsonl
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
)

// Lines is the number of prompts generated.
const Lines = 1200

// vocab holds the word lists prompts are built from.
type vocab struct {
	topics, verbs, styles []string
	subjects              map[string][]string
}

// newVocab returns the word lists (built per call: no package-level state).
func newVocab() vocab {
	return vocab{
		topics: []string{"math", "code", "history", "science", "writing", "geography", "music", "cooking"},
		verbs: []string{"Explain", "Summarize", "Give three facts about", "Write a short poem about",
			"Compare and contrast", "List common mistakes in", "Teach a child about", "Write a haiku about"},
		subjects: map[string][]string{
			"math":      {"prime numbers", "the Pythagorean theorem", "derivatives", "probability", "matrices"},
			"code":      {"binary search", "hash maps", "recursion", "garbage collection", "Raft consensus"},
			"history":   {"the printing press", "the Silk Road", "the Industrial Revolution", "ancient Rome", "the Apollo program"},
			"science":   {"photosynthesis", "black holes", "DNA replication", "plate tectonics", "the water cycle"},
			"writing":   {"opening lines", "dialogue", "the passive voice", "metaphors", "editing a draft"},
			"geography": {"rivers of Africa", "the Andes", "island nations", "deserts", "fjords"},
			"music":     {"the circle of fifths", "syncopation", "the violin", "jazz standards", "counterpoint"},
			"cooking":   {"bread dough", "emulsions", "knife skills", "caramelization", "fermentation"},
		},
		// styles add characters that must survive JSON round trips: quotes,
		// backslashes, newlines, tabs, non-ASCII text and HTML-like markup.
		styles: []string{
			"",
			" Answer in one sentence.",
			" Use \"quotes\" where helpful.",
			"\nFormat:\n- point one\n- point two",
			" Réponds en français, s'il te plaît.",
			" Include a path like C:\\temp\\notes.txt.",
			" Keep it under 50 words <strictly>.",
			"\tIndent nothing. 日本語でも説明してください。",
			" Add an emoji at the end 🙂.",
		},
	}
}

// Prompt is one input line.
type Prompt struct {
	ID     string `json:"id"`
	Prompt string `json:"prompt"`
	Topic  string `json:"topic"`
	Meta   Meta   `json:"meta"`
}

// Meta is the nested extra data of a prompt.
type Meta struct {
	Difficulty int      `json:"difficulty"`
	Tags       []string `json:"tags"`
	Source     string   `json:"source"`
	Weight     float64  `json:"weight"`
}

// Make returns prompt number i (0-based).
func Make(i int) Prompt { return newVocab().make(i) }

func (v vocab) make(i int) Prompt {
	topic := v.topics[i%len(v.topics)]
	subs := v.subjects[topic]
	subject := subs[(i/len(v.topics))%len(subs)]
	verb := v.verbs[(i*7+i/len(v.topics))%len(v.verbs)]
	style := v.styles[(i*5+3)%len(v.styles)]
	tags := []string{topic}
	if i%3 == 0 {
		tags = append(tags, "short")
	}
	if i%10 == 0 {
		tags = append(tags, "review")
	}
	return Prompt{
		ID:     fmt.Sprintf("p-%04d", i+1),
		Prompt: fmt.Sprintf("%s %s (#%d).%s", verb, subject, i+1, style),
		Topic:  topic,
		Meta: Meta{
			Difficulty: 1 + (i*13)%5,
			Tags:       tags,
			Source:     "examples/gen",
			Weight:     float64((i*37)%100) / 4,
		},
	}
}

// Write writes n prompt lines to w.
func Write(w io.Writer, n int) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	v := newVocab()
	for i := range n {
		if err := enc.Encode(v.make(i)); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func main() {
	out := flag.String("o", "", "output file (default: standard output)")
	n := flag.Int("n", Lines, "number of lines")
	flag.Parse()
	if *n < 0 {
		fmt.Fprintln(os.Stderr, "gen: -n must not be negative")
		os.Exit(2)
	}
	w := io.Writer(os.Stdout)
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
		defer f.Close()
		w = f
	}
	if err := Write(w, *n); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
