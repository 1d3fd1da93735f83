package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// S3Config names an S3 bucket or S3-compatible server.
type S3Config struct {
	Endpoint  string // e.g. http://127.0.0.1:7070; empty for AWS
	Region    string
	Bucket    string
	Prefix    string // key prefix inside the bucket
	AccessKey string // empty: the SDK's default credential chain
	SecretKey string
	PathStyle bool  // path-style addressing (most S3-compatible servers)
	PartSize  int64 // multipart part size; 0: 8 MiB
}

// S3 is a Store in an S3 bucket. An object becomes visible only when its
// upload completes (a failed multipart upload is aborted), and every read is
// checked against the sha256 in its Ref.
type S3 struct {
	cfg      S3Config
	client   *s3.Client
	uploader *manager.Uploader
}

// NewS3 builds the client; it does not touch the network.
func NewS3(cfg S3Config) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("s3 store: bucket is empty")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = 8 << 20
	}
	opts := s3.Options{
		Region:           cfg.Region,
		UsePathStyle:     cfg.PathStyle,
		RetryMaxAttempts: 5,
	}
	if cfg.Endpoint != "" {
		opts.BaseEndpoint = aws.String(cfg.Endpoint)
	}
	if cfg.AccessKey != "" {
		opts.Credentials = credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")
	}
	c := s3.New(opts)
	return &S3{cfg: cfg, client: c, uploader: manager.NewUploader(c, func(u *manager.Uploader) {
		u.PartSize = cfg.PartSize
		u.LeavePartsOnError = false
	})}, nil
}

// ParseS3URL reads s3://bucket/prefix; the endpoint and keys come from
// T1FLOW_S3_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION.
func ParseS3URL(raw string) (S3Config, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		return S3Config{}, fmt.Errorf("store %q: expected s3://bucket/prefix", raw)
	}
	return S3Config{
		Endpoint: os.Getenv("T1FLOW_S3_ENDPOINT"), Region: os.Getenv("AWS_REGION"),
		Bucket: u.Host, Prefix: strings.Trim(u.Path, "/"),
		AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"), SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		PathStyle: os.Getenv("T1FLOW_S3_ENDPOINT") != "",
	}, nil
}

func (s *S3) key(k string) string {
	if s.cfg.Prefix == "" {
		return k
	}
	return s.cfg.Prefix + "/" + k
}

func (s *S3) uri(k string) string { return "s3://" + s.cfg.Bucket + "/" + k }

// CreateBucket makes the bucket if it does not exist.
func (s *S3) CreateBucket(ctx context.Context) error {
	_, err := s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.cfg.Bucket)})
	var owned interface{ ErrorCode() string }
	if err != nil && errors.As(err, &owned) && (owned.ErrorCode() == "BucketAlreadyOwnedByYou" || owned.ErrorCode() == "BucketAlreadyExists") {
		return nil
	}
	return err
}

// Put spools the bytes to a temp file (hashing them) and uploads it with the
// sha256 in the object's metadata; large objects go up in parts.
func (s *S3) Put(ctx context.Context, key string, r io.Reader) (Ref, error) {
	if strings.Contains(key, "..") || strings.HasPrefix(key, "/") {
		return Ref{}, fmt.Errorf("artifact key %q is not a clean relative path", key)
	}
	tmp, err := os.CreateTemp("", "t1flow-s3-")
	if err != nil {
		return Ref{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), r)
	if err != nil {
		return Ref{}, fmt.Errorf("write artifact %s: %w", key, err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return Ref{}, err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	k := s.key(key)
	_, err = s.uploader.Upload(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.cfg.Bucket), Key: aws.String(k), Body: tmp,
		Metadata: map[string]string{"sha256": sum},
	})
	if err != nil {
		return Ref{}, fmt.Errorf("upload %s: %w", s.uri(k), err)
	}
	return Ref{URI: s.uri(k), SHA256: sum, Bytes: n}, nil
}

// Get downloads the object and verifies it.
func (s *S3) Get(ctx context.Context, ref Ref) ([]byte, error) {
	u, err := url.Parse(ref.URI)
	if err != nil || u.Scheme != "s3" || u.Host != s.cfg.Bucket {
		return nil, fmt.Errorf("artifact uri %q: not in bucket %s", ref.URI, s.cfg.Bucket)
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(u.Host), Key: aws.String(strings.TrimPrefix(u.Path, "/"))})
	if isNotFound(err) {
		return nil, fmt.Errorf("%s: %w", ref.URI, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ref.URI, err)
	}
	return b, Verify(ref, b)
}

// Lookup finds a finished object by key.
func (s *S3) Lookup(ctx context.Context, key string) (Ref, error) {
	k := s.key(key)
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(k)})
	if isNotFound(err) {
		return Ref{}, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	if err != nil {
		return Ref{}, err
	}
	sum := out.Metadata["sha256"]
	if sum == "" {
		return Ref{}, fmt.Errorf("%s has no sha256 metadata: not written by t1flow", s.uri(k))
	}
	return Ref{URI: s.uri(k), SHA256: sum, Bytes: aws.ToInt64(out.ContentLength)}, nil
}

// Delete removes the object at key (S3 answers a missing key with success).
func (s *S3) Delete(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(s.key(key))})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete %s: %w", s.uri(s.key(key)), err)
	}
	return nil
}

func isNotFound(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NotFound", "NoSuchBucket":
			return true
		}
	}
	return false
}
