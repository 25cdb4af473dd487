package security

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/ec2rolecreds"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/twmb/franz-go/pkg/sasl"
	awssasl "github.com/twmb/franz-go/pkg/sasl/aws"
)

// MechanismAWSMSKIAM is Amazon MSK's IAM access control: each connection
// sends a SigV4-signed kafka-cluster:Connect request (franz-go
// pkg/sasl/aws; the aws-msk-iam-auth library of Java clients).
const MechanismAWSMSKIAM = "AWS_MSK_IAM"

// awsRefreshWindow is how long before they expire credentials are replaced:
// an authentication never signs with credentials that have less left, so
// the broker cannot see them expire during the handshake.
const awsRefreshWindow = 5 * time.Minute

// awsAuthTimeout bounds getting credentials for one authentication (loading
// the shared files, a call to STS or to a metadata endpoint): franz-go
// authenticates with the client's context, which has no deadline.
const awsAuthTimeout = 30 * time.Second

var (
	// awsRegionPattern is an AWS region such as us-east-1 or
	// us-gov-west-1 (the pattern franz-go reads region names with).
	awsRegionPattern = regexp.MustCompile(`^[a-z]+(-[a-z0-9]+)+-\d+$`)
	// awsRoleARNPattern is an IAM role ARN in any partition.
	awsRoleARNPattern = regexp.MustCompile(`^arn:aws[a-z-]*:iam::\d{12}:role/.+$`)
)

// AWS is how an AWS_MSK_IAM entry gets its credentials. With AccessKeyID and
// SecretAccessKey set it uses them (and SessionToken, for temporary
// credentials); otherwise the AWS SDK's default chain: environment
// variables, the shared config and credentials files (AWS_PROFILE), web
// identity (EKS IRSA), the container endpoint (ECS, EKS Pod Identity) and
// instance metadata (EC2). With RoleARN set, those credentials assume the
// role through STS and the role's credentials sign. Temporary credentials
// are replaced before they expire.
type AWS struct {
	Region          string // the cluster's region, e.g. us-east-1
	AccessKeyID     string
	SecretAccessKey string // secret: never printed
	SessionToken    string // secret: never printed
	RoleARN         string
	RoleExternalID  string // sent with RoleARN's AssumeRole (sts ExternalId)
	Profile         string // profile of the shared config and credentials files, instead of AWS_PROFILE
	Endpoint        string // base URL of the AWS API (STS), instead of AWS's
	FromEC2Role     bool   // the EC2 instance's role (instance metadata), not the whole default chain
}

// String describes a's credentials without secrets, e.g. `in region
// eu-west-1 with credentials from the aws default chain`.
func (a AWS) String() string {
	s := "in region " + a.Region
	switch {
	case a.AccessKeyID != "":
		s += fmt.Sprintf(" with access key %q", a.AccessKeyID)
	case a.FromEC2Role:
		s += " with the ec2 instance role"
	case a.Profile != "":
		s += fmt.Sprintf(" with credentials from the aws default chain, profile %q", a.Profile)
	default:
		s += " with credentials from the aws default chain"
	}
	if a.RoleARN != "" {
		s += fmt.Sprintf(", assuming role %q", a.RoleARN)
	}
	return s
}

