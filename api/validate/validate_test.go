package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rollout/rollout/api/rollout/v1"
	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/internal/limits"
)

func id(b byte) []byte { return bytes.Repeat([]byte{b}, DefaultIDBytes) }

func TestDefaultLimitsAreConsistent(t *testing.T) {
	l := DefaultLimits()
	require.NoError(t, l.Validate())
	require.Equal(t, fsm.DefaultConfig().MaxPayloadBytes, l.MaxPayloadBytes, "the edge's payload limit is the ledger's")
	got, err := FromProto(l.Proto())
	require.NoError(t, err)
	require.Equal(t, l, got)
	nilGot, err := FromProto(nil)
	require.NoError(t, err)
	require.Equal(t, l, nilGot, "a coordinator that announces nothing runs the defaults")
}

func TestLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Limits)
		want string
	}{
		{"zero field", func(l *Limits) { l.MaxItemsPerRequest = 0 }, "MaxItemsPerRequest is 0"},
		{"id over the ledger's", func(l *Limits) { l.IDBytes = limits.MaxIDBytes + 1 }, "IDBytes"},
		{"name over the ledger's", func(l *Limits) { l.MaxRunNameBytes = limits.MaxRunNameBytes + 1 }, "MaxRunNameBytes"},
		{"request smaller than an item", func(l *Limits) { l.MaxRequestBytes = l.MaxPayloadBytes }, "so that one item always fits"},
		{"message smaller than a request", func(l *Limits) { l.MaxMessageBytes = l.MaxRequestBytes }, "MaxMessageBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := DefaultLimits()
			tc.edit(&l)
			err := l.Validate()
			require.ErrorIs(t, err, ErrInvalidLimits)
			require.ErrorContains(t, err, tc.want)
			_, err = FromProto(l.Proto())
			require.ErrorIs(t, err, ErrInvalidLimits)
		})
	}
	p := DefaultLimits().Proto()
	p.IdBytes = 1 << 40
	_, err := FromProto(p)
	require.ErrorContains(t, err, "announced id_bytes")
}

func TestRunName(t *testing.T) {
	l := DefaultLimits()
	require.NoError(t, l.RunName("run-1 ok"))
	for _, name := range []string{"", " lead", "trail ", "new\nline", "\xff", strings.Repeat("a", l.MaxRunNameBytes+1)} {
		require.ErrorIs(t, l.RunName(name), ErrRunName, "%q", name)
	}
}

func TestPayload(t *testing.T) {
	l := DefaultLimits()
	for _, ok := range []string{`{}`, ` {"prompt":"p","n":[1,{"a":null}]} `, `{"invalid_line":"x","file":"f","line":2}`} {
		require.NoError(t, l.Payload([]byte(ok)), ok)
	}
	for _, tc := range []struct{ payload, want string }{
		{``, "not valid JSON"},
		{`not json`, "not valid JSON"},
		{`[1,2]`, "not a JSON object"},
		{`"s"`, "not a JSON object"},
		{`{"a":1}{"b":2}`, "data after"},
		{`{"a":1,"a":2}`, "twice"},
		{"{\"a\":\"\xff\"}", "UTF-8"},
		{`{"a":`, "unexpected end"},
	} {
		err := l.Payload([]byte(tc.payload))
		require.ErrorIs(t, err, ErrPayload, "%q", tc.payload)
		require.ErrorContains(t, err, tc.want)
	}
	big := []byte(`{"p":"` + strings.Repeat("x", l.MaxPayloadBytes) + `"}`)
	err := l.Payload(big)
	require.ErrorIs(t, err, ErrTooLarge)
	require.ErrorContains(t, err, "exceeds the per-item limit")
}

// TestCleanReasonAccepted: a reason cleaned by limits.CleanReason (the one
// cleaner) passes the request check.
func TestCleanReasonAccepted(t *testing.T) {
	l := DefaultLimits()
	for _, s := range []string{"", "ok", " lead", "a\n\tb", "\xff\x01", strings.Repeat("é ", 3000), strings.Repeat("ab ", 2000)} {
		c := limits.CleanReason(s)
		req := validRequest(1)
		req.Items[0].DeadReason = c
		require.NoError(t, l.CheckRequest(req), "%q", c)
	}
}

func validRequest(n int) *rolloutv1.SubmitItemsRequest {
	req := &rolloutv1.SubmitItemsRequest{Run: "r", Spec: &rolloutv1.RunSpec{Model: "m", Sampling: []byte(`{"seed":1}`)}}
	for i := range n {
		req.Items = append(req.Items, &rolloutv1.SubmitItem{Id: id(byte(i)), Index: uint64(i), Payload: []byte(`{"prompt":"p"}`)})
	}
	return req
}

