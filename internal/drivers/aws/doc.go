// Package aws is the EC2 CloudDriver (soul-cloud-aws), built on
// aws-sdk-go-v2's service/ec2. docs/drivers/aws.md is its user guide:
// provider config, credentials, profile keys, the IAM policy it needs, and
// how idempotency and orphans work.
//
// Each VM is one RunInstances call with its own ClientToken, derived from
// the keeper deployment id, the request id and the VM's index, and with
// TagSpecifications on the instance and its volumes (Name,
// soulstack:request_id, soulstack:run_id, soulstack:keeper,
// soulstack:index). A Create retried after a crash first finds the
// request's instances by tag and then relies on the tokens, so it returns
// the instances already made. Destroy and Resize refuse instances without
// this keeper's tag (driver.not_owned) before changing any. Failures map to
// driversdk codes in errors.go, the one place that reads EC2 error codes.
package aws
