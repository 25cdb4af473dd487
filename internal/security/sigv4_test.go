package security

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file is the tests' own AWS Signature Version 4, written from the
// specification (create a canonical request, a string to sign, derive the
// signing key, sign), so that what franz-go's pkg/sasl/aws signs is checked
// by code that shares nothing with it. TestSigV4KnownVector ties it to the
// example AWS publishes, TestSigV4MatchesSDKPresign to the AWS SDK's signer
// on the exact request an MSK authentication signs.

const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// uriEncode encodes s as SigV4 asks: every byte but the unreserved
// characters A-Z a-z 0-9 - _ . ~ as %XY with upper-case hex.
func uriEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// canonicalQuery is the canonical query string of q: names and values
// encoded, sorted by name.
func canonicalQuery(q map[string]string) string {
	names := make([]string, 0, len(q))
	for n := range q {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, uriEncode(n)+"="+uriEncode(q[n]))
	}
	return strings.Join(parts, "&")
}

// canonicalRequest is task 1: method, path, query, the headers (lower-case
// names, given sorted) and their names, and the payload's hash.
func canonicalRequest(method, path, query string, headers [][2]string, payloadHash string) string {
	var canon, names []string
	for _, h := range headers {
		canon = append(canon, h[0]+":"+strings.TrimSpace(h[1])+"\n")
		names = append(names, h[0])
	}
	return method + "\n" + path + "\n" + query + "\n" + strings.Join(canon, "") + "\n" + strings.Join(names, ";") + "\n" + payloadHash
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func hmacSHA256(key []byte, s string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(s))
	return h.Sum(nil)
}

// stringToSign is task 2.
func stringToSign(amzDate, scope, canonical string) string {
	return "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + sha256Hex(canonical)
}

// signingKey is task 3's key: HMACs of the date, region, service and
// "aws4_request", keyed by "AWS4" and the secret.
func signingKey(secret, date, region, service string) []byte {
	k := hmacSHA256([]byte("AWS4"+secret), date)
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, service)
	return hmacSHA256(k, "aws4_request")
}

// TestSigV4KnownVector checks the tests' signer on the example of the AWS
// documentation: GET https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08
// at 20150830T123600Z with the example secret.
func TestSigV4KnownVector(t *testing.T) {
	const secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
	canon := canonicalRequest("GET", "/", canonicalQuery(map[string]string{"Version": "2010-05-08", "Action": "ListUsers"}), [][2]string{
		{"content-type", "application/x-www-form-urlencoded; charset=utf-8"},
		{"host", "iam.amazonaws.com"},
		{"x-amz-date", "20150830T123600Z"},
	}, emptySHA256)
	assert.Equal(t, "f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59", sha256Hex(canon), "canonical request:\n%s", canon)
	key := signingKey(secret, "20150830", "us-east-1", "iam")
	assert.Equal(t, "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9", hex.EncodeToString(key))
	sig := hex.EncodeToString(hmacSHA256(key, stringToSign("20150830T123600Z", "20150830/us-east-1/iam/aws4_request", canon)))
	assert.Equal(t, "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7", sig)
}

// mskPayload is a decoded AWS_MSK_IAM authentication payload: a JSON object
// of lower-case SigV4 query parameters plus version, host and user-agent.
type mskPayload map[string]string

func decodeMSKPayload(t *testing.T, b []byte) mskPayload {
	t.Helper()
	var p mskPayload
	require.NoError(t, json.Unmarshal(b, &p), "payload %s", b)
	return p
}

// signedQuery is the query the payload's signature covers: every SigV4
// parameter of it but the signature, with AWS's spelling of the names.
func (p mskPayload) signedQuery() map[string]string {
	names := map[string]string{
		"action":               "Action",
		"x-amz-algorithm":      "X-Amz-Algorithm",
		"x-amz-credential":     "X-Amz-Credential",
		"x-amz-date":           "X-Amz-Date",
		"x-amz-expires":        "X-Amz-Expires",
		"x-amz-security-token": "X-Amz-Security-Token",
		"x-amz-signedheaders":  "X-Amz-SignedHeaders",
	}
	q := make(map[string]string)
	for k, v := range p {
		if n, ok := names[k]; ok {
			q[n] = v
		}
	}
	return q
}

