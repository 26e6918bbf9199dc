package doccheck

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/rollout/rollout/internal/testbin"
)

// binDir holds rollout-coord, rollout-worker and rollout, built once by
// TestMain.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(testbin.RunTestsWithBinaries(m, &binDir))
}

var (
	// errUnbalanced is a $(...) or quote that does not close on its line.
	errUnbalanced = errors.New("unbalanced quote or $(...)")
)

// repoRoot is the directory holding go.mod, found by walking up.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testbin.ModuleRoot()
	require.NoError(t, err)
	return root
}

// markdownFiles lists every .md file under root, relative to it, leaving out
// hidden directories (.git, .tools, .data, ...), node_modules and bin.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	require.NoError(t, err)
	sort.Strings(files)
	require.Contains(t, files, "README.md")
	return files
}

// mdLine is one line of a Markdown file with its number and, inside a
// fenced code block, the block's language.
type mdLine struct {
	num     int
	text    string
	inFence bool
	lang    string // the fence's info string's first word, lower case
}

var fenceRE = regexp.MustCompile("^ {0,3}(```+|~~~+)\\s*([^\\s`]*)")

// scanMarkdown splits a Markdown file into lines, marking fenced code.
func scanMarkdown(text string) []mdLine {
	var out []mdLine
	var fence, lang string
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			if fence == "" {
				fence, lang = m[1], strings.ToLower(m[2])
				out = append(out, mdLine{num: n, text: line})
				continue
			}
			if strings.HasPrefix(strings.TrimSpace(line), fence) && strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), fence[:1])) == "" {
				fence, lang = "", ""
				out = append(out, mdLine{num: n, text: line})
				continue
			}
		}
		out = append(out, mdLine{num: n, text: line, inFence: fence != "", lang: lang})
	}
	return out
}

var (
	headingRE  = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	codeSpanRE = regexp.MustCompile("`+[^`]*`+")
	linkRE     = regexp.MustCompile(`!?\[([^\]]*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	mdLinkRE   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// anchors returns the heading anchors of a Markdown file as GitHub makes
// them: the heading's text without markup, lower case, every character but
// letters, digits, '_', '-' and spaces dropped, spaces made '-'; a repeated
// anchor gets -1, -2, ...
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range scanMarkdown(text) {
		if l.inFence {
			continue
		}
		m := headingRE.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		a := anchor(m[2])
		if n, ok := seen[a]; ok {
			seen[a] = n + 1
			out[fmt.Sprintf("%s-%d", a, n+1)] = true
			continue
		}
		seen[a] = 0
		out[a] = true
	}
	return out
}

// anchor is GitHub's anchor of one heading's text.
func anchor(heading string) string {
	h := mdLinkRE.ReplaceAllString(heading, "$1")
	h = strings.NewReplacer("`", "", "*", "").Replace(h)
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), unicode.Is(unicode.Mn, r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// checkLinks returns a FILE:LINE problem for every relative link of the
// Markdown files (relative to root) that does not resolve.
func checkLinks(root string, files []string) ([]string, error) {
	var problems []string
	anchorCache := map[string]map[string]bool{}
	anchorsOf := func(rel string) (map[string]bool, error) {
		if a, ok := anchorCache[rel]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		a := anchors(string(b))
		anchorCache[rel] = a
		return a, nil
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, err
		}
		for _, l := range scanMarkdown(string(b)) {
			if l.inFence {
				continue
			}
			text := codeSpanRE.ReplaceAllStringFunc(l.text, func(s string) string { return "x" })
			for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
				target := m[2]
				if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				var rel string
				switch {
				case path == "":
					rel = f
				case strings.HasPrefix(path, "/"):
					rel = strings.TrimPrefix(path, "/")
				default:
					rel = filepath.ToSlash(filepath.Join(filepath.Dir(f), path))
				}
				where := fmt.Sprintf("%s:%d", f, l.num)
				if rel == ".." || strings.HasPrefix(rel, "../") {
					problems = append(problems, fmt.Sprintf("%s: link %q leaves the repository", where, target))
					continue
				}
				st, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s: link %q: %s does not exist", where, target, rel))
					continue
				}
				if frag == "" {
					continue
				}
				if st.IsDir() || !strings.HasSuffix(rel, ".md") {
					problems = append(problems, fmt.Sprintf("%s: link %q: a #fragment into %s, which is not a Markdown file", where, target, rel))
					continue
				}
				a, err := anchorsOf(rel)
				if err != nil {
					return nil, err
				}
				if !a[strings.ToLower(frag)] {
					problems = append(problems, fmt.Sprintf("%s: link %q: %s has no heading #%s", where, target, rel, frag))
				}
			}
		}
	}
	return problems, nil
}

