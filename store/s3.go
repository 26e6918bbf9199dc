package store

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	gcaws "gocloud.dev/aws"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
)

// openS3 opens an s3:// URL as gocloud.dev's s3blob does (the same query
// parameters: region, endpoint, profile, use_path_style, disable_https,
// ssetype, kmskeyid, accelerate, and the rest of gocloud.dev/aws's), except
// that the S3 client does not retry: the store's own retries (Options) are
// the only ones, so Attempts and OpTimeout bound an operation exactly.
func openS3(ctx context.Context, u *url.URL) (*blob.Bucket, error) {
	q := u.Query()
	bopts := &s3blob.Options{}
	var copts []func(*s3.Options)
	if v := q.Get("ssetype"); v != "" {
		q.Del("ssetype")
		t := types.ServerSideEncryption(v)
		if !slices.Contains(t.Values(), t) {
			return nil, fmt.Errorf("ssetype %q is not one of %v", v, t.Values())
		}
		bopts.EncryptionType = t
	}
	if v := q.Get("kmskeyid"); v != "" {
		q.Del("kmskeyid")
		bopts.KMSEncryptionID = v
	}
	boolParam := func(key string, set func(o *s3.Options, v bool)) error {
		v := q.Get(key)
		if v == "" {
			return nil
		}
		q.Del(key)
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("invalid value for %q: %w", key, err)
		}
		copts = append(copts, func(o *s3.Options) { set(o, b) })
		return nil
	}
	for key, set := range map[string]func(o *s3.Options, v bool){
		"accelerate":       func(o *s3.Options, v bool) { o.UseAccelerate = v },
		"disable_https":    func(o *s3.Options, v bool) { o.EndpointOptions.DisableHTTPS = v },
		"use_path_style":   func(o *s3.Options, v bool) { o.UsePathStyle = v },
		"s3ForcePathStyle": func(o *s3.Options, v bool) { o.UsePathStyle = v },
	} {
		if err := boolParam(key, set); err != nil {
			return nil, err
		}
	}
	cfg, err := gcaws.V2ConfigFromURLParams(ctx, q)
	if err != nil {
		return nil, err
	}
	copts = append(copts, func(o *s3.Options) { o.Retryer = aws.NopRetryer{} })
	client := s3.NewFromConfig(cfg, copts...)
	bopts.RequestChecksumCalculation = cfg.RequestChecksumCalculation
	return s3blob.OpenBucket(ctx, client, u.Host, bopts)
}
