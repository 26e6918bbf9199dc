// Package s3test starts a real S3-compatible server for tests: versitygw
// (`make tools-s3` builds it into the repository's .tools/) serving a
// temporary directory on a free loopback port. It is for tests only: it
// imports testing, and no binary may link it (`make cross` checks).
//
// Without the binary a test is skipped with the reason, except under
// CI=true, where it fails.
package s3test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollout/rollout/internal/freeport"
	"github.com/rollout/rollout/store/versitygw"
)

// BinaryEnv names an environment variable that may point at the versitygw
// binary; else .tools/versitygw above the test's directory, else PATH.
const BinaryEnv = versitygw.Env

// Server is a running versitygw with one bucket.
type Server struct {
	// URL is the store URL of the bucket:
	// s3://BUCKET?endpoint=http://127.0.0.1:PORT&region=us-east-1&use_path_style=true.
	URL string
	// Endpoint is http://127.0.0.1:PORT; Bucket the bucket's name; Dir the
	// directory the server keeps its buckets in (the bucket is Dir/Bucket).
	Endpoint, Bucket, Dir string
	// Env is what an S3 client needs in its environment: the credentials,
	// and settings that keep it off the machine's own AWS configuration.
	Env map[string]string

	bin, addr, log string
	port           int
	cmd            *exec.Cmd
	exited         chan struct{}
}

// Binary returns the path of versitygw (versitygw.Find):
// $ROLLOUT_VERSITYGW, else .tools/versitygw in the module above the working
// directory, else versitygw on PATH.
func Binary() (string, error) { return versitygw.Find() }

// Start starts versitygw with a bucket named "test" and stops it when the
// test ends. Without the binary the test is skipped, saying why (under
// CI=true it fails).
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("s3test: %v", err)
		}
		t.Skipf("s3test: %v (with CI=true this fails)", err)
	}
	dir := t.TempDir()
	s := &Server{Bucket: "test", Dir: filepath.Join(dir, "buckets"), bin: bin, log: filepath.Join(dir, "versitygw.log")}
	if err := os.MkdirAll(filepath.Join(s.Dir, s.Bucket), 0o755); err != nil {
		t.Fatal(err)
	}
	// A port below the kernel's ephemeral range: no outgoing connection
	// (a client redialling a stopped server included) can take it before
	// the server binds it, at Start or at a Restart.
	ports, err := freeport.Ports(1)
	if err != nil {
		t.Fatal(err)
	}
	s.port = ports[0]
	s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	s.Endpoint = "http://" + s.addr
	s.URL = fmt.Sprintf("s3://%s?endpoint=%s&region=us-east-1&use_path_style=true", s.Bucket, s.Endpoint)
	s.Env = map[string]string{
		"AWS_ACCESS_KEY_ID":           "rollout-test",
		"AWS_SECRET_ACCESS_KEY":       "rollout-test-secret",
		"AWS_REGION":                  "us-east-1",
		"AWS_SESSION_TOKEN":           "",
		"AWS_PROFILE":                 "",
		"AWS_CONFIG_FILE":             filepath.Join(dir, "no-aws-config"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "no-aws-credentials"),
		"AWS_EC2_METADATA_DISABLED":   "true",
	}
	t.Cleanup(s.Stop)
	if err := s.Restart(); err != nil {
		t.Fatalf("s3test: %v", err)
	}
	return s
}

// Setenv sets s.Env in the test's environment (t.Setenv: restored when
// the test ends; not for parallel tests).
func (s *Server) Setenv(t testing.TB) {
	for k, v := range s.Env {
		t.Setenv(k, v)
	}
}

// Environ returns os.Environ() with s.Env applied, for a child process.
func (s *Server) Environ() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := s.Env[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range s.Env {
		out = append(out, k+"="+v)
	}
	return out
}

// Stop stops the server (its data stays in Dir); Restart starts it again
// on the same port. A stopped server is how a test makes the store
// unreachable.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Restart starts the server (after Stop) and waits until the process it
// started holds the listening socket of its address (up to 30 s); a port
// that another process took meanwhile is an error saying so.
func (s *Server) Restart() error {
	if s.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "--access", s.Env["AWS_ACCESS_KEY_ID"], "--secret", s.Env["AWS_SECRET_ACCESS_KEY"],
		"--port", s.addr, "posix", s.Dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Ready means this process holds the listening socket: a dial
		// alone would be answered by whatever else holds the port.
		ours, err := versitygw.Listening(cmd.Process.Pid, s.port)
		if err == nil && ours {
			return nil
		}
		held := ""
		if versitygw.PortHeld(s.port) {
			held = fmt.Sprintf(" (port %d is held by another process)", s.port)
		}
		select {
		case <-exited:
			s.cmd = nil
			out, _ := os.ReadFile(s.log)
			return fmt.Errorf("versitygw exited at start%s: %s", held, strings.TrimSpace(string(out)))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			if err != nil {
				held += fmt.Sprintf(" (%v)", err)
			}
			return fmt.Errorf("versitygw did not listen on %s within 30s%s", s.addr, held)
		}
	}
}
