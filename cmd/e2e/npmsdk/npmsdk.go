// Package npmsdk runs Node.js scripts that use the official `openai` npm
// package, so that tests can drive an OpenAI-compatible HTTP server (the
// gateway of issue 18) with the real client the users have. It is for tests
// only: it imports testing, and no binary may link it (`make cross` checks).
//
// `make tools-npm` installs the pinned package (Version) into
// .tools/npm/node_modules of the repository, and Debian's nodejs where node
// is missing. Find locates node and the package: $ROLLOUT_OPENAI_NODE_MODULES
// (a node_modules directory holding openai/, of any version), else
// .tools/npm/node_modules above the working directory (which must hold
// Version). Where either is missing, Find's error (ErrNodeMissing,
// ErrSDKMissing) names `make tools-npm`, and Require fails the test with it:
// these tests never skip.
//
// A script is ES module source (.mjs) and may `import OpenAI from "openai"`.
// Node resolves a bare import of an ES module from the node_modules
// directories above the script's own file, never from NODE_PATH (which only
// CommonJS require honours), so Run writes the script into a fresh temporary
// directory beside a node_modules symlink to the package's directory; it
// also sets NODE_PATH for require(). The script's environment is the test's,
// less every OPENAI_* variable (so that the machine's own never reach the
// SDK), plus OPENAI_BASE_URL and OPENAI_API_KEY from Options (the SDK's
// constructor reads both: `new OpenAI()` needs no arguments) and
// Options.Env.
//
// # What the SDK sends (openai 7.55.0 on node 20, observed)
//
// Every request has "Authorization: Bearer KEY", "User-Agent: OpenAI/JS
// 7.55.0", "X-Stainless-Retry-Count: N" (0 on the first try), other
// X-Stainless-* headers (lang, package version, os, arch, runtime) and
// "Accept: application/json" unless said otherwise; paths are the base
// URL's path (e.g. /v1) followed by the resource's:
//
//   - files.create({file: fs.createReadStream(p), purpose: "batch"}):
//     POST /v1/files, "Content-Type: multipart/form-data; boundary=…",
//     sent chunked (no Content-Length) for a stream (with a Content-Length
//     for toFile(buffer, name)); parts in this order: "file" (filename the
//     path's base name, Content-Type application/octet-stream, the bytes),
//     then "purpose" (the text "batch").
//   - files.content(id): GET /v1/files/{id}/content with
//     "Accept: application/binary"; it resolves to the fetch Response itself
//     (await r.text() for the bytes), whatever the content type.
//   - files.list({purpose, limit, after, order}): GET /v1/files?… with the
//     given parameters in that order; files.retrieve(id): GET
//     /v1/files/{id}; files.delete(id): DELETE /v1/files/{id}.
//   - batches.create({input_file_id, endpoint, completion_window,
//     metadata}): POST /v1/batches, "Content-Type: application/json", the
//     object as given, keys in the caller's order.
//   - batches.retrieve(id): GET /v1/batches/{id}.
//   - batches.list({limit, after}): GET /v1/batches?limit=L&after=A (only
//     those given). A page is a CursorPage: page.data, page.has_more;
//     iterating (for await … of client.batches.list({limit})) asks for the
//     next page with after= the id of the page's last element (not
//     "last_id") for as long as "has_more" is true.
//   - batches.cancel(id): POST /v1/batches/{id}/cancel with no body
//     ("Content-Length: 0", no Content-Type).
//
// Retries: by default 2 (maxRetries), of a connection error and of 408, 409,
// 429 and every 5xx ("x-should-retry: true" or "false" in the response
// overrides the status), each with X-Stainless-Retry-Count one higher. The
// delay is "retry-after-ms" (milliseconds) or "Retry-After" (seconds or an
// HTTP date) when in [0, 60 s], else 0.5 s doubling up to 8 s, less up to 25%
// jitter. The default timeout is 10 minutes.
//
// Errors: a non-2xx answer (after the retries) throws an APIError subclass
// by status (BadRequestError 400, AuthenticationError 401,
// PermissionDeniedError 403, NotFoundError 404, ConflictError 409,
// UnprocessableEntityError 422, RateLimitError 429, InternalServerError
// 5xx). For a body {"error": {"message", "type", "param", "code"}} its
// fields are: status (the HTTP status), error (that inner object), code,
// param and type (copied from it), message ("STATUS MESSAGE", e.g.
// "404 No batch found"), requestID (the x-request-id header) and headers.
// A JSON object without "error" is taken whole as error; a body that is not
// JSON leaves error, code, param and type undefined, and message is
// "STATUS BODY-TEXT". docs/OPENAI-SDK-REQUESTS.md says the same for the
// gateway's author; TestRequestShapes pins it.
package npmsdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollout/rollout/internal/testbin"
)