func TestMarkdownLinksResolve(t *testing.T) {
	root := repoRoot(t)
	problems, err := checkLinks(root, markdownFiles(t, root))
	require.NoError(t, err)
	require.Empty(t, problems, "broken links:\n%s", strings.Join(problems, "\n"))
}

// shellCommand is one simple command of a shell block: its words (quotes
// removed; a word that expands at run time, such as $C or $(t cli), is
// opaque) and the line it starts on.
type shellCommand struct {
	line  int
	words []string
}

// opaque stands for a word the shell expands at run time: it may become
// any number of words, so it is neither checked nor counted as an argument.
const opaque = "\x00opaque"

// shellBlocks returns the simple commands of every sh, bash, shell or
// console block of a Markdown file. Comment lines are skipped, lines ending
// in a backslash are joined, and a line is cut into commands at |, ||, &&,
// ; and & (not at the & of 2>&1).
func shellBlocks(text string) ([]shellCommand, error) {
	var out []shellCommand
	lines := scanMarkdown(text)
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !l.inFence {
			continue
		}
		switch l.lang {
		case "sh", "bash", "shell", "console":
		default:
			continue
		}
		s := l.text
		if l.lang == "console" {
			t := strings.TrimLeft(s, " ")
			if !strings.HasPrefix(t, "$ ") {
				continue
			}
			s = t[2:]
		}
		start := l.num
		for strings.HasSuffix(s, `\`) && i+1 < len(lines) && lines[i+1].inFence {
			i++
			s = strings.TrimSuffix(s, `\`) + " " + lines[i].text
		}
		if strings.HasPrefix(strings.TrimSpace(s), "#") || strings.TrimSpace(s) == "" {
			continue
		}
		cmds, err := splitCommands(s)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", start, err)
		}
		for _, c := range cmds {
			if len(c) > 0 {
				out = append(out, shellCommand{line: start, words: c})
			}
		}
	}
	return out, nil
}

// splitCommands cuts one shell line into simple commands of words.
func splitCommands(s string) ([][]string, error) {
	var cmds [][]string
	var words []string
	var word strings.Builder
	inWord, isOpaque := false, false
	endWord := func() {
		if inWord {
			if isOpaque {
				words = append(words, opaque)
			} else {
				words = append(words, word.String())
			}
		}
		word.Reset()
		inWord, isOpaque = false, false
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == '\\' && i+1 < len(rs):
			i++
			word.WriteRune(rs[i])
			inWord = true
		case r == '\'':
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			if j == len(rs) {
				return nil, errUnbalanced
			}
			word.WriteString(string(rs[i+1 : j]))
			inWord, i = true, j
		case r == '"':
			j := i + 1
			for j < len(rs) && rs[j] != '"' {
				if rs[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(rs) {
				return nil, errUnbalanced
			}
			in := string(rs[i+1 : j])
			if strings.Contains(in, "$") {
				isOpaque = true
			}
			word.WriteString(in)
			inWord, i = true, j
		case r == '$' || r == '`':
			// $VAR, ${VAR}, $(...), `...`: expanded at run time.
			isOpaque, inWord = true, true
			if r == '`' {
				j := i + 1
				for j < len(rs) && rs[j] != '`' {
					j++
				}
				if j == len(rs) {
					return nil, errUnbalanced
				}
				i = j
				continue
			}
			if i+1 < len(rs) && (rs[i+1] == '(' || rs[i+1] == '{') {
				open, closing := rs[i+1], map[rune]rune{'(': ')', '{': '}'}[rs[i+1]]
				depth, j := 0, i+1
				for ; j < len(rs); j++ {
					if rs[j] == open {
						depth++
					} else if rs[j] == closing {
						depth--
						if depth == 0 {
							break
						}
					}
				}
				if j == len(rs) {
					return nil, errUnbalanced
				}
				i = j
			}
		case r == '#' && !inWord:
			endCmd()
			return cmds, nil
		case r == '|' || r == ';':
			endCmd()
			if i+1 < len(rs) && rs[i+1] == r {
				i++
			}
		case r == '&':
			if (i > 0 && (rs[i-1] == '>' || rs[i-1] == '<')) || (i+1 < len(rs) && rs[i+1] == '>') {
				word.WriteRune(r)
				inWord = true
				continue
			}
			endCmd()
			if i+1 < len(rs) && rs[i+1] == '&' {
				i++
			}
		case unicode.IsSpace(r):
			endWord()
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	endCmd()
	return cmds, nil
}

var (
	assignRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	redirectRE = regexp.MustCompile(`^[0-9]*(<<?|>>?|&>)(&[0-9-]+)?(.*)$`)
)

// program returns the command's program and its arguments, leaving out
// leading environment assignments, sudo/time/exec/nohup and redirections.
func program(words []string) (string, []string) {
	i := 0
	for i < len(words) && (assignRE.MatchString(words[i]) || words[i] == "sudo" || words[i] == "time" || words[i] == "exec" || words[i] == "nohup" || words[i] == "env") {
		i++
	}
	if i == len(words) {
		return "", nil
	}
	var args []string
	for j := i + 1; j < len(words); j++ {
		if m := redirectRE.FindStringSubmatch(words[j]); m != nil {
			if m[2] == "" && m[3] == "" {
				j++ // the target is the next word
			}
			continue
		}
		args = append(args, words[j])
	}
	return words[i], args
}

// makeTargets reads the rule targets of a Makefile.
func makeTargets(path string) (map[string]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ruleRE := regexp.MustCompile(`^([A-Za-z0-9_./%-]+(?:[ \t]+[A-Za-z0-9_./%-]+)*)[ \t]*::?([^=]|$)`)
	targets := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := ruleRE.FindStringSubmatch(line); m != nil {
			for _, t := range strings.Fields(m[1]) {
				targets[t] = true
			}
		}
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("%s: no rules found", path)
	}
	return targets, nil
}

