// Command soul-cloud-aws is the CloudDriver plugin for Amazon EC2 (and
// EC2-compatible APIs through the provider's endpoint), built on
// aws-sdk-go-v2. The keeper starts it from its plugin dir or $PATH for
// providers with driver "aws":
//
//	{"name": "aws", "driver": "aws", "region": "eu-central-1",
//	 "fqdn_suffix": "example.internal", "credentials_ref": "file:/etc/soulstack/aws.json"}
//
// with profiles such as {"image_id": "ami-…", "instance_type": "t3.micro",
// "subnet_id": "subnet-…", "ssh_user": "admin"}. docs/drivers/aws.md
// documents the config, credentials and profile keys and the IAM policy.
//
// Run by hand, without a keeper, it prints a hint and exits.
package main

import (
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/drivers/aws"
)

func main() {
	driversdk.Serve(aws.New(nil))
}