// Version is the openai npm package that `make tools-npm` installs; the
// Makefile's OPENAI_NPM_VERSION must say the same.
const Version = "7.55.0"

// ModulesEnv names an environment variable that may point at a
// node_modules directory holding the openai package.
const ModulesEnv = "ROLLOUT_OPENAI_NODE_MODULES"

// DefaultTimeout bounds a script when Options.Timeout is 0.
const DefaultTimeout = 2 * time.Minute

// maxTail bounds the standard error quoted in an error.
const maxTail = 4096

var (
	// ErrNodeMissing means node is not on PATH.
	ErrNodeMissing = errors.New("npmsdk: node not found (make tools-npm installs it)")
	// ErrSDKMissing means the openai npm package was not found, or not at
	// Version where `make tools-npm` puts it.
	ErrSDKMissing = errors.New("npmsdk: the openai npm package is not installed (make tools-npm installs it)")
	// ErrScript means the script exited with a non-zero status.
	ErrScript = errors.New("npmsdk: script failed")
	// ErrTimeout means the script ran past its timeout and was killed.
	ErrTimeout = errors.New("npmsdk: script timed out")
)

// SDK is a located node and openai package. Its methods are safe for
// concurrent use: each run has its own directory and process.
type SDK struct {
	// Node is the path of the node binary.
	Node string
	// NodeModules is the node_modules directory holding openai/.
	NodeModules string
	// Version is the installed package's version.
	Version string
}

// Find locates node and the openai package (see the package doc). The error
// matches ErrNodeMissing or ErrSDKMissing and names `make tools-npm`.
func Find() (SDK, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return SDK{}, fmt.Errorf("%w: it is not on PATH", ErrNodeMissing)
	}
	if dir := os.Getenv(ModulesEnv); dir != "" {
		v, err := packageVersion(dir)
		if err != nil {
			return SDK{}, fmt.Errorf("%w: $%s=%s: %v", ErrSDKMissing, ModulesEnv, dir, err)
		}
		return SDK{Node: node, NodeModules: dir, Version: v}, nil
	}
	root, err := testbin.ModuleRoot()
	if err != nil {
		return SDK{}, fmt.Errorf("%w: %v, and $%s is unset", ErrSDKMissing, err, ModulesEnv)
	}
	dir := filepath.Join(root, ".tools", "npm", "node_modules")
	v, err := packageVersion(dir)
	if err != nil {
		return SDK{}, fmt.Errorf("%w: %v: run `make tools-npm` (or set $%s)", ErrSDKMissing, err, ModulesEnv)
	}
	if v != Version {
		return SDK{}, fmt.Errorf("%w: %s holds openai %s, want %s: run `make tools-npm`", ErrSDKMissing, dir, v, Version)
	}
	return SDK{Node: node, NodeModules: dir, Version: v}, nil
}

// Require is Find that fails the test (never skips) with Find's error.
func Require(t testing.TB) SDK {
	t.Helper()
	s, err := Find()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return s
}

// packageVersion returns the version in dir/openai/package.json.
func packageVersion(dir string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "openai", "package.json"))
	if err != nil {
		return "", err
	}
	var p struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return "", fmt.Errorf("%s: %v", filepath.Join(dir, "openai", "package.json"), err)
	}
	if p.Name != "openai" || p.Version == "" {
		return "", fmt.Errorf("%s is not the openai package's", filepath.Join(dir, "openai", "package.json"))
	}
	return p.Version, nil
}