// cliHelp is what one command's --help says: its subcommands and flags.
type cliHelp struct {
	subcommands map[string]bool
	flags       map[string]bool // name → takes a value
	short       map[string]bool // shorthand letter → takes a value
}

// hasSubcommands says whether a positional argument must be a subcommand.
func (h *cliHelp) hasSubcommands() bool {
	for s := range h.subcommands {
		if s != "help" && s != "completion" {
			return true
		}
	}
	return false
}

// flagLineRE is one flag of cobra's help: shorthand, name, and the value's
// name (the type, or a `NAME` from the usage, which may hold spaces) when
// the flag takes a value; two spaces then start the usage.
var flagLineRE = regexp.MustCompile(`^\s+(?:-([A-Za-z0-9]), )?--([A-Za-z0-9][A-Za-z0-9_-]*)(?: (\S+(?: \S+)*?))?(?:\s{2,}|$)`)

// parseHelp reads cobra's --help output.
func parseHelp(out string) *cliHelp {
	h := &cliHelp{subcommands: map[string]bool{}, flags: map[string]bool{}, short: map[string]bool{}}
	section := ""
	for _, line := range strings.Split(out, "\n") {
		if line != "" && !strings.HasPrefix(line, " ") {
			section = strings.TrimSpace(line)
			continue
		}
		switch section {
		case "Available Commands:", "Additional Commands:":
			if f := strings.Fields(line); len(f) > 0 {
				h.subcommands[f[0]] = true
			}
		case "Flags:", "Global Flags:":
			if m := flagLineRE.FindStringSubmatch(line); m != nil {
				takes := m[3] != ""
				h.flags[m[2]] = takes
				if m[1] != "" {
					h.short[m[1]] = takes
				}
			}
		}
	}
	return h
}

// helpCache runs BINARY SUBCOMMAND... --help once per command.
type helpCache struct {
	dir   string
	cache map[string]*cliHelp
}

