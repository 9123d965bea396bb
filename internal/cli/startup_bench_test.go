package cli

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/config"
	"github.com/soulstack/soulstack/internal/keepertest"
	"github.com/soulstack/soulstack/internal/scenario"
)

// BenchmarkRunStartup measures what `soulctl run FILE` does before it
// submits the run, against a real keeper on loopback (SQLite):
//
//	catalog  GET /v1/modules, the keeper's module catalog
//	load     scenario.Load with that catalog (parse, validate, CEL compile)
//	check    both, as soulctl run does them (checkLocally)
//
//	go test ./internal/cli -run '^$' -bench BenchmarkRunStartup -benchmem
//
// The whole command as a process is measured with hyperfine (see
// docs/performance.md).
func BenchmarkRunStartup(b *testing.B) {
	c, token := startBenchKeeper(b)
	ctx := context.Background()
	text, err := os.ReadFile(filepath.Join("..", "..", "examples", "hello.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	in := client.RunCreate{File: "hello.yaml", Scenario: string(text), Input: map[string]any{"host": "web-1.local.test"}}
	mods, err := c.ModuleList(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("catalog", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.ModuleList(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("load", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := scenario.Load(in.File, []byte(in.Scenario), in.Input, scenario.WithModules(catalog(mods.Items))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("check", func(b *testing.B) {
		a := &app{env: Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}, token: token}
		b.ReportAllocs()
		for b.Loop() {
			if err := a.checkLocally(ctx, c, in); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// startBenchKeeper runs a keeper on loopback until the benchmark ends and
// returns a client with its admin token.
func startBenchKeeper(b *testing.B) (*client.Client, string) {
	b.Helper()
	k := keepertest.Start(b, func(c *config.Config) { c.Log.Level = "error" })
	return k.Client, k.Token
}
