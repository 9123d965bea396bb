// Package openstack is the CloudDriver for OpenStack clouds (Nova,
// Neutron and Keystone v3) on gophercloud v2, served by the
// soul-cloud-openstack plugin. docs/drivers/openstack.md is its user's
// guide: the provider config, profile and credential keys, the
// permissions the credentials need, and how idempotency and orphans
// work.
//
// The driver keeps no state. Every server it makes carries metadata
// soulstack:request_id, soulstack:run_id, soulstack:keeper and
// soulstack:index; a Create looks the request's servers up by that
// metadata before it makes any, so a Create retried after a crash (of
// the plugin or the keeper) returns the servers the first one made.
// Destroy and Resize refuse servers without this keeper's tag
// (driver.not_owned) before they touch any.
//
// Errors are mapped in one place (cloudError): 401 -> auth.failed,
// quota answers -> quota.exceeded, 400 -> profile.invalid, 404 ->
// vm.not_found, rate limits that outlast the retries and 5xx ->
// driver.unavailable, the deadline -> driver.timeout. No message carries
// any part of the credentials.
package openstack