func TestCheckRequest(t *testing.T) {
	l := DefaultLimits()
	require.NoError(t, l.CheckRequest(validRequest(3)))
	for _, tc := range []struct {
		name    string
		edit    func(*rolloutv1.SubmitItemsRequest)
		rule    error
		mention string
	}{
		{"empty", func(r *rolloutv1.SubmitItemsRequest) { r.Items = nil }, ErrEmptyRequest, "no items"},
		{"bad run", func(r *rolloutv1.SubmitItemsRequest) { r.Run = "a\tb" }, ErrRunName, "non-printable"},
		{"3-byte id", func(r *rolloutv1.SubmitItemsRequest) { r.Items[1].Id = []byte("abc") }, ErrItemID, `items[1] (index 1, id "616263")`},
		{"non-JSON payload", func(r *rolloutv1.SubmitItemsRequest) { r.Items[2].Payload = []byte("hello") }, ErrPayload, "items[2]"},
		{"duplicate id", func(r *rolloutv1.SubmitItemsRequest) { r.Items[2].Id = id(0) }, ErrDuplicateID, "same id as items[0]"},
		{"dead item with raw line", func(r *rolloutv1.SubmitItemsRequest) {
			r.Items[0].Payload, r.Items[0].DeadReason = []byte("not json"), "f:1: not valid JSON"
		}, ErrPayload, "items[0]"},
		{"too many", func(r *rolloutv1.SubmitItemsRequest) {
			*r = *validRequest(l.MaxItemsPerRequest + 1)
		}, ErrTooManyItems, "the limit is"},
		{"too large", func(r *rolloutv1.SubmitItemsRequest) {
			for _, it := range r.Items {
				it.Payload = []byte(`{"p":"` + strings.Repeat("x", l.MaxPayloadBytes-16) + `"}`)
			}
			r.Items = append(r.Items, proto.Clone(r.Items[0]).(*rolloutv1.SubmitItem), proto.Clone(r.Items[0]).(*rolloutv1.SubmitItem))
			r.Items[3].Id, r.Items[4].Id = id(3), id(4)
		}, ErrTooLarge, "exceeds the per-request limit"},
		{"sampling not an object", func(r *rolloutv1.SubmitItemsRequest) { r.Spec.Sampling = []byte(`[1]`) }, ErrSpec, "sampling"},
		{"model not printable", func(r *rolloutv1.SubmitItemsRequest) { r.Spec.Model = "a\x00" }, ErrSpec, "model"},
		{"stale after", func(r *rolloutv1.SubmitItemsRequest) { r.StaleAfterMs = 1 << 62 }, ErrStaleAfter, "too large"},
		{"multi-line dead reason", func(r *rolloutv1.SubmitItemsRequest) { r.Items[0].DeadReason = "a\nb" }, ErrDeadReason, "one line"},
		{"store URL with a secret", func(r *rolloutv1.SubmitItemsRequest) {
			r.Spec.Store = "s3://b?region=x&aws_secret_access_key=hunter2"
		}, ErrSpec, "looks like a credential"},
		{"store URL with a user", func(r *rolloutv1.SubmitItemsRequest) { r.Spec.Store = "s3://me:pw@b" }, ErrSpec, "user or password"},
		{"store URL scheme", func(r *rolloutv1.SubmitItemsRequest) { r.Spec.Store = "http://example/x" }, ErrSpec, "scheme"},
		{"relative file store", func(r *rolloutv1.SubmitItemsRequest) { r.Spec.Store = "file://rel/dir" }, ErrSpec, "has a host"},
		{"payload and payload_ref", func(r *rolloutv1.SubmitItemsRequest) {
			r.Items[0].PayloadRef = &rolloutv1.DataRef{Object: "runs/r/inputs/x", Length: 3}
		}, ErrPayload, "not both"},
		{"payload_ref escaping the root", func(r *rolloutv1.SubmitItemsRequest) {
			r.Items[1].Payload, r.Items[1].PayloadRef = nil, &rolloutv1.DataRef{Object: "../../etc/passwd", Length: 3}
		}, ErrRef, "segment"},
		{"payload_ref absolute", func(r *rolloutv1.SubmitItemsRequest) {
			r.Items[1].Payload, r.Items[1].PayloadRef = nil, &rolloutv1.DataRef{Object: "/etc/passwd", Length: 3}
		}, ErrRef, "starts with /"},
		{"payload_ref short hash", func(r *rolloutv1.SubmitItemsRequest) {
			r.Items[1].Payload, r.Items[1].PayloadRef = nil, &rolloutv1.DataRef{Object: "k", Length: 3, Blake3: []byte{1, 2}}
		}, ErrRef, "blake3"},
		{"long dead reason", func(r *rolloutv1.SubmitItemsRequest) {
			r.Items[0].DeadReason = strings.Repeat("r", limits.MaxReasonBytes+1)
		}, ErrTooLarge, "dead_reason"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := validRequest(3)
			tc.edit(req)
			err := l.CheckRequest(req)
			require.ErrorIs(t, err, tc.rule)
			require.ErrorContains(t, err, tc.mention)
		})
	}
}

