package store

import (
	"encoding/json"
	"time"
)

// Provider is a cloud account: a driver, a region and a reference to its
// credentials (never the credentials themselves).
type Provider struct {
	Name           string
	Driver         string
	Region         string
	CredentialsRef string
	FQDNSuffix     string
	Config         json.RawMessage
	CreatedAt      time.Time
	CreatedBy      string
	// Project owns the provider and its credentials; SharedWith are the
	// projects that may read and use it (never manage it).
	Project    string
	SharedWith []string
}

// Profile is a VM spec on top of a provider.
type Profile struct {
	Name      string
	Provider  string
	Spec      json.RawMessage
	CreatedAt time.Time
	CreatedBy string
	// Project owns the profile; SharedWith may read and use it.
	Project    string
	SharedWith []string
}

// Share is a provider or profile (Kind "provider" or "profile") shared
// with Project.
type Share struct {
	Kind    string
	Name    string
	Project string
}

// ProviderCreateParams creates a provider.
type ProviderCreateParams struct {
	Provider Provider
	Actor    Actor
}

// ProfileCreateParams creates a profile; its provider must exist.
type ProfileCreateParams struct {
	Profile Profile
	Actor   Actor
}
