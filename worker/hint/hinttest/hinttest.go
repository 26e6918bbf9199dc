// Package hinttest provides fake cloud metadata services for tests of
// preemption hints (in the manner of net/http/httptest): an EC2 instance
// metadata service (IMDSv2) and a Compute Engine metadata server, each
// serving the real paths, headers, status codes and body shapes.
package hinttest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// awsNotFound is the body EC2's metadata service sends with a 404.
const awsNotFound = `<?xml version="1.0" encoding="iso-8859-1"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"
	"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">
 <head>
  <title>404 - Not Found</title>
 </head>
 <body>
  <h1>404 - Not Found</h1>
 </body>
</html>
`

// AWS is a fake EC2 instance metadata service with IMDSv2 required: PUT
// /latest/api/token (with X-aws-ec2-metadata-token-ttl-seconds in 1..21600)
// issues a token, and GET /latest/meta-data/spot/instance-action with
// X-aws-ec2-metadata-token answers 404 until Interrupt, then 200 with
// {"action": ..., "time": ...}. A missing or unknown token gets 401.
type AWS struct {
	srv *httptest.Server

	mu      sync.Mutex
	tokens  map[string]bool
	action  string
	at      time.Time
	puts    int
	gets    int
	refused int
}

// NewAWS starts the fake on 127.0.0.1 and stops it when the test ends.
func NewAWS(t testing.TB) *AWS {
	t.Helper()
	a := &AWS{tokens: make(map[string]bool)}
	mux := http.NewServeMux()
	mux.HandleFunc("/latest/api/token", a.token)
	mux.HandleFunc("/latest/meta-data/spot/instance-action", a.instanceAction)
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

// URL is the base URL to configure the hint with.
func (a *AWS) URL() string { return a.srv.URL }

// Interrupt makes instance-action announce action ("terminate", "stop" or
// "hibernate") at the given time.
func (a *AWS) Interrupt(action string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.action, a.at = action, at
}

// RevokeTokens invalidates every token issued so far (as their TTL ending
// would).
func (a *AWS) RevokeTokens() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.tokens)
}

// Stats returns how many tokens were issued, how many instance-action GETs
// were answered with a valid token, and how many were refused (401).
func (a *AWS) Stats() (tokenPuts, gets, refused int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.puts, a.gets, a.refused
}

func (a *AWS) token(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		w.Header().Set("Allow", "OPTIONS, PUT")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	ttl, err := strconv.Atoi(r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
	if err != nil || ttl < 1 || ttl > 21600 {
		http.Error(w, "Bad Request", http.StatusBadRequest)
		return
	}
	var b [24]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	a.mu.Lock()
	a.tokens[tok] = true
	a.puts++
	a.mu.Unlock()
	w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", strconv.Itoa(ttl))
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte(tok))
}

func (a *AWS) instanceAction(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	a.mu.Lock()
	if !a.tokens[r.Header.Get("X-aws-ec2-metadata-token")] {
		a.refused++
		a.mu.Unlock()
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	a.gets++
	action, at := a.action, a.at
	a.mu.Unlock()
	if action == "" {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(awsNotFound))
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, `{"action": %q, "time": %q}`, action, at.UTC().Format("2006-01-02T15:04:05Z"))
}

// GCP is a fake Compute Engine metadata server serving
// /computeMetadata/v1/instance/preempted: "FALSE" until Preempt, then
// "TRUE", with an ETag per value. Requests need Metadata-Flavor: Google
// (else 403); replies carry it. With wait_for_change=true the request hangs
// until the value changes, timeout_sec passes, or the client goes; with a
// last_etag that is not the current value's it answers at once.
type GCP struct {
	srv *httptest.Server

	mu        sync.Mutex
	preempted bool
	changed   chan struct{} // closed on Preempt
	requests  int
	waiting   int
	forbidden int
}

// NewGCP starts the fake on 127.0.0.1 and stops it when the test ends.
func NewGCP(t testing.TB) *GCP {
	t.Helper()
	g := &GCP{changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/computeMetadata/v1/instance/preempted", g.preemptedHandler)
	g.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		g.Preempt() // release hanging requests
		g.srv.Close()
	})
	return g
}

// URL is the base URL to configure the hint with.
func (g *GCP) URL() string { return g.srv.URL }

// Preempt sets instance/preempted to TRUE and answers the hanging
// wait_for_change requests.
func (g *GCP) Preempt() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.preempted {
		g.preempted = true
		close(g.changed)
	}
}

// Stats returns how many requests were served, how many hang now in
// wait_for_change, and how many were refused for a missing header.
func (g *GCP) Stats() (requests, waiting, forbidden int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.requests, g.waiting, g.forbidden
}

func etagOf(preempted bool) string {
	if preempted {
		return "5c2a1e0d9b7f3a41"
	}
	return "0e4b7d18c3a9f265"
}

func (g *GCP) preemptedHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Metadata-Flavor", "Google")
	if r.Header.Get("Metadata-Flavor") != "Google" {
		g.mu.Lock()
		g.forbidden++
		g.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=UTF-8")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte("Your client does not have permission to get URL /computeMetadata/v1/instance/preempted from this server. Missing Metadata-Flavor:Google header.\n"))
		return
	}
	q := r.URL.Query()
	g.mu.Lock()
	g.requests++
	preempted, changed := g.preempted, g.changed
	g.mu.Unlock()
	if q.Get("wait_for_change") == "true" {
		last := q.Get("last_etag")
		if last == "" || last == etagOf(preempted) {
			timeout := 24 * time.Hour
			if s, err := strconv.Atoi(q.Get("timeout_sec")); err == nil && s > 0 {
				timeout = time.Duration(s) * time.Second
			}
			g.mu.Lock()
			g.waiting++
			g.mu.Unlock()
			t := time.NewTimer(timeout)
			select {
			case <-changed:
			case <-t.C:
			case <-r.Context().Done():
			}
			t.Stop()
			g.mu.Lock()
			g.waiting--
			preempted = g.preempted
			g.mu.Unlock()
			if r.Context().Err() != nil {
				return
			}
		}
	}
	value := "FALSE"
	if preempted {
		value = "TRUE"
	}
	w.Header().Set("ETag", etagOf(preempted))
	w.Header().Set("Content-Type", "application/text")
	_, _ = w.Write([]byte(value))
}
