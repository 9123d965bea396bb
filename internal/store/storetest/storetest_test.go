package storetest_test

import (
	"testing"

	"github.com/soulstack/soulstack/internal/store/storetest"
	"github.com/soulstack/soulstack/internal/testdb"
)

func TestSQLite(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testdb.SQLite)
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	storetest.Run(t, testdb.Postgres)
}
