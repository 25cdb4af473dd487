package plugin

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/kbr/kafka_batched_ranges/internal/security"
)

// Field names of the aws settings of a sasl entry (AWS_MSK_IAM).
const (
	fieldSASLAWS        = "aws"
	fieldAWSRegion      = "region"
	fieldAWSCredentials = "credentials"
	fieldAWSID          = "id"
	fieldAWSSecret      = "secret"
	fieldAWSToken       = "token"
	fieldAWSRole        = "role"
	fieldAWSExternalID  = "role_external_id"
	fieldAWSProfile     = "profile"
	fieldAWSFromEC2Role = "from_ec2_role"
	fieldAWSEndpoint    = "endpoint"
)

// awsField returns the spec field of a sasl entry's aws settings.
func awsField() *service.ConfigField {
	return service.NewObjectField(fieldSASLAWS,
		service.NewStringField(fieldAWSEndpoint).
			Description("The base URL of the AWS API calls made for credentials (STS, for `credentials.role` and web identity), e.g. a VPC endpoint `https://vpce-0abc-sts.eu-west-1.vpce.amazonaws.com`; the broker is never dialed through it. Empty: AWS's endpoint for `region` (or `AWS_ENDPOINT_URL_STS`).").
			Default(""),
		service.NewStringField(fieldAWSRegion).
			Description("The AWS region of the MSK cluster, e.g. `us-east-1`; required for `AWS_MSK_IAM`. The signature is scoped to it and STS calls (web identity, `credentials.role`) go to it. franz-go signs for the region in the broker's host name (`b-1.<cluster>.kafka.<region>.amazonaws.com`), or for `AWS_REGION` when the name holds none (an IP address, an alias); an authentication whose region differs from this field fails, naming both.").
			Default(""),
		service.NewObjectField(fieldAWSCredentials,
			service.NewStringField(fieldAWSID).
				Description("An AWS access key ID (`AKIA…`, or `ASIA…` for temporary credentials), set together with `secret`. Empty: the AWS SDK's default chain.").
				Default(""),
			service.NewStringField(fieldAWSSecret).
				Description("The secret access key of `id`. A secret: it is scrubbed from printed configs and never logged; take it from the environment, e.g. `${MSK_SECRET_ACCESS_KEY}`.").
				Default("").
				Secret(),
			service.NewStringField(fieldAWSToken).
				Description("The session token of temporary credentials (an `ASIA…` `id`); requires `id` and `secret`. Credentials given here are never refreshed, so temporary ones stop working when they expire: leave `id`, `secret` and `token` empty to use the default chain, which refreshes them. A secret, like `secret`.").
				Default("").
				Secret(),
			service.NewStringField(fieldAWSRole).
				Description("The ARN of an IAM role to assume through STS (`sts:AssumeRole`) with the credentials above or those of the default chain, e.g. `arn:aws:iam::123456789012:role/kafka-reader`; the role's credentials sign, and are renewed 5 minutes before they expire. Empty: no role.").
				Default(""),
			service.NewStringField(fieldAWSExternalID).
				Description("The external ID sent when assuming `role` (STS `ExternalId`), for a role whose trust policy requires one. Requires `role`.").
				Default(""),
			service.NewStringField(fieldAWSProfile).
				Description("The profile of the shared config and credentials files (`~/.aws/config`, `~/.aws/credentials`) the default chain uses, instead of `AWS_PROFILE` or `default`.").
				Default(""),
			service.NewBoolField(fieldAWSFromEC2Role).
				Description("If true, the credentials of the EC2 instance's role (instance metadata, IMDSv2; franz-go signs with them) instead of the whole default chain, which would take environment variables or shared files first. Not with `id` or `profile`; `role` may be assumed with them.").
				Default(false),
		).
			Description("Where `AWS_MSK_IAM` gets AWS credentials. With `id` and `secret` empty (the default), from the AWS SDK for Go v2's default chain, in this order: the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), the shared config and credentials files (`~/.aws/config`, `~/.aws/credentials`, `AWS_PROFILE`, `AWS_CONFIG_FILE`, `AWS_SHARED_CREDENTIALS_FILE`), web identity (`AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`, as EKS IRSA sets them), the container endpoint (ECS task roles, EKS Pod Identity) and EC2 instance metadata. They are loaded at the first connection; temporary ones are replaced 5 minutes before they expire, and every authentication (each new connection, and each re-authentication when the broker's session lifetime ends, KIP-368) signs with current ones."),
	).
		Description("AWS settings of `AWS_MSK_IAM` (Amazon MSK IAM access control, franz-go `sasl/aws`): the cluster's region and where the credentials come from. Unused by the other mechanisms.")
}

// parseAWS reads entry i's aws settings.
func parseAWS(e *service.ParsedConfig, i int) (security.AWS, error) {
	var errs []error
	str := func(path ...string) string {
		v, err := e.FieldString(path...)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s[%d].%s: %w", fieldSASL, i, strings.Join(path, "."), err))
		}
		return v
	}
	a := security.AWS{
		Region:          str(fieldSASLAWS, fieldAWSRegion),
		AccessKeyID:     str(fieldSASLAWS, fieldAWSCredentials, fieldAWSID),
		SecretAccessKey: str(fieldSASLAWS, fieldAWSCredentials, fieldAWSSecret),
		SessionToken:    str(fieldSASLAWS, fieldAWSCredentials, fieldAWSToken),
		RoleARN:         str(fieldSASLAWS, fieldAWSCredentials, fieldAWSRole),
		RoleExternalID:  str(fieldSASLAWS, fieldAWSCredentials, fieldAWSExternalID),
		Profile:         str(fieldSASLAWS, fieldAWSCredentials, fieldAWSProfile),
		Endpoint:        str(fieldSASLAWS, fieldAWSEndpoint),
	}
	var err error
	a.FromEC2Role, err = e.FieldBool(fieldSASLAWS, fieldAWSCredentials, fieldAWSFromEC2Role)
	if err != nil {
		errs = append(errs, fmt.Errorf("%s[%d].%s.%s.%s: %w", fieldSASL, i, fieldSASLAWS, fieldAWSCredentials, fieldAWSFromEC2Role, err))
	}
	return a, errors.Join(errs...)
}
