package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// errProbeFailed is a probe whose endpoint answered other than 200 (the
// replica is not live, or not ready).
var errProbeFailed = errors.New("probe failed")

// probeOptions are the flags of rollout-coord probe.
type probeOptions struct {
	live, ready bool
	addr        string
	timeout     time.Duration
}

// probeCmd is `rollout-coord probe`: an exec probe for where an HTTP probe
// is unwanted. It GETs the replica's /readyz (or /livez with --live),
// prints the one-line reason, and exits 0 on 200 and 1 otherwise.
func probeCmd() *cobra.Command {
	p := &probeOptions{}
	cmd := &cobra.Command{
		Use:   "probe [--live|--ready] --health-addr H:P [--timeout 2s]",
		Short: "Ask a replica's health endpoint (--health-addr) whether it is ready (default) or live: exit 0 when it is, 1 when not",
		Long: "probe GETs /readyz (or /livez with --live) from the replica's --health-addr, prints the one-line reason " +
			"and exits 0 when the answer is 200, 1 otherwise (not ready, not live, or unreachable). " +
			"An --health-addr without a host, or with 0.0.0.0 or ::, is asked on loopback, so the replica's own flag value works as is.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			line, err := p.run(cmd.Context())
			if line != "" {
				fmt.Fprintln(cmd.OutOrStdout(), line)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&p.live, "live", false, "ask /livez: is the process serving with its Raft node running")
	f.BoolVar(&p.ready, "ready", false, "ask /readyz (the default): a member that knows the leader and has applied what is committed")
	f.StringVar(&p.addr, "health-addr", "", "the replica's --health-addr (required)")
	f.DurationVar(&p.timeout, "timeout", 2*time.Second, "give up after this long")
	return cmd
}

// url validates the flags and returns the endpoint to GET.
func (p *probeOptions) url() (string, error) {
	if p.live && p.ready {
		return "", errors.New("--live and --ready are mutually exclusive")
	}
	if p.addr == "" {
		return "", errors.New("missing required flag --health-addr (the replica's --health-addr)")
	}
	if p.timeout <= 0 {
		return "", fmt.Errorf("--timeout %s must be positive", p.timeout)
	}
	if err := checkHostPort(p.addr); err != nil {
		return "", fmt.Errorf("--health-addr: %w", err)
	}
	host, port, _ := net.SplitHostPort(p.addr)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	path := "/readyz"
	if p.live {
		path = "/livez"
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}

// run asks the endpoint and returns its reason line; the error is nil
// only for a 200.
func (p *probeOptions) run(ctx context.Context) (string, error) {
	url, err := p.url()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	// No keep-alive, no proxy from the environment: one pod-local request.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("cannot reach the health endpoint %s (is the replica running with --health-addr %s?): %w", url, p.addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return "", fmt.Errorf("read the answer of %s: %w", url, err)
	}
	line := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		return line, fmt.Errorf("%w: %s answered %s", errProbeFailed, url, resp.Status)
	}
	return line, nil
}
