package storeurl

import (
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckCases(t *testing.T) {
	for _, ok := range []string{
		"file:///srv/store", "s3://bucket?region=us-east-1",
		"s3://b?endpoint=http://127.0.0.1:9000&region=us-east-1&use_path_style=true",
		"gs://bucket", "azblob://container", "mem://", "s3://b?region=x&kmskeyid=arn",
	} {
		require.NoError(t, Check(ok), ok)
	}
	for raw, why := range map[string]string{
		"":                                      "empty",
		"http://x/y":                            "scheme",
		"s3://user:pw@bucket":                   "user or password",
		"s3://b?aws_secret_access_key=xx":       "credential",
		"s3://b?X-Amz-Signature=abc":            "credential",
		"azblob://c?sas_token=abc":              "credential",
		"file://host/dir":                       "has a host",
		"file:///":                              "absolute directory",
		"s3://?region=x":                        "names no bucket",
		"s3://b\nx":                             "control character",
		"s3://" + strings.Repeat("b", MaxBytes): "over the limit",
	} {
		err := Check(raw)
		require.ErrorIs(t, err, ErrInvalid, raw)
		require.ErrorContains(t, err, why, raw)
		require.NotContains(t, err.Error(), "pw@", "an error never repeats a password")
		require.NotContains(t, err.Error(), "=xx", "an error never repeats a secret")
	}
	require.Equal(t, "s3://b?aws_secret_access_key=REDACTED&region=r", Redact("s3://me:pw@b?aws_secret_access_key=xx&region=r"))
}

func TestCheckKey(t *testing.T) {
	for _, ok := range []string{"a", "runs/r/inputs/0af3", "runs/%2E%2E/x", "a.b/c..d"} {
		require.NoError(t, CheckKey(ok), ok)
	}
	for _, bad := range []string{"", "/abs", "../x", "a/../b", "a//b", "a/./b", "a/", `a\b`, "a\x00b", "a\x7fb", "\xff", strings.Repeat("k", MaxKeyBytes+1)} {
		require.ErrorIs(t, CheckKey(bad), ErrInvalidKey, "%q", bad)
	}
}

// FuzzCheckKey: a key CheckKey accepts never leaves the store's root (it is
// its own clean form under any root), and Check never panics.
func FuzzCheckKey(f *testing.F) {
	for _, s := range []string{"a", "runs/r/x", "../x", "a//b", "/a", "s3://b?region=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		_ = Check(key)
		_ = Redact(key)
		if CheckKey(key) != nil {
			return
		}
		if got := path.Clean("/root/" + key); got != "/root/"+key {
			t.Fatalf("accepted key %q cleans to %q", key, got)
		}
	})
}