func (c *helpCache) get(path []string) (*cliHelp, error) {
	key := strings.Join(path, " ")
	if h, ok := c.cache[key]; ok {
		return h, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append(append([]string{}, path[1:]...), "--help")
	out, err := exec.CommandContext(ctx, filepath.Join(c.dir, path[0]), args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s --help: %w: %s", key, err, out)
	}
	h := parseHelp(string(out))
	if len(h.flags) == 0 {
		return nil, fmt.Errorf("%s --help lists no flags:\n%s", key, out)
	}
	c.cache[key] = h
	return h, nil
}

// rolloutBinaries are the programs whose arguments are checked.
var rolloutBinaries = map[string]bool{"rollout": true, "rollout-coord": true, "rollout-worker": true}

// checkArgs returns what is wrong with one invocation of a rollout binary:
// every unknown flag, and an unknown subcommand (which ends the check).
func checkArgs(c *helpCache, binary string, args []string) ([]string, error) {
	path := []string{binary}
	h, err := c.get(path)
	if err != nil {
		return nil, err
	}
	var problems []string
	positional := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		cmd := strings.Join(path, " ")
		switch {
		case a == opaque || a == "...":
			// Expands at run time, or an elision of the docs.
		case a == "--":
			return problems, nil
		case strings.HasPrefix(a, "--"):
			name, _, hasValue := strings.Cut(a[2:], "=")
			takes, ok := h.flags[name]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: unknown flag --%s (see %s --help)", cmd, name, cmd))
			}
			if takes && !hasValue {
				i++
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			takes, ok := h.short[a[1:2]]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: unknown flag -%s (see %s --help)", cmd, a[1:2], cmd))
			}
			if takes && len(a) == 2 {
				i++
			}
		case !positional && h.hasSubcommands():
			if !h.subcommands[a] {
				return append(problems, fmt.Sprintf("%s: unknown subcommand %q (see %s --help)", cmd, a, cmd)), nil
			}
			path = append(path, a)
			if h, err = c.get(path); err != nil {
				return nil, err
			}
		default:
			positional = true
		}
	}
	return problems, nil
}

// checkCommands returns a FILE:LINE problem for every make target and every
// rollout subcommand or flag in the files' shell blocks that does not exist.
func checkCommands(root string, files []string, targets map[string]bool, c *helpCache) ([]string, int, error) {
	var problems []string
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, 0, err
		}
		cmds, err := shellBlocks(string(b))
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", f, err)
		}
		for _, sc := range cmds {
			prog, args := program(sc.words)
			where := fmt.Sprintf("%s:%d", f, sc.line)
			base := prog[strings.LastIndex(prog, "/")+1:]
			switch {
			case prog == "make":
				checked++
				for _, a := range args {
					if a == opaque || strings.HasPrefix(a, "-") || strings.Contains(a, "=") {
						continue
					}
					if !targets[a] {
						problems = append(problems, fmt.Sprintf("%s: make %s: the Makefile has no target %q", where, a, a))
					}
				}
			case rolloutBinaries[base] && (prog == base || strings.HasSuffix(prog, "bin/"+base)):
				checked++
				msgs, err := checkArgs(c, base, args)
				if err != nil {
					return nil, 0, fmt.Errorf("%s: %w", where, err)
				}
				for _, m := range msgs {
					problems = append(problems, where+": "+m)
				}
			}
		}
	}
	return problems, checked, nil
}

func TestShellCommandsExist(t *testing.T) {
	root := repoRoot(t)
	targets, err := makeTargets(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	c := &helpCache{dir: binDir, cache: map[string]*cliHelp{}}
	problems, checked, err := checkCommands(root, markdownFiles(t, root), targets, c)
	require.NoError(t, err)
	t.Logf("checked %d make and rollout commands", checked)
	require.Empty(t, problems, "commands in the docs that do not exist:\n%s", strings.Join(problems, "\n"))
	require.Greater(t, checked, 20, "too few commands found: the shell-block parser is broken")
}

func TestPackageMapNamesEveryPackage(t *testing.T) {
	root := repoRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err, "go list ./...")
	mod := exec.CommandContext(ctx, "go", "list", "-m")
	mod.Dir = root
	modOut, err := mod.Output()
	require.NoError(t, err, "go list -m")
	prefix := strings.TrimSpace(string(modOut)) + "/"

	b, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	require.NoError(t, err)
	doc := string(b)
	start := strings.Index(doc, "\n## The packages\n")
	require.GreaterOrEqual(t, start, 0, "docs/ARCHITECTURE.md has no section \"## The packages\"")
	section := doc[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	var missing []string
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(p, prefix)
		if !strings.Contains(section, "`"+rel+"`") {
			missing = append(missing, rel)
		}
	}
	require.Empty(t, missing, "docs/ARCHITECTURE.md's package map (## The packages) does not name these packages as `path`: %v", missing)
}

