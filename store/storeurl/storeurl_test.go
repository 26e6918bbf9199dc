package storeurl

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		url, why string // why "" means accepted
	}{
		{"file:///var/lib/rollout/store", ""},
		{"s3://bucket?region=us-east-1", ""},
		{"s3://bucket?endpoint=http://127.0.0.1:9000&region=us-east-1&use_path_style=true", ""},
		{"gs://bucket", ""},
		{"azblob://container", ""},
		{"mem://", ""},
		{"", "empty"},
		{"s3://b?x=" + strings.Repeat("a", MaxBytes), "over the limit"},
		{"s3://bucket\n", "control character"},
		{"http://bucket", "scheme"},
		{"/just/a/path", "scheme"},
		{"s3://AKIAXXXX:secret@bucket", "user or password"},
		{"s3://user@bucket", "user or password"},
		{"s3://bucket?aws_secret_access_key=x", "credential"},
		{"s3://bucket?X-Amz-Signature=x", "credential"},
		{"azblob://c?sas_token=x", "credential"},
		{"gs://b?access_token=x", "credential"},
		{"s3://b?endpoint=http://AKIA:secret@host:9000", "carries a user or password"},
		{"file://host/dir", "has a host"},
		{"file://relative", "has a host"},
		{"file:///", "absolute directory"},
		{"file:///srv/..", "absolute directory"},
		{"file:///./", "absolute directory"},
		{"s3://", "names no bucket"},
		{"s3:///key", "names no bucket"},
		{"s3://%zz", "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			err := Check(tt.url)
			if tt.why == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tt.why)
			require.NotContains(t, err.Error(), "secret@", "an error never repeats a credential")
		})
	}
}

func TestRedact(t *testing.T) {
	require.Equal(t, "s3://bucket?region=x", Redact("s3://bucket?region=x"))
	require.Equal(t, "s3://bucket", Redact("s3://AKIA:secret@bucket"))
	r := Redact("s3://bucket?aws_secret_access_key=hunter2&region=x")
	require.NotContains(t, r, "hunter2")
	require.Contains(t, r, "REDACTED")
	require.Contains(t, r, "region=x")
	require.Equal(t, "(unparsable URL)", Redact("s3://%zz"))
	require.NotContains(t, Redact("s3://b?endpoint=http://AKIA:hunter2@host:9000"), "hunter2")
}

// FuzzCheck: Check and Redact never panic; a URL Check accepts carries no
// user information; Redact's output never holds a userinfo password or
// the value of a credential-like query parameter.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"file:///d", "s3://b?region=r", "s3://u:p@b", "s3://b?token=zz", "mem://", "gs://b/k?x=1#f", "%", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		err := Check(raw)
		red := Redact(raw)
		u, perr := url.Parse(raw)
		if perr != nil {
			require.Error(t, err)
			return
		}
		if err == nil {
			require.Nil(t, u.User)
		}
		if p, ok := u.User.Password(); ok && len(p) >= 4 {
			ru, rerr := url.Parse(red)
			require.NoError(t, rerr)
			require.Nil(t, ru.User)
		}
		for k, vs := range u.Query() {
			lk := strings.ToLower(k)
			for _, s := range secretParams {
				if strings.Contains(lk, s) {
					require.Error(t, err)
					ru, _ := url.Parse(red)
					for _, v := range ru.Query()[k] {
						require.Equal(t, "REDACTED", v, "value of %q in %q", k, red)
					}
					_ = vs
				}
			}
		}
	})
}
