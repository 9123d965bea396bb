package keepertest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/testdb"
)

// Credentials is the keeper.yml section a test keeper gets unless its
// YAML has one of its own: tests keep their SSH keys and credential files
// under the temporary directory and name variables freely (the keeper's
// own data dir stays out of reach whatever this allows).
var Credentials = "credentials:\n  files: [" + filepath.Clean(os.TempDir()) + "]\n  env: [\"*\"]\n"

// Options say which keeper process a test wants. The zero value is a
// keeper on SQLite, in a directory of the test's own, with Credentials.
type Options struct {
	// Dir is the keeper's working directory; its data dir is Dir/.keeper.
	// Empty: a new temporary directory.
	Dir string
	// YAML is keeper.yml's text (written to Dir/keeper.yml), Credentials
	// prepended unless it has a credentials section.
	YAML string
	// Postgres serves from a fresh database on SOULSTACK_TEST_POSTGRES
	// instead of the data dir's SQLite file.
	Postgres bool
	// Plugins are commands of this module (cmd/soul-cloud-local, an import
	// path) that Bins installs into the keeper's plugin dir before it
	// starts.
	Plugins []string
	Bins    *Binaries
	// Args are more `keeper serve` arguments.
	Args []string
}

// Server is a keeper process a test started, with what the test reaches
// it by.
type Server struct {
	*Proc
	// Dir is the working directory, Data the data directory.
	Dir, Data string
	// Token is the first admin token; Admin a client with it.
	Token string
	Admin *client.Client
}

// Spawn runs `bin serve` as o says (bin is Build's keeper) and waits until
// it listens; it is killed, by its PID, if the test ends with it running.
func Spawn(t testing.TB, bin string, o Options) *Server {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	s := &Server{Dir: o.Dir, Data: filepath.Join(o.Dir, ".keeper")}
	for _, pkg := range o.Plugins {
		if o.Bins == nil {
			t.Fatal("keepertest: Options.Plugins without Options.Bins")
		}
		o.Bins.Install(t, pkg, filepath.Join(s.Data, "plugins"), "")
	}
	yml := o.YAML
	if !strings.Contains(yml, "credentials:") {
		yml = Credentials + yml
	}
	config := filepath.Join(o.Dir, "keeper.yml")
	if err := os.WriteFile(config, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--config", config}, o.Args...)
	if o.Postgres {
		args = append(args, "--database-url", testdb.FreshPostgres(t))
	}
	s.Proc = Serve(t, bin, o.Dir, args...)
	raw, err := os.ReadFile(filepath.Join(s.Data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	s.Token = strings.TrimSpace(string(raw))
	if s.Admin, err = client.New(s.Addr, s.Token); err != nil {
		t.Fatal(err)
	}
	return s
}