func TestAnchorFollowsGitHub(t *testing.T) {
	for heading, want := range map[string]string{
		"A cluster by hand":                     "a-cluster-by-hand",
		"GPU kernels (`gpu/`)":                  "gpu-kernels-gpu",
		"Targets (issue 11)":                    "targets-issue-11",
		"Plaintext: `--insecure`":               "plaintext---insecure",
		"Gateway (`rollout gateway`)":           "gateway-rollout-gateway",
		"A stalled run (missing input object)":  "a-stalled-run-missing-input-object",
		"see [STORE.md](STORE.md) and **bold**": "see-storemd-and-bold",
	} {
		require.Equal(t, want, anchor(heading), heading)
	}
	a := anchors("# X\n## Same\n```sh\n# not a heading\n```\n## Same\n")
	require.Equal(t, map[string]bool{"x": true, "same": true, "same-1": true}, a)
}

func TestSplitCommands(t *testing.T) {
	for line, want := range map[string][][]string{
		`bin/rollout submit --coord $C --run "a b" $(t cli) &`: {{"bin/rollout", "submit", "--coord", opaque, "--run", "a b", opaque}},
		`make build && bin/rollout status | head -3; echo ok`:  {{"make", "build"}, {"bin/rollout", "status"}, {"head", "-3"}, {"echo", "ok"}},
		`X=1 make test 2>&1 # a comment`:                       {{"X=1", "make", "test", "2>&1"}},
		`t() { echo --tls-ca tls/$1.pem; }`:                    {{"t()", "{", "echo", "--tls-ca", opaque}, {"}"}},
	} {
		got, err := splitCommands(line)
		require.NoError(t, err, line)
		require.Equal(t, want, got, line)
	}
	_, err := splitCommands(`echo "open`)
	require.ErrorIs(t, err, errUnbalanced)
}

// TestCheckersCatchMistakes: a bad link, a missing heading, a make target
// that does not exist, and unknown flags and subcommands are each reported
// with their file and line.
func TestCheckersCatchMistakes(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "docs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "docs", "A.md"), []byte("# A\n\n## Real heading\n"), 0o644))
	readme := "# R\n" + // 1
		"[ok](docs/A.md#real-heading) [gone](docs/NOPE.md) [anchor](docs/A.md#nope) `[code](x.md)`\n" + // 2
		"[self](#r) [web](https://example.com/x.md)\n" + // 3
		"```sh\n" + // 4
		"# make nothing\n" + // 5
		"make build demoo\n" + // 6
		"bin/rollout submit --coord $C --inptu f $(t cli) &\n" + // 7
		"rollout clutser --coord $C\n" + // 8
		"bin/rollout-worker --id w1 --backend mock -z \\\n" + // 9
		"  --bogus 1\n" + // 10
		"bin/rollout gateway keys add team --keys f --insecure\n" + // 11
		"X=1 bin/rollout-coord recover --data d --peers p\n" + // 12
		"```\n" + // 13
		"```python\n" + // 14
		"rollout --not-checked\n" + // 15
		"```\n"
	require.NoError(t, os.WriteFile(filepath.Join(root, "README.md"), []byte(readme), 0o644))
	files := []string{"README.md", "docs/A.md"}

	problems, err := checkLinks(root, files)
	require.NoError(t, err)
	require.Equal(t, []string{
		`README.md:2: link "docs/NOPE.md": docs/NOPE.md does not exist`,
		`README.md:2: link "docs/A.md#nope": docs/A.md has no heading #nope`,
	}, problems)

	c := &helpCache{dir: binDir, cache: map[string]*cliHelp{}}
	problems, checked, err := checkCommands(root, files, map[string]bool{"build": true}, c)
	require.NoError(t, err)
	require.Equal(t, 6, checked)
	require.Equal(t, []string{
		`README.md:6: make demoo: the Makefile has no target "demoo"`,
		`README.md:7: rollout submit: unknown flag --inptu (see rollout submit --help)`,
		`README.md:8: rollout: unknown subcommand "clutser" (see rollout --help)`,
		`README.md:9: rollout-worker: unknown flag -z (see rollout-worker --help)`,
		`README.md:9: rollout-worker: unknown flag --bogus (see rollout-worker --help)`,
	}, problems)
}

func TestMakeTargets(t *testing.T) {
	p := filepath.Join(t.TempDir(), "Makefile")
	require.NoError(t, os.WriteFile(p, []byte("X := 1\nY ?= 2\nall: build\n.PHONY: all\nbuild test:\n\tgo build ./...\n"), 0o644))
	got, err := makeTargets(p)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"all": true, ".PHONY": true, "build": true, "test": true}, got)
}