// FuzzCheckRequest decodes arbitrary bytes as a SubmitItemsRequest: the
// check never panics, and a request it accepts meets every rule.
func FuzzCheckRequest(f *testing.F) {
	good, _ := proto.Marshal(validRequest(2))
	f.Add(good)
	bad := validRequest(1)
	bad.Items[0].Id = []byte{1, 2, 3}
	b, _ := proto.Marshal(bad)
	f.Add(b)
	f.Add([]byte{})
	l := DefaultLimits()
	l.MaxItemsPerRequest, l.MaxPayloadBytes, l.MaxRequestBytes, l.MaxMessageBytes = 8, 256, 1<<10, 2<<10
	f.Fuzz(func(t *testing.T, data []byte) {
		var req rolloutv1.SubmitItemsRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		err := l.CheckRequest(&req)
		if err != nil {
			if !errors.Is(err, ErrRunName) && !errors.Is(err, ErrEmptyRequest) && !errors.Is(err, ErrTooManyItems) &&
				!errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrItemID) && !errors.Is(err, ErrDuplicateID) &&
				!errors.Is(err, ErrPayload) && !errors.Is(err, ErrSpec) && !errors.Is(err, ErrStaleAfter) && !errors.Is(err, ErrDeadReason) {
				t.Fatalf("refusal matches no sentinel: %v", err)
			}
			return
		}
		if len(req.Items) == 0 || len(req.Items) > l.MaxItemsPerRequest || proto.Size(&req) > l.MaxRequestBytes {
			t.Fatalf("accepted a request outside the count or size limits")
		}
		for _, it := range req.Items {
			if len(it.Id) != l.IDBytes || JSONObject(it.Payload) != nil {
				t.Fatalf("accepted a bad item: %v", it)
			}
		}
	})
}

// FuzzJSONObject: JSONObject never panics, and what it accepts is valid
// JSON whose first byte (after white space) opens an object.
func FuzzJSONObject(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `[1]`, `{"a":1,"a":2}`, "{\"a\":\"\xff\"}", `{"a":{"b":[]}} `, `{} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := JSONObject(data)
		if slow := jsonObjectSlow(data); (err == nil) != (slow == nil) && utf8.Valid(data) {
			t.Fatalf("%q: JSONObject says %v, the decoder %v", data, err, slow)
		}
		if err != nil {
			return
		}
		if !jsonValid(data) || bytes.TrimLeft(data, " \t\r\n")[0] != '{' {
			t.Fatalf("accepted %q", data)
		}
	})
}

// TestJSONObjectFastPath: the decoder-free path of JSONObject accepts
// exactly what the token decoder accepts, on objects of every shape the
// fast scan must walk (nesting, strings holding brackets and quotes,
// escapes in keys and values, white space everywhere, repeated keys at and
// below the top level).
func TestJSONObjectFastPath(t *testing.T) {
	cases := []string{
		`{}`, ` { } `, "\t{\n}\r\n", `{"a":1}`, `{"a":1,"b":2}`, `{"a":1,"a":2}`, `{"a":1,"b":{"a":2}}`,
		`{"a":{"b":1,"b":2}}`, `{"a":[1,{"a":1}],"b":"]}","c":"\"}"}`, `{"a\u0062":1,"ab":2}`,
		`{"a\"b":1,"a\"b":2}`, `{"k":"v\\","k2":"\\"}`, `{"x":true,"y":false,"z":null,"w":-1.5e3}`,
		`{ "a" : 1 , "b" : [ ] , "c" : { } }`, `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,` +
			`"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"a":18}`,
		`{"messages":[{"role":"user","content":"hi"}],"prompt":"x","prompt":"y"}`,
		`[1]`, `"s"`, `1`, `null`, `{} {}`, `{"a":1}x`, `{"a":}`, `{"a"}`, ``, ` `, `{`, `}`,
	}
	for _, c := range cases {
		data := []byte(c)
		got, want := JSONObject(data), jsonObjectSlow(data)
		require.Equal(t, want == nil, got == nil, "%q: JSONObject %v, decoder %v", c, got, want)
		if want != nil {
			require.EqualError(t, got, want.Error(), "%q: the fast path must give the decoder's reason", c)
		}
	}
}

// BenchmarkJSONObject checks a typical small prompt payload.
func BenchmarkJSONObject(b *testing.B) {
	data := []byte(`{"prompt": "Summarise item 123456 in one line.", "max_tokens": 64, "meta": {"k": [1, 2, "x"]}}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := JSONObject(data); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzFromProto: decoding announced limits never panics, and what it
// accepts is consistent.
func FuzzFromProto(f *testing.F) {
	b, _ := proto.Marshal(DefaultLimits().Proto())
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		var p rolloutv1.Limits
		if proto.Unmarshal(data, &p) != nil {
			return
		}
		l, err := FromProto(&p)
		if err == nil {
			require.NoError(t, l.Validate())
		}
	})
}

func jsonValid(b []byte) bool { return json.Valid(b) }
