package api_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/testdb"
)

// TestStorageFullIs507: a registry write the database refuses for lack of
// space (here SQLite at its max_page_count, as on a full disk) is answered
// 507 store.full, changes nothing, and the keeper logs the cause.
func TestStorageFullIs507(t *testing.T) {
	t.Parallel()
	k := start(t, testdb.SQLite)
	db := k.store.DB()
	db.SetMaxOpenConns(1) // the pragma below holds for one connection
	var pages int
	if err := db.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA max_page_count = ` + strconv.Itoa(pages)); err != nil {
		t.Fatal(err)
	}
	big := `{"name":"big","driver":"local","config":{"blob":"` + strings.Repeat("x", 200_000) + `"}}`
	k.expect("POST", "/v1/providers", k.admin, big, 507, "store.full")
	k.expect("GET", "/v1/providers/big", k.admin, "", 404, "provider.not_found")
	if !strings.Contains(k.logs.String(), "full") {
		t.Fatalf("the cause is not logged:\n%s", k.logs.String())
	}
}
