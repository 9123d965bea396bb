package keeper

import "github.com/soulstack/soulstack/internal/store"

// SetSoulCertSerial replaces the registry's certificate serial of a soul
// (soulCertSerial) for the tests of the agent transport, until join
// records it in the registry. Call it before any keeper starts.
func SetSoulCertSerial(f func(store.Soul) string) { soulCertSerial = f }
