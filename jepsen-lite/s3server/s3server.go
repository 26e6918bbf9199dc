// Package s3server runs the harness's real S3-compatible server: versitygw
// (`make tools-s3` builds it into the repository's .tools/) serving one
// bucket from a directory with its posix backend, on an address of the
// harness's own network (loopback, or the control namespace's address when
// the processes run in network namespaces). The store nemesis stops,
// pauses and slows it through Kill, Restart, Pause and Resume.
//
// It is the harness's counterpart of store/s3test, which is for tests only
// (it takes a testing.TB and no binary may link it).
package s3server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rollout/rollout/internal/freeport"
	"github.com/rollout/rollout/internal/procs"
	"github.com/rollout/rollout/store/versitygw"
)

var (
	// ErrNoBinary means versitygw was not found.
	ErrNoBinary = errors.New("s3server: versitygw not found")
	// ErrStart means versitygw did not start serving.
	ErrStart = errors.New("s3server: versitygw did not start")
	// ErrInvalidConfig names a bad Config field.
	ErrInvalidConfig = errors.New("s3server: invalid config")
)

// BinaryEnv names an environment variable that may point at the versitygw
// binary (the one store/s3test reads too).
const BinaryEnv = versitygw.Env

// Credentials of the server: fixed, since the server only ever listens on
// the harness's private network.
const (
	AccessKey = "jepsen-lite"
	SecretKey = "jepsen-lite-secret"
	// Bucket is the one bucket the server holds.
	Bucket = "jepsen"
)

// Binary finds versitygw (versitygw.Find): $ROLLOUT_VERSITYGW; else
// .tools/versitygw in the module above the working directory or above each
// of near (for example the harness's --bin directory); else versitygw on
// PATH. ErrNoBinary says where it looked.
func Binary(near ...string) (string, error) {
	p, err := versitygw.Find(near...)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoBinary, err)
	}
	return p, nil
}

// Config configures a Server.
type Config struct {
	// Bin is the versitygw binary. Required.
	Bin string
	// Dir receives the bucket directory and the server's log. Required.
	Dir string
	// Host is the address to listen on (default 127.0.0.1).
	Host string
	// StartTimeout bounds waiting for the server to accept connections
	// (default 30s).
	StartTimeout time.Duration
}

// Server is a running versitygw with one bucket.
type Server struct {
	cfg  Config
	addr string
	port int
	// URL is the store URL of the bucket (the form docs/STORE.md gives for
	// S3-compatible servers).
	URL string
	// Log is the server's log file (appended to across restarts).
	Log string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
}

// Env returns the environment an S3 client of the server needs: its
// credentials and settings that keep the AWS SDK off the machine's own
// configuration. dir is where the (absent) config files are named.
func Env(dir string) map[string]string {
	return map[string]string{
		"AWS_ACCESS_KEY_ID":           AccessKey,
		"AWS_SECRET_ACCESS_KEY":       SecretKey,
		"AWS_REGION":                  "us-east-1",
		"AWS_SESSION_TOKEN":           "",
		"AWS_PROFILE":                 "",
		"AWS_CONFIG_FILE":             filepath.Join(dir, "no-aws-config"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "no-aws-credentials"),
		"AWS_EC2_METADATA_DISABLED":   "true",
	}
}

// Start starts versitygw on a free port of cfg.Host and waits until it
// listens there (see Restart).
func Start(cfg Config) (*Server, error) {
	switch {
	case cfg.Bin == "":
		return nil, fmt.Errorf("%w: Bin is required", ErrInvalidConfig)
	case cfg.Dir == "":
		return nil, fmt.Errorf("%w: Dir is required", ErrInvalidConfig)
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "buckets", Bucket), 0o755); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStart, err)
	}
	// A port below the kernel's ephemeral range: no outgoing connection
	// (the store's clients redialling a killed server included) can take
	// it between this check and the server's bind, or before a Restart.
	ports, err := freeport.PortsOn(cfg.Host, 1)
	if err != nil {
		return nil, fmt.Errorf("%w: no free port on %s: %v", ErrStart, cfg.Host, err)
	}
	port := ports[0]
	addr := net.JoinHostPort(cfg.Host, strconv.Itoa(port))
	s := &Server{cfg: cfg, addr: addr, port: port, Log: filepath.Join(cfg.Dir, "versitygw.log")}
	s.URL = fmt.Sprintf("s3://%s?endpoint=http://%s&region=us-east-1&use_path_style=true", Bucket, addr)
	if err := s.Restart(); err != nil {
		return nil, err
	}
	return s, nil
}

// Addr returns the host:port the server listens on.
func (s *Server) Addr() string { return s.addr }

// BucketDir returns the directory holding the bucket's objects.
func (s *Server) BucketDir() string { return filepath.Join(s.cfg.Dir, "buckets", Bucket) }

// Running reports whether the server process runs (paused or not).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Kill SIGKILLs the server and waits for it to exit (its data stays).
// Killing a stopped server does nothing.
func (s *Server) Kill() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd, s.paused = nil, false
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Kill()
	select {
	case <-exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("s3server: versitygw (pid %d) did not exit within 10s of SIGKILL", cmd.Process.Pid)
	}
}

// Close stops the server.
func (s *Server) Close() error { return s.Kill() }

// Pause SIGSTOPs the server and returns once it is stopped
// (procs.WaitStopped: kill returns before a running thread stops):
// connections are accepted by the kernel and nothing answers until Resume.
func (s *Server) Pause() error {
	if err := s.signal(syscall.SIGSTOP, true); err != nil {
		return err
	}
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return nil // killed meanwhile
	}
	return procs.WaitStopped(cmd.Process.Pid, 10*time.Second)
}

// Resume SIGCONTs a paused server.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, paused bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("s3server: versitygw is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("s3server: %v to versitygw: %w", sig, err)
	}
	s.paused = paused
	return nil
}

// Restart starts the server (after Kill; a running one is left alone) on
// the same address and waits until the process it started holds the
// listening socket of that address (not merely until a dial succeeds).
// ErrStart says when the process exits first or the port is held by
// another process.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrStart, err)
	}
	cmd := exec.Command(s.cfg.Bin, "--access", AccessKey, "--secret", SecretKey, "--port", s.addr,
		"posix", filepath.Join(s.cfg.Dir, "buckets"))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Never outlive the harness.
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%w: %s: %v", ErrStart, s.cfg.Bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	deadline := time.Now().Add(s.cfg.StartTimeout)
	for {
		// Ready means this process holds the listening socket: a dial
		// alone would be answered by whatever else holds the port.
		ours, err := versitygw.Listening(cmd.Process.Pid, s.port)
		if err == nil && ours {
			s.cmd, s.exited, s.paused = cmd, exited, false
			return nil
		}
		select {
		case <-exited:
			out, _ := os.ReadFile(s.Log)
			return fmt.Errorf("%w: it exited%s: %s", ErrStart, s.heldBy(), lastLines(string(out), 5))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			why := fmt.Sprintf("it did not listen on %s within %v%s", s.addr, s.cfg.StartTimeout, s.heldBy())
			if err != nil {
				why += fmt.Sprintf(" (%v)", err)
			}
			return fmt.Errorf("%w: %s", ErrStart, why)
		}
	}
}

// heldBy says that the server's port is held by another process, when it
// is (the reason a restart on the same address cannot serve), else "".
func (s *Server) heldBy() string {
	if versitygw.PortHeld(s.port) {
		return fmt.Sprintf(" (port %d is held by another process)", s.port)
	}
	return ""
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
