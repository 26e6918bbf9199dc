package gateway

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Result is what a raw HTTP/2 client saw of its one stream.
type h2Result struct {
	status   int
	body     []byte
	ended    bool // the answer ended with END_STREAM
	reset    bool // the server reset the stream (RST_STREAM)
	resetErr http2.ErrCode
	sentAll  bool // the whole request body was sent before the reset, if any
}

// rawH2Upload sends body as one POST stream over HTTP/2 at the frame
// level (honouring flow control, sending until the server resets the
// stream) and reads the server's frames until the answer ends and the
// body is sent, or the stream is reset.
func rawH2Upload(t *testing.T, addr, path string, hdr map[string]string, body []byte) h2Result {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	require.NoError(t, err)
	defer conn.Close()
	require.Equal(t, "h2", conn.ConnectionState().NegotiatedProtocol)
	require.NoError(t, conn.SetDeadline(time.Now().Add(60*time.Second)))
	_, err = conn.Write([]byte(http2.ClientPreface))
	require.NoError(t, err)
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var wmu sync.Mutex // one writer at a time
	wmu.Lock()
	require.NoError(t, fr.WriteSettings())
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", addr}, {":path", path}} {
		require.NoError(t, enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}))
	}
	for k, v := range hdr {
		require.NoError(t, enc.WriteField(hpack.HeaderField{Name: k, Value: v}))
	}
	require.NoError(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}))
	wmu.Unlock()

	// Flow control: the peer's windows, as its frames move them.
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	connWin, streamWin := int64(65535), int64(65535)
	var res h2Result
	done := false

	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for off := 0; off < len(body); {
			mu.Lock()
			for !done && !res.reset && (connWin <= 0 || streamWin <= 0) {
				cond.Wait()
			}
			if done || res.reset {
				mu.Unlock()
				return
			}
			n := int(min(int64(len(body)-off), connWin, streamWin, 16384))
			connWin -= int64(n)
			streamWin -= int64(n)
			mu.Unlock()
			wmu.Lock()
			err := fr.WriteData(1, off+n == len(body), body[off:off+n])
			wmu.Unlock()
			if err != nil {
				return
			}
			off += n
			if off == len(body) {
				mu.Lock()
				res.sentAll = true
				mu.Unlock()
			}
		}
	}()
	defer func() {
		mu.Lock()
		done = true
		cond.Broadcast()
		mu.Unlock()
		conn.Close()
		<-sent
	}()
	for {
		f, err := fr.ReadFrame()
		require.NoError(t, err, "reading the server's frames")
		mu.Lock()
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
					streamWin += int64(v) - 65535
				}
				wmu.Lock()
				_ = fr.WriteSettingsAck()
				wmu.Unlock()
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				connWin += int64(f.Increment)
			} else if f.StreamID == 1 {
				streamWin += int64(f.Increment)
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 {
				res.status, _ = strconv.Atoi(f.PseudoValue("status"))
				res.ended = res.ended || f.StreamEnded()
			}
		case *http2.DataFrame:
			if f.StreamID == 1 {
				res.body = append(res.body, f.Data()...)
				res.ended = res.ended || f.StreamEnded()
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				res.reset, res.resetErr = true, f.ErrCode
			}
		case *http2.GoAwayFrame:
			res.reset, res.resetErr = true, f.ErrCode
		}
		cond.Broadcast()
		out := res
		finished := res.reset || (res.ended && res.sentAll)
		mu.Unlock()
		if finished {
			return out
		}
	}
}

// TestOversizedUploadOverHTTP2IsAnsweredWhole: over HTTP/2, an upload of
// no stated length that passes the limit gets its whole 413 and its
// stream ends cleanly: the gateway reads (and drops) the rest of a body of
// a few MiB rather than resetting the stream under the client, which some
// clients (curl) take as a cut-short answer.
func TestOversizedUploadOverHTTP2IsAnsweredWhole(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxFileBytes = 64 << 10 })
	srv := httptest.NewUnstartedServer(e.gw.Handler())
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)

	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	require.NoError(t, mw.WriteField("purpose", "batch"))
	fw, err := mw.CreateFormFile("file", "big.jsonl")
	require.NoError(t, err)
	line := []byte(chatLines(1, "m1"))
	for range (2 << 20) / len(line) {
		_, _ = fw.Write(line)
	}
	require.NoError(t, mw.Close())

	for _, length := range []bool{false, true} {
		hdr := map[string]string{"content-type": mw.FormDataContentType(), "authorization": "Bearer " + e.keys["alice"]}
		if length {
			// Refused from its stated length, before a byte is read.
			hdr["content-length"] = strconv.Itoa(body.Len())
		}
		res := rawH2Upload(t, srv.Listener.Addr().String(), "/v1/files", hdr, body.Bytes())
		require.Equal(t, http.StatusRequestEntityTooLarge, res.status, "%s", res.body)
		var m map[string]any
		require.NoError(t, json.Unmarshal(res.body, &m), "the 413's body: %q", res.body)
		require.Equal(t, "file_too_large", errOf(t, m)["code"])
		require.True(t, res.ended, "the answer ended with END_STREAM")
		require.False(t, res.reset, "content-length %v: the stream was reset (%v) while the client was still sending", length, res.resetErr)
		require.True(t, res.sentAll)
	}
}