// validateAWS returns the errors of s's aws settings: for AWS_MSK_IAM a
// region (TLS is TLSRequired's), a key
// and secret given together, a role ARN, no username, password or token;
// for the other known mechanisms no aws settings.
func (s SASL) validateAWS(field func(string) string) []error {
	var errs []error
	a := s.AWS
	switch s.Mechanism {
	case MechanismAWSMSKIAM:
	case MechanismPlain, MechanismScramSHA256, MechanismScramSHA512, MechanismOAuthBearer:
		if a != (AWS{}) {
			errs = append(errs, fmt.Errorf("%s is only used by mechanism %s, not %s", field("aws"), MechanismAWSMSKIAM, s.Mechanism))
		}
		return errs
	default:
		return nil // the mechanism's own error says enough
	}
	switch {
	case a.Region == "":
		errs = append(errs, fmt.Errorf("%s is required for mechanism %s", field("aws.region"), MechanismAWSMSKIAM))
	case !awsRegionPattern.MatchString(a.Region):
		errs = append(errs, fmt.Errorf("%s must be an aws region such as us-east-1, got %q", field("aws.region"), a.Region))
	}
	if (a.AccessKeyID == "") != (a.SecretAccessKey == "") {
		errs = append(errs, fmt.Errorf("%s and %s must be set together", field("aws.credentials.id"), field("aws.credentials.secret")))
	} else if a.SessionToken != "" && a.AccessKeyID == "" {
		errs = append(errs, fmt.Errorf("%s requires %s and %s", field("aws.credentials.token"), field("aws.credentials.id"), field("aws.credentials.secret")))
	}
	if a.RoleARN != "" && !awsRoleARNPattern.MatchString(a.RoleARN) {
		errs = append(errs, fmt.Errorf("%s must be an iam role arn (arn:aws:iam::<account>:role/<name>), got %q", field("aws.credentials.role"), a.RoleARN))
	}
	if a.RoleExternalID != "" && a.RoleARN == "" {
		errs = append(errs, fmt.Errorf("%s requires %s", field("aws.credentials.role_external_id"), field("aws.credentials.role")))
	}
	if a.FromEC2Role && (a.AccessKeyID != "" || a.Profile != "") {
		errs = append(errs, fmt.Errorf("%s cannot be set with %s or %s", field("aws.credentials.from_ec2_role"), field("aws.credentials.id"), field("aws.credentials.profile")))
	}
	if u, err := url.Parse(a.Endpoint); a.Endpoint != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		errs = append(errs, fmt.Errorf("%s must be an http or https url such as https://sts.eu-west-1.amazonaws.com, got %q", field("aws.endpoint"), a.Endpoint))
	}
	if s.Username != "" || s.Password != "" || s.Token != "" {
		errs = append(errs, fmt.Errorf("%s, %s and %s are not used by mechanism %s (its credentials are under %s)",
			field("username"), field("password"), field("token"), MechanismAWSMSKIAM, field("aws")))
	}
	return errs
}

// mechanism returns the franz-go mechanism of a. Nothing is loaded until
// the first authentication.
func (a AWS) mechanism() sasl.Mechanism {
	return newAWSMechanism(a.Region, MechanismAWSMSKIAM+" "+a.String(), a.credentials)
}

// credentials builds a's credentials provider: the static keys, or the AWS
// SDK's default chain (in a cache that replaces credentials
// awsRefreshWindow before they expire), and the role assumed with them.
func (a AWS) credentials(ctx context.Context) (aws.CredentialsProvider, error) {
	var static aws.CredentialsProvider
	if a.AccessKeyID != "" {
		static = credentials.NewStaticCredentialsProvider(a.AccessKeyID, a.SecretAccessKey, a.SessionToken)
		if a.RoleARN == "" {
			return static, nil
		}
	}
	refreshEarly := func(o *aws.CredentialsCacheOptions) { o.ExpiryWindow = awsRefreshWindow }
	opts := []func(*config.LoadOptions) error{config.WithRegion(a.Region), config.WithCredentialsCacheOptions(refreshEarly)}
	if static != nil {
		opts = append(opts, config.WithCredentialsProvider(static))
	}
	if a.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(a.Profile))
	}
	if a.Endpoint != "" {
		opts = append(opts, config.WithBaseEndpoint(a.Endpoint))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("loading the aws configuration: %w", err)
	}
	if a.FromEC2Role {
		// Instance metadata as the config resolves it
		// (AWS_EC2_METADATA_SERVICE_ENDPOINT and the like).
		ec2 := ec2rolecreds.New(func(o *ec2rolecreds.Options) { o.Client = imds.NewFromConfig(cfg) })
		cfg.Credentials = aws.NewCredentialsCache(ec2, refreshEarly)
	}
	if cfg.Credentials == nil {
		return nil, errors.New("the aws default chain found no credentials provider")
	}
	if a.RoleARN == "" {
		return cfg.Credentials, nil
	}
	withExternalID := func(o *stscreds.AssumeRoleOptions) {
		if a.RoleExternalID != "" {
			o.ExternalID = aws.String(a.RoleExternalID)
		}
	}
	return aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(sts.NewFromConfig(cfg), a.RoleARN, withExternalID), refreshEarly), nil
}

