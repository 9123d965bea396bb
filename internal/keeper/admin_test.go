package keeper

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/store"
	"github.com/soulstack/soulstack/internal/testdb"
)

func TestWarnAdminTokens(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	tests := []struct {
		name   string
		tokens []store.APIToken
		want   string // "" for no warning
	}{
		{"never expires", []store.APIToken{{Role: "admin"}, {Role: "admin", ExpiresAt: at(time.Hour)}}, ""},
		{"expires late enough", []store.APIToken{{Role: "admin", ExpiresAt: at(AdminExpiryWarning + time.Hour)}}, ""},
		{"the longest-lived expires soon", []store.APIToken{{Role: "admin", ExpiresAt: at(2 * time.Hour)}, {Role: "admin", ExpiresAt: at(48 * time.Hour)}}, "expires soon: create another admin token, or after it expired run `keeper token bootstrap` on this host\" id=tok_1 expires_at=2026-12-03T12:00:00Z expires_in=48h0m0s"},
		{"only expired and non-admin tokens", []store.APIToken{{Role: "admin", ExpiresAt: at(-time.Hour)}, {Role: "operator"}}, "no active admin API token is left"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := testdb.SQLite.Open(t)
			for i, tk := range tc.tokens {
				tk.ID, tk.Name, tk.Hash = "tok_"+string(rune('0'+i)), "t", "h"+string(rune('0'+i))
				if _, err := st.TokenCreate(context.Background(), store.TokenCreateParams{Token: tk, Actor: store.ActorKeeper}); err != nil {
					t.Fatal(err)
				}
			}
			var buf bytes.Buffer
			warnAdminTokens(context.Background(), st, slog.New(slog.NewTextHandler(&buf, nil)), now)
			got := buf.String()
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("log = %q, want it to hold %q", got, tc.want)
			}
		})
	}
}
