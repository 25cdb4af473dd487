package plugin

import (
	"strings"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kbr/kafka_batched_ranges/internal/security"
)

// TestParseAWS checks that the aws fields of an AWS_MSK_IAM entry reach
// security.AWS, and that an entry without them (the default chain) parses
// to a region alone.
func TestParseAWS(t *testing.T) {
	const base = "seed_brokers: [ \"b-1.demo.kafka.eu-west-1.amazonaws.com:9098\" ]\ntopics: [ t ]\ntls:\n  enabled: true\n"
	c, err := parseYAML(t, base+`sasl:
  - mechanism: AWS_MSK_IAM
    aws:
      region: eu-west-1
      credentials:
        id: AKIDEXAMPLE
        secret: key-secret
        token: token-secret
        role: arn:aws:iam::123456789012:role/kafka-reader
  - mechanism: AWS_MSK_IAM
    aws:
      region: us-east-1
`)
	require.NoError(t, err)
	assert.Equal(t, []security.SASL{
		{Mechanism: security.MechanismAWSMSKIAM, AWS: security.AWS{
			Region: "eu-west-1", AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "key-secret", SessionToken: "token-secret",
			RoleARN: "arn:aws:iam::123456789012:role/kafka-reader",
		}},
		{Mechanism: security.MechanismAWSMSKIAM, AWS: security.AWS{Region: "us-east-1"}},
	}, c.Security.SASL)
	assert.Len(t, c.ClientOpts(), 3, "ClientOpts(): client ID, kgo.Dialer (tcp, with TLS) and kgo.SASL")

	c, err = parseYAML(t, base+`sasl:
  - mechanism: AWS_MSK_IAM
    aws:
      region: eu-west-1
      endpoint: https://sts.eu-west-1.amazonaws.com
      credentials:
        profile: reader
        role: arn:aws:iam::123456789012:role/kafka-reader
        role_external_id: ext-42
  - mechanism: AWS_MSK_IAM
    aws:
      region: eu-west-1
      credentials: { from_ec2_role: true }
`)
	require.NoError(t, err)
	assert.Equal(t, []security.SASL{
		{Mechanism: security.MechanismAWSMSKIAM, AWS: security.AWS{
			Region: "eu-west-1", Endpoint: "https://sts.eu-west-1.amazonaws.com", Profile: "reader",
			RoleARN: "arn:aws:iam::123456789012:role/kafka-reader", RoleExternalID: "ext-42",
		}},
		{Mechanism: security.MechanismAWSMSKIAM, AWS: security.AWS{Region: "eu-west-1", FromEC2Role: true}},
	}, c.Security.SASL)

	// The lint and ParseConfig check them alike.
	bad := base + "sasl:\n  - mechanism: AWS_MSK_IAM\n    aws:\n      region: eu-west-1\n      credentials: { role_external_id: x, from_ec2_role: true, profile: p }\n"
	want := []string{
		"sasl[0].aws.credentials.role_external_id requires sasl[0].aws.credentials.role",
		"sasl[0].aws.credentials.from_ec2_role cannot be set with sasl[0].aws.credentials.id or sasl[0].aws.credentials.profile",
	}
	_, err = parseYAML(t, bad)
	require.Error(t, err)
	assert.ElementsMatch(t, want, strings.Split(err.Error(), "\n"))
	assert.ElementsMatch(t, want, lintInput(t, "kafka_batched_ranges:\n"+indent(bad)))

	c, err = parseYAML(t, base+"sasl:\n  - mechanism: SCRAM-SHA-256\n    username: u\n    password: p\n")
	require.NoError(t, err)
	assert.Equal(t, security.AWS{}, c.Security.SASL[0].AWS, "an entry without aws fields")
}

// TestAWSSecretsScrubbed checks that aws.credentials.secret and token are
// Secret fields: a printed config shows them scrubbed, the id and role as
// written.
func TestAWSSecretsScrubbed(t *testing.T) {
	t.Setenv("KBR_TEST_AWS_SECRET", "env-secret")
	sb := service.NewEnvironment().NewStreamBuilder()
	require.NoError(t, sb.SetYAML(`
input:
  kafka_batched_ranges:
    seed_brokers: [ "a:1" ]
    topics: [ t ]
    tls:
      enabled: true
    sasl:
      - mechanism: AWS_MSK_IAM
        aws:
          region: eu-west-1
          credentials:
            id: AKIDEXAMPLE
            secret: ${KBR_TEST_AWS_SECRET}
            token: token-secret
            role: arn:aws:iam::123456789012:role/kafka-reader
output:
  drop: {}
`))
	out, err := sb.AsYAML()
	require.NoError(t, err)
	for _, secret := range []string{"env-secret", "token-secret"} {
		assert.NotContains(t, out, secret, "printed config holds a secret:\n%s", out)
	}
	assert.Contains(t, out, "id: AKIDEXAMPLE")
	assert.Contains(t, out, "role: arn:aws:iam::123456789012:role/kafka-reader")
	assert.Equal(t, 2, strings.Count(out, "!!!SECRET_SCRUBBED!!!"), "printed config:\n%s", out)
}
