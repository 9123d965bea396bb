package aws

import (
	"context"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	awscreds "github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/soulstack/soulstack/driversdk"
)

// session is one call's EC2 client with the provider's settings.
type session struct {
	ec2  *ec2.Client
	cfg  config
	prov driversdk.Provider
}

// newSession builds an EC2 client for the provider: its region, its
// endpoint, its credentials (never the environment's), and the SDK's
// standard retryer (exponential backoff with jitter, which retries
// RequestLimitExceeded, throttling and transient 5xx answers).
func newSession(ctx context.Context, p driversdk.Provider) (*session, error) {
	cfg, err := parseConfig(p)
	if err != nil {
		return nil, err
	}
	creds, err := parseCredentials(p.Credentials)
	if err != nil {
		return nil, err
	}
	retryer := func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = cfg.MaxAttempts
			o.MaxBackoff = cfg.maxBackoff
		})
	}
	opts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRegion(p.Region),
		awsconfig.WithRetryer(retryer),
		awsconfig.WithHTTPClient(&http.Client{Timeout: 5 * time.Minute}),
		awsconfig.WithEC2IMDSClientEnableState(imds.ClientDisabled),
	}
	if creds.Profile != "" {
		opts = append(opts, awsconfig.WithSharedConfigProfile(creds.Profile))
	} else {
		// No shared config or credential files unless a profile is
		// named: the credentials come from credentials_ref only.
		opts = append(opts, awsconfig.WithSharedConfigFiles([]string{}), awsconfig.WithSharedCredentialsFiles([]string{}),
			awsconfig.WithCredentialsProvider(
				awscreds.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken)))
	}
	ac, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, driversdk.Errorf(CodeAuthFailed, "load the AWS configuration of the provider's credentials: %v", err)
	}
	if creds.RoleARN != "" {
		stsClient := sts.NewFromConfig(ac)
		ac.Credentials = aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(stsClient, creds.RoleARN, func(o *stscreds.AssumeRoleOptions) {
			if creds.ExternalID != "" {
				o.ExternalID = aws.String(creds.ExternalID)
			}
			o.RoleSessionName = "soulstack"
			if creds.RoleSessionName != "" {
				o.RoleSessionName = creds.RoleSessionName
			}
		}))
	}
	client := ec2.NewFromConfig(ac, func(o *ec2.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	return &session{ec2: client, cfg: cfg, prov: p}, nil
}
