package api

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/base"

	"github.com/golang-jwt/jwt/v5"
	"github.com/oauth2-proxy/mockoidc"
	"github.com/soulstack/soulstack/internal/access"
)

// TestVerifyIDToken: an ID token signed by the provider for this keeper's
// client and this sign-in's nonce is accepted; one from another issuer,
// for another audience, expired, or carrying another sign-in's nonce (an
// ID token replayed from elsewhere) is refused with auth.oidc_id_token.
func TestVerifyIDToken(t *testing.T) {
	t.Parallel()
	idp, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idp.Shutdown() })
	other, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Shutdown() })
	cfg := &OIDCConfig{Issuer: idp.Issuer(), ClientID: idp.ClientID, ClientSecret: idp.ClientSecret, GroupsClaim: "groups",
		Roles: map[string]string{"sre": "operator"}, Scopes: []string{"openid"}}
	s := &Server{oidc: newOIDCFlow(cfg), access: access.New(nil, cfg.AccessRoles(), base.Base{})}
	ctx := context.Background()
	_, verifier, err := s.oidc.discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(kp *mockoidc.MockOIDC, iss, aud, nonce string, exp time.Time) string {
		t.Helper()
		raw, err := kp.Keypair.SignJWT(&struct {
			*mockoidc.IDTokenClaims
			Email  string   `json:"email"`
			Groups []string `json:"groups"`
		}{&mockoidc.IDTokenClaims{Nonce: nonce, RegisteredClaims: &jwt.RegisteredClaims{
			Issuer: iss, Subject: "u-1", Audience: jwt.ClaimStrings{aud}, IssuedAt: jwt.NewNumericDate(exp.Add(-time.Hour)), ExpiresAt: jwt.NewNumericDate(exp),
		}}, "ada@example.com", []string{"sre", "sre", "dev"}})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	later := time.Now().Add(10 * time.Minute)
	person, groups, err := s.verifyIDToken(ctx, verifier, sign(idp, idp.Issuer(), idp.ClientID, "n-1", later), "n-1")
	if err != nil || person.Issuer != idp.Issuer() || person.Subject != "u-1" || person.Name != "ada@example.com" || len(groups) != 2 || s.access.KeeperRole(groups) != "operator" {
		t.Fatalf("a good ID token: %+v %v %v", person, groups, err)
	}
	otherKey, err := mockoidc.RandomKeypair(2048)
	if err != nil {
		t.Fatal(err)
	}
	forged := &mockoidc.MockOIDC{Keypair: otherKey}
	for name, raw := range map[string]string{
		"another issuer":             sign(other, other.Issuer(), idp.ClientID, "n-1", later),
		"another audience":           sign(idp, idp.Issuer(), "someone-else", "n-1", later),
		"expired":                    sign(idp, idp.Issuer(), idp.ClientID, "n-1", time.Now().Add(-time.Minute)),
		"another sign-in's nonce":    sign(idp, idp.Issuer(), idp.ClientID, "n-other", later),
		"no nonce":                   sign(idp, idp.Issuer(), idp.ClientID, "", later),
		"signed by another key":      sign(forged, idp.Issuer(), idp.ClientID, "n-1", later),
		"not a JWT":                  "not-a-jwt",
		"empty (no ID token at all)": "",
	} {
		_, _, err := s.verifyIDToken(ctx, verifier, raw, "n-1")
		var oe *oidcError
		if !errors.As(err, &oe) || oe.code != "auth.oidc_id_token" {
			t.Errorf("%s: %v, want auth.oidc_id_token", name, err)
		}
	}
}

func TestRoleOfAndReturnPaths(t *testing.T) {
	t.Parallel()
	a := access.New(nil, (&OIDCConfig{Roles: map[string]string{"dev": "viewer", "sre": "operator", "root": "admin"}}).AccessRoles(), base.Base{})
	for groups, want := range map[string]string{"": "", "x": "", "dev": "viewer", "dev,sre": "operator", "sre,root,dev": "admin"} {
		if got := a.KeeperRole(groupsOf(splitComma(groups))); got != want {
			t.Errorf("roleOf(%s) = %q, want %q", groups, got, want)
		}
	}
	for p, ok := range map[string]bool{"/ui/": true, "/ui/#/runs": true, "//evil.example/ui/": false, "https://evil.example/ui/": false, "/v1/tokens": false, "/ui\\..\\": false, "/\\evil.example": false} {
		if localUIPath(p) != ok {
			t.Errorf("localUIPath(%q) = %v", p, !ok)
		}
	}
}

func splitComma(s string) any {
	if s == "" {
		return nil
	}
	var out []any
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}
