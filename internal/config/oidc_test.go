package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/config"
)

// TestOIDCSection: a complete oidc section validates and gets its
// defaults; each mistake is refused naming its key.
func TestOIDCSection(t *testing.T) {
	t.Parallel()
	good := config.OIDC{Issuer: "https://login.example.com", ClientID: "soulstack", RedirectURL: "https://keeper.example.com/v1/auth/oidc/callback",
		Roles: map[string]string{"sre": "operator"}}
	c := config.Config{OIDC: good}.WithDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.OIDC.GroupsClaim != "groups" || c.OIDC.TokenTTL.Std() != 12*time.Hour || strings.Join(c.OIDC.Scopes, " ") != "openid profile email groups" {
		t.Fatalf("defaults: %+v", c.OIDC)
	}
	for name, tc := range map[string]struct {
		edit func(*config.OIDC)
		want string
	}{
		"http issuer off loopback": {func(o *config.OIDC) { o.Issuer = "http://login.example.com" }, "oidc.issuer"},
		"http issuer on loopback":  {func(o *config.OIDC) { o.Issuer = "http://127.0.0.1:5556" }, ""},
		"no client":                {func(o *config.OIDC) { o.ClientID = "" }, "oidc.client_id"},
		"secret not a reference":   {func(o *config.OIDC) { o.ClientSecretRef = "hunter2" }, "oidc.client_secret_ref"},
		"redirect elsewhere":       {func(o *config.OIDC) { o.RedirectURL = "https://keeper.example.com/callback" }, "oidc.redirect_url"},
		"no roles":                 {func(o *config.OIDC) { o.Roles = nil }, "oidc.roles"},
		"unknown role":             {func(o *config.OIDC) { o.Roles = map[string]string{"sre": "root"} }, "oidc.roles.sre"},
		"no openid scope":          {func(o *config.OIDC) { o.Scopes = []string{"profile"} }, "oidc.scopes"},
		"short token_ttl":          {func(o *config.OIDC) { o.TokenTTL = config.Duration(time.Second) }, "oidc.token_ttl"},
		"roles without issuer":     {func(o *config.OIDC) { o.Issuer = "" }, "oidc.issuer"},
	} {
		o := good
		tc.edit(&o)
		err := config.Config{OIDC: o}.WithDefaults().Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
