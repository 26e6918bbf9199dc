package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// freeLoopbackAddr returns a loopback host:port that was free a moment ago.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// profiler takes CPU profiles of several processes at once, over their
// --pprof-addr listeners, for --profile.
type profiler struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

// start fetches a secs-long CPU profile from each pprof address (by file
// name) into dir, in the background.
func (p *profiler) start(ctx context.Context, dir string, secs int, addrs map[string]string) {
	for name, addr := range addrs {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if err := fetchProfile(ctx, filepath.Join(dir, name), addr, secs); err != nil {
				p.mu.Lock()
				p.errs = append(p.errs, fmt.Errorf("profile %s: %w", name, err))
				p.mu.Unlock()
			}
		}()
	}
}

// wait waits for every profile and returns the first error.
func (p *profiler) wait() error {
	p.wg.Wait()
	if len(p.errs) > 0 {
		return p.errs[0]
	}
	return nil
}

func fetchProfile(ctx context.Context, path, addr string, secs int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	// A process started a moment ago may not listen yet.
	for {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fetchURL(ctx, path, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
}

// fetchURL writes the body of a GET of url to path.
func fetchURL(ctx context.Context, path, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
