package hostile

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// raftRequest is an AppendEntries RPC framed as hashicorp/raft's
// NetworkTransport frames one: the RPC type byte (0, AppendEntries) and a
// msgpack map, {"Term": 0}. Term 0 is older than any replica's term, so a
// replica that accepts the connection only answers it (with its term and
// Success false): the probe proves the port open without changing anything.
var raftRequest = []byte{0x00, 0x81, 0xa4, 'T', 'e', 'r', 'm', 0x00}

// raftTimeout bounds the probe's dial, handshake, write and read.
const raftTimeout = 3 * time.Second

// probeRaft sends raftRequest to a Raft port, over plain TCP or, with conf,
// over TLS with conf's certificate, and says what came back: Answered
// (the first byte of a raft reply, a msgpack string), Refused (the
// handshake failed, the connection was closed, or bytes came back that are
// no raft reply) or Inconclusive (nothing listens, or no answer in time),
// and why.
func probeRaft(ctx context.Context, addr string, conf *tls.Config) (string, string) {
	d := net.Dialer{Timeout: raftTimeout}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return Inconclusive, "dial: " + err.Error()
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(raftTimeout))
	c := raw
	if conf != nil {
		cfg := conf.Clone()
		if cfg.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			cfg.ServerName = host
		}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return failure("TLS handshake", err)
		}
		c = tc
	}
	if _, err := c.Write(raftRequest); err != nil {
		return failure("write", err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil {
		return failure("read", err)
	}
	if isMsgpackString(b[0]) {
		return Answered, fmt.Sprintf("the Raft port answered the AppendEntries request (first byte %#x)", b[0])
	}
	return Refused, fmt.Sprintf("the port sent %#x, which starts no raft reply", b[0])
}

// failure classifies an error of the probe: a timeout is inconclusive,
// anything else (a TLS alert, a closed connection) a refusal.
func failure(step string, err error) (string, string) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return Inconclusive, step + ": no answer within " + raftTimeout.String()
	}
	return Refused, step + ": " + err.Error()
}

// isMsgpackString reports whether b starts a msgpack string (a raft reply
// starts with its error string, usually empty).
func isMsgpackString(b byte) bool { return b&0xe0 == 0xa0 || b == 0xd9 || b == 0xda || b == 0xdb }