// awsMechanism is AWS_MSK_IAM: franz-go's pkg/sasl/aws mechanism, asking for
// credentials at every authentication, so each new connection and each
// KIP-368 re-authentication signs with current credentials. It checks that
// franz-go signed for the configured region. One is shared by every client
// built from the same Opts, and so are its credentials.
type awsMechanism struct {
	region string
	desc   string // the entry, for messages
	load   func(context.Context) (aws.CredentialsProvider, error)
	inner  sasl.Mechanism

	mu       sync.Mutex              // guards provider
	provider aws.CredentialsProvider // nil until loaded
}

func newAWSMechanism(region, desc string, load func(context.Context) (aws.CredentialsProvider, error)) *awsMechanism {
	m := &awsMechanism{region: region, desc: desc, load: load}
	m.inner = awssasl.ManagedStreamingIAM(m.auth)
	return m
}

func (*awsMechanism) Name() string { return MechanismAWSMSKIAM }

// errAWSCredentials marks a failure to get credentials, as opposed to
// franz-go's own failures.
var errAWSCredentials = errors.New("no aws credentials")

// Authenticate returns franz-go's session and payload for host (the
// broker's host:port), after checking the region the payload is signed for.
func (m *awsMechanism) Authenticate(ctx context.Context, host string) (sasl.Session, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, awsAuthTimeout)
	defer cancel()
	session, payload, err := m.inner.Authenticate(ctx, host)
	switch {
	case errors.Is(err, errAWSCredentials):
		return nil, nil, fmt.Errorf("sasl mechanism %s: %w", m.desc, err)
	case err != nil:
		// franz-go signs for the region in the host name
		// (...kafka.<region>.amazonaws.com), else AWS_REGION.
		return nil, nil, fmt.Errorf("sasl mechanism %s, broker %s: %w (the region is read from the broker's host name, or from AWS_REGION or AWS_DEFAULT_REGION for a name without one: dial the brokers by their MSK names or set AWS_REGION)",
			m.desc, host, err)
	}
	signed, err := signedRegion(payload)
	if err != nil {
		return nil, nil, fmt.Errorf("sasl mechanism %s, broker %s: %w", m.desc, host, err)
	}
	if signed != m.region {
		h, _, _ := net.SplitHostPort(host)
		return nil, nil, fmt.Errorf("sasl mechanism %s: broker %s signs for region %s (from its host name %q, or AWS_REGION), but aws.region is %q",
			m.desc, host, signed, h, m.region)
	}
	return session, payload, nil
}

// auth returns the credentials of one authentication: the provider's,
// which it refreshes when they are about to expire.
func (m *awsMechanism) auth(ctx context.Context) (awssasl.Auth, error) {
	p, err := m.credentialsProvider(ctx)
	if err != nil {
		return awssasl.Auth{}, fmt.Errorf("%w: %w", errAWSCredentials, err)
	}
	c, err := p.Retrieve(ctx)
	if err != nil {
		return awssasl.Auth{}, fmt.Errorf("%w: retrieving aws credentials: %w", errAWSCredentials, err)
	}
	return awssasl.Auth{AccessKey: c.AccessKeyID, SecretKey: c.SecretAccessKey, SessionToken: c.SessionToken}, nil
}

// credentialsProvider loads the provider once; a failed load is tried again
// at the next authentication.
func (m *awsMechanism) credentialsProvider(ctx context.Context) (aws.CredentialsProvider, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.provider == nil {
		p, err := m.load(ctx)
		if err != nil {
			return nil, err
		}
		m.provider = p
	}
	return m.provider, nil
}

// signedRegion returns the region of the credential scope of an
// AWS_MSK_IAM payload (<key>/<date>/<region>/kafka-cluster/aws4_request).
func signedRegion(payload []byte) (string, error) {
	var p struct {
		Credential string `json:"x-amz-credential"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return "", fmt.Errorf("reading the signed payload: %w", err)
	}
	parts := strings.Split(p.Credential, "/")
	if len(parts) != 5 {
		return "", fmt.Errorf("the signed payload's credential scope has %d parts, want 5", len(parts))
	}
	return parts[2], nil
}
