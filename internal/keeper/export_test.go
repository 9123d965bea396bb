package keeper

import "github.com/soulstack/soulstack/internal/store"

// SetSoulCertSerial replaces the registry's certificate serial of a soul
// (soulCertSerial, store.Soul.CertSerial in the keeper binary) for the
// in-process tests of the agent transport, whose souls are registered by
// hand with identities the test issues, not joined. Call it before any
// keeper starts; keeper processes the tests run keep the registry's rule.
func SetSoulCertSerial(f func(store.Soul) string) { soulCertSerial = f }

// DefaultCloudInit is the built-in userdata template, for tests that
// extend it.
const DefaultCloudInit = defaultCloudInit