// signature recomputes the payload's signature with secret: the presigned
// GET / of host with the payload's query, signing the host header only.
func (p mskPayload) signature(secret string) string {
	scope := strings.SplitN(p["x-amz-credential"], "/", 2)
	if len(scope) != 2 {
		return ""
	}
	parts := strings.Split(scope[1], "/") // date/region/service/aws4_request
	if len(parts) != 4 {
		return ""
	}
	canon := canonicalRequest("GET", "/", canonicalQuery(p.signedQuery()), [][2]string{{"host", p["host"]}}, emptySHA256)
	key := signingKey(secret, parts[0], parts[1], parts[2])
	return hex.EncodeToString(hmacSHA256(key, stringToSign(p["x-amz-date"], scope[1], canon)))
}

// verify checks p as an MSK broker would, at now, against the secrets of the
// access keys it knows: the fields of kafka-cluster:Connect, a signature
// that verifies, a date no more than X-Amz-Expires seconds before now.
func (p mskPayload) verify(secrets map[string]string, region string, now time.Time) error {
	want := map[string]string{
		"version":             "2020_10_22",
		"action":              "kafka-cluster:Connect",
		"x-amz-algorithm":     "AWS4-HMAC-SHA256",
		"x-amz-signedheaders": "host",
	}
	for k, v := range want {
		if p[k] != v {
			return fmt.Errorf("payload %s is %q, want %q", k, p[k], v)
		}
	}
	for _, k := range []string{"host", "user-agent", "x-amz-signature"} {
		if p[k] == "" {
			return fmt.Errorf("payload has no %s", k)
		}
	}
	cred := strings.Split(p["x-amz-credential"], "/")
	if len(cred) != 5 || cred[2] != region || cred[3] != "kafka-cluster" || cred[4] != "aws4_request" {
		return fmt.Errorf("payload x-amz-credential %q is not <key>/<date>/%s/kafka-cluster/aws4_request", p["x-amz-credential"], region)
	}
	signed, err := time.Parse("20060102T150405Z", p["x-amz-date"])
	if err != nil {
		return fmt.Errorf("payload x-amz-date: %w", err)
	}
	if cred[1] != signed.Format("20060102") {
		return fmt.Errorf("payload credential date %s is not the date of x-amz-date %s", cred[1], p["x-amz-date"])
	}
	expires, err := strconv.Atoi(p["x-amz-expires"])
	if err != nil {
		return fmt.Errorf("payload x-amz-expires: %w", err)
	}
	if now.Before(signed.Add(-time.Minute)) || now.After(signed.Add(time.Duration(expires)*time.Second)) {
		return fmt.Errorf("payload signed at %s for %ds is not valid at %s", signed, expires, now.UTC().Format(time.RFC3339))
	}
	secret, ok := secrets[cred[0]]
	if !ok {
		return fmt.Errorf("unknown access key %q", cred[0])
	}
	if got := p.signature(secret); got != p["x-amz-signature"] {
		return fmt.Errorf("signature %s does not verify (want %s)", p["x-amz-signature"], got)
	}
	return nil
}

// TestSigV4MatchesSDKPresign checks the tests' signer on the request an MSK
// authentication signs, at a fixed clock, against the AWS SDK's presigner:
// both sign the same query and get the same signature, with and without a
// session token.
func TestSigV4MatchesSDKPresign(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	const host = "b-1.demo.abc123.c2.kafka.eu-west-1.amazonaws.com"
	for _, token := range []string{"", "session/token+with=odd chars"} {
		creds := aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", SessionToken: token}
		req, err := http.NewRequest(http.MethodGet, "https://"+host+"/?Action=kafka-cluster%3AConnect&X-Amz-Expires=900", nil)
		require.NoError(t, err)
		signedURL, _, err := v4.NewSigner().PresignHTTP(context.Background(), creds, req, emptySHA256, "kafka-cluster", "eu-west-1", at)
		require.NoError(t, err)
		u, err := url.Parse(signedURL)
		require.NoError(t, err)
		p := mskPayload{"host": host}
		for k, v := range u.Query() {
			p[strings.ToLower(k)] = v[0]
		}
		assert.Equal(t, "20260304T050607Z", p["x-amz-date"])
		assert.Equal(t, token, p["x-amz-security-token"])
		assert.Equal(t, p["x-amz-signature"], p.signature(creds.SecretAccessKey), "token %q: signed URL %s", token, signedURL)
	}
}
