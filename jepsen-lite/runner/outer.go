//go:build linux

// Namespaces and Pdeathsig are Linux's.

package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/rollout/rollout/jepsen-lite/network"
)

// RunInNamespaces runs the harness inside network namespaces. It creates
// them for cfg's scenario (after deleting those a crashed run with the same
// out directory left), runs argv (the harness itself, given the flags that
// make it attach with Prefix(cfg.OutDir)) inside the control namespace,
// forwards SIGINT and SIGTERM to it, and deletes every namespace on its
// way out, whatever happened. It returns argv's exit code. It needs root
// (see network.CanNetNS); when the namespaces cannot be created it returns
// ErrNoNamespaces having run nothing.
func RunInNamespaces(ctx context.Context, cfg Config, argv []string) (code int, err error) {
	if len(argv) == 0 {
		return 0, fmt.Errorf("%w: no command to run", ErrInvalidConfig)
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrHarness, err)
	}
	unlock, err := lockDir(cfg.OutDir)
	if err != nil {
		return 0, err
	}
	defer unlock()
	replicas, workers := Shape(cfg)
	ncfg := network.NetNSConfig{Prefix: Prefix(cfg.OutDir), Replicas: replicas, Workers: workers, Logger: cfg.Logger}
	// Signals from now on are forwarded, never fatal, so the namespaces
	// always go.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	n, err := network.CreateNetNS(cctx, ncfg)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoNamespaces, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if derr := n.Destroy(dctx); derr != nil {
			err = errors.Join(err, fmt.Errorf("%w: deleting network namespaces: %v", ErrHarness, derr))
		}
	}()

	cmd := exec.Command("ip", append([]string{"netns", "exec", n.Namespace(network.Ctl)}, argv...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("%w: starting the harness in %s: %v", ErrHarness, n.Namespace(network.Ctl), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var killAt <-chan time.Time
	ctxDone := ctx.Done()
	for {
		select {
		case werr := <-done:
			var ee *exec.ExitError
			switch {
			case werr == nil:
				return 0, nil
			case errors.As(werr, &ee) && ee.ExitCode() >= 0:
				return ee.ExitCode(), nil
			default:
				return 0, fmt.Errorf("%w: the harness in %s: %v", ErrHarness, n.Namespace(network.Ctl), werr)
			}
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
			if killAt == nil {
				killAt = time.After(60 * time.Second)
			}
		case <-ctxDone:
			ctxDone = nil
			_ = cmd.Process.Signal(syscall.SIGTERM)
			if killAt == nil {
				killAt = time.After(60 * time.Second)
			}
		case <-killAt:
			_ = cmd.Process.Kill()
		}
	}
}
