package keeper

// DefaultCloudInit is the built-in userdata template, for tests that
// extend it.
const DefaultCloudInit = defaultCloudInit
