package keeper_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/testdb"
)

// TestDeclaredSecretsNeverInClear, on SQLite and PostgreSQL: secrets
// follow the declaration, not the key name.
//   - A seed whose scenario declares pin secret: true, added through the
//     API and made by core.cloud.created's seeds, has pin sealed at rest
//     and *** in a viewer's answer.
//   - An input declared plain that feeds core.postgres.installed's secret
//     db_password is treated as declared secret: sealed, *** in the run's
//     answer and the audit log's run.started.
//
// No canary is in any answer, the audit log, the keeper's log, the
// database or its WAL.
func TestDeclaredSecretsNeverInClear(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			testDeclaredSecrets(t, backend)
		})
	}
}

const seedScenario = `inputs:
  sid: {type: string}
  pin: {type: string, secret: true}
  site: {type: string}
steps:
  - name: use
    on: "${ input.sid }"
    module: core.command.ran
    params: {cmd: "true", env: {PIN: "${ input.pin }"}}
`

func testDeclaredSecrets(t *testing.T, backend string) {
	dir := t.TempDir()
	data := filepath.Join(dir, ".keeper")
	args := []string{"--log-level", "debug"}
	dbURL := ""
	if backend == "postgres" {
		dbURL = testdb.FreshPostgres(t)
		args = append(args, "--database-url", dbURL)
	}
	k, c := fakeCloudKeeper(t, dir, map[string]map[string]any{"fake": nil}, args...)
	ctx := context.Background()
	canaries := map[string]string{
		"seed":  "canary-seed-pin-5c1e",
		"cloud": "canary-cloud-seed-pin-9a02",
		"run":   "canary-undeclared-pw-77f3",
	}
	if _, err := c.SoulCreate(ctx, client.SoulCreate{SID: "vault.local.test", Address: "127.0.0.1", Connection: client.Connection{Port: closedPort(t)}}); err != nil {
		t.Fatal(err)
	}
	viewerTok, err := c.TokenCreate(ctx, client.TokenCreate{Name: "looker", Role: "viewer"})
	if err != nil {
		t.Fatal(err)
	}
	viewer, err := client.New(k.Addr, viewerTok.Token)
	if err != nil {
		t.Fatal(err)
	}

	// A seed added through the API.
	sd, err := c.SeedAdd(ctx, "vault.local.test", client.SeedCreate{Scenario: seedScenario, Input: map[string]any{"pin": canaries["seed"], "site": "berlin"}})
	if err != nil {
		t.Fatal(err)
	}
	if sd.Input["pin"] != "***" || sd.Input["site"] != "berlin" || strings.Join(sd.SealedInputs, ",") != "pin" {
		t.Fatalf("the seed's answer: %+v", sd)
	}

	// A seed made by core.cloud.created, its pin from the run's own
	// secret input.
	var cloudRun strings.Builder
	cloudRun.WriteString("inputs:\n  pin: {type: string, secret: true}\nsteps:\n  - name: vms\n    on: keeper\n    module: core.cloud.created\n    params:\n      provider: fake\n      profile: {cpus: 1}\n      seeds:\n        - input: {pin: \"${ input.pin }\", site: paris}\n          scenario: |\n")
	for _, line := range strings.Split(strings.TrimRight(seedScenario, "\n"), "\n") {
		cloudRun.WriteString("            " + strings.ReplaceAll(line, "${", "$${") + "\n") // the seed keeps its expressions
	}
	run, _, err := c.RunCreate(ctx, client.RunCreate{Scenario: cloudRun.String(), File: "vms.yaml", Input: map[string]any{"pin": canaries["cloud"]}})
	if err != nil {
		t.Fatal(err)
	}
	made := waitRun(t, c, run.ID)
	if made.Phase != "Succeeded" {
		t.Fatalf("create: %s %+v\n%s", made.Phase, made.Error, describeSteps(made.Steps))
	}
	var out struct {
		Hosts []struct {
			SID string `json:"sid"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal(made.Steps[0].Targets[0].Output, &out); err != nil || len(out.Hosts) != 1 {
		t.Fatalf("hosts: %s", made.Steps[0].Targets[0].Output)
	}
	cloudSeeds, err := viewer.SeedList(ctx, out.Hosts[0].SID)
	if err != nil || len(cloudSeeds.Items) != 1 {
		t.Fatalf("the VM's seeds: %+v, %v", cloudSeeds, err)
	}
	if s := cloudSeeds.Items[0]; s.Input["pin"] != "***" || s.Input["site"] != "paris" || strings.Join(s.SealedInputs, ",") != "pin" {
		t.Fatalf("the VM's seed as a viewer sees it: %+v", s)
	}
	seeds, err := viewer.SeedList(ctx, "vault.local.test")
	if err != nil || len(seeds.Items) != 1 || seeds.Items[0].Input["pin"] != "***" {
		t.Fatalf("the seeds as a viewer sees them: %+v, %v", seeds, err)
	}

	// An input nobody declared secret, fed to a secret param.
	pg := `inputs:
  pw: {type: string}
steps:
  - name: db
    on: vault.local.test
    module: core.postgres.installed
    params: {db_name: app, db_user: app, db_password: "${ input.pw }"}
`
	run, _, err = c.RunCreate(ctx, client.RunCreate{Scenario: pg, File: "pg.yaml", Input: map[string]any{"pw": canaries["run"]}})
	if err != nil {
		t.Fatal(err)
	}
	if string(run.Input) != `{"pw":"***"}` {
		t.Fatalf("the run's answer shows its input as %s", run.Input)
	}
	waitRun(t, c, run.ID)

	var seen []string
	for _, cl := range []*client.Client{c, viewer} {
		for _, id := range []string{made.ID, run.ID} {
			r, err := cl.RunGet(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(r)
			seen = append(seen, string(b))
			_ = cl.RunEvents(ctx, id, 0, func(e client.RunEvent) error { b, _ := json.Marshal(e); seen = append(seen, string(b)); return nil })
		}
		list, _ := cl.RunList(ctx, client.RunListOptions{})
		b, _ := json.Marshal(list)
		seen = append(seen, string(b))
	}
	audit, err := c.AuditList(ctx, client.AuditListOptions{ListOptions: client.ListOptions{Limit: 500}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(audit)
	seen = append(seen, string(b))
	if !strings.Contains(string(b), `"pw":"***"`) {
		t.Errorf("run.started does not show the input masked: %s", b)
	}
	for _, s := range seen {
		for what, canary := range canaries {
			if strings.Contains(s, canary) {
				t.Errorf("an answer shows the %s canary: %.400s", what, s)
			}
		}
	}
	logs := k.Interrupt(t)
	for what, canary := range canaries {
		if strings.Contains(logs, canary) {
			t.Errorf("the keeper's log shows the %s canary", what)
		}
	}
	stored := storedBytes(t, data, dbURL)
	for what, canary := range canaries {
		for where, b := range stored {
			if bytes.Contains(b, []byte(canary)) {
				t.Errorf("%s holds the %s canary in clear", where, what)
			}
		}
	}
}

// storedBytes is everything the keeper stored: each file of its data
// directory (SQLite database and WAL included) and, with PostgreSQL, each
// table's rows as text and each file of the server's pg_wal.
func storedBytes(t *testing.T, data, dbURL string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	readDir := func(root string) {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			out[path] = b
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	readDir(data)
	if dbURL == "" {
		return out
	}
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT tablename FROM pg_tables WHERE schemaname = 'public'`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	rows.Close()
	for _, table := range tables {
		rows, err := db.Query(`SELECT t::text FROM "` + table + `" t`)
		if err != nil {
			t.Fatal(err)
		}
		var all bytes.Buffer
		for rows.Next() {
			var row string
			if err := rows.Scan(&row); err != nil {
				t.Fatal(err)
			}
			all.WriteString(row + "\n")
		}
		rows.Close()
		out["table "+table] = all.Bytes()
	}
	var dataDir string
	if err := db.QueryRow(`SELECT current_setting('data_directory')`).Scan(&dataDir); err != nil {
		t.Fatal(err)
	}
	if len(tables) == 0 {
		t.Fatal("the keeper's PostgreSQL database has no tables")
	}
	readDir(filepath.Join(dataDir, "pg_wal"))
	return out
}