// Options are a script's inputs.
type Options struct {
	// BaseURL and APIKey become OPENAI_BASE_URL and OPENAI_API_KEY (when
	// not empty), which the SDK's constructor reads. BaseURL is the API's
	// root as the SDK takes it, e.g. "http://127.0.0.1:8080/v1".
	BaseURL, APIKey string
	// Env adds (or, with a value, replaces) environment variables.
	Env map[string]string
	// Args are passed to the script (process.argv.slice(2)).
	Args []string
	// Files are written beside the script (name to content); a name must
	// be a plain file name. The script finds them with
	// new URL(name, import.meta.url) or in process.cwd(), which is the
	// script's directory.
	Files map[string][]byte
	// Timeout bounds the run (DefaultTimeout when 0).
	Timeout time.Duration
}

// Result is what a script wrote.
type Result struct {
	Stdout, Stderr []byte
}

// Run runs script (ES module source) with node in a temporary directory it
// removes afterwards (see the package doc for its environment). It returns
// the script's output also when the script fails: the error then matches
// ErrScript (a non-zero exit) or ErrTimeout, and quotes the end of its
// standard error.
func (s SDK) Run(ctx context.Context, script string, opts Options) (Result, error) {
	dir, err := os.MkdirTemp("", "npmsdk-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	if err := os.Symlink(s.NodeModules, filepath.Join(dir, "node_modules")); err != nil {
		return Result{}, err
	}
	for name, content := range opts.Files {
		if name == "" || name != filepath.Base(name) || name == "node_modules" || name == "script.mjs" || name == "." || name == ".." {
			return Result{}, fmt.Errorf("npmsdk: Files: %q is not a plain file name (or is taken)", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			return Result{}, err
		}
	}
	path := filepath.Join(dir, "script.mjs")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		return Result{}, err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, s.Node, append([]string{path}, opts.Args...)...)
	cmd.Dir = dir
	cmd.Env = s.env(opts)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	res := Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	switch {
	case err == nil:
		return res, nil
	case rctx.Err() != nil && ctx.Err() == nil:
		return res, fmt.Errorf("%w after %v; stderr: %s", ErrTimeout, timeout, tail(res.Stderr))
	case ctx.Err() != nil:
		return res, ctx.Err()
	default:
		return res, fmt.Errorf("%w: %v; stderr: %s", ErrScript, err, tail(res.Stderr))
	}
}

// RunFile is Run with the script read from path (a .mjs file, for example
// under a test's testdata/). The script runs from a copy in the temporary
// directory: files it imports or reads by a relative path must be passed in
// Options.Files.
func (s SDK) RunFile(ctx context.Context, path string, opts Options) (Result, error) {
	script, err := os.ReadFile(path)
	if err != nil {
		return Result{}, fmt.Errorf("npmsdk: %w", err)
	}
	return s.Run(ctx, string(script), opts)
}

// RunT is Run for a test: it fails the test when the script fails, showing
// both outputs, and returns the script's standard output.
func (s SDK) RunT(t testing.TB, script string, opts Options) string {
	t.Helper()
	res, err := s.Run(context.Background(), script, opts)
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// env is the script's environment (see the package doc).
func (s SDK) env(opts Options) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "OPENAI_") || k == "NODE_PATH" {
			continue
		}
		if _, ok := opts.Env[k]; ok {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "NODE_PATH="+s.NodeModules)
	if opts.BaseURL != "" {
		env = append(env, "OPENAI_BASE_URL="+opts.BaseURL)
	}
	if opts.APIKey != "" {
		env = append(env, "OPENAI_API_KEY="+opts.APIKey)
	}
	for k, v := range opts.Env {
		env = append(env, k+"="+v)
	}
	return env
}

// tail is the end of b, at most maxTail bytes, or "(empty)".
func tail(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "(empty)"
	}
	if len(b) > maxTail {
		b = append([]byte("..."), b[len(b)-maxTail:]...)
	}
	return string(b)
}
