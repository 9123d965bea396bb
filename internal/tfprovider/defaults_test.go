package tfprovider_test

import (
	"os"
	"regexp"
	"testing"
)

// TestExampleDefaultsAreTheSeeds: examples/terraform's variables default
// to the values the second seed gives them (its variables.tf), except
// pg_version, whose "14" Debian 12 does not package (the example's README
// says so).
func TestExampleDefaultsAreTheSeeds(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../../examples/terraform/variables.tf")
	if err != nil {
		t.Fatal(err)
	}
	seed := map[string]string{
		"base_packages":  `["git", "curl", "htop", "jq", "unzip"]`,
		"install_run_id": `1`,
		"pg_db_name":     `"myapp"`,
		"pg_db_user":     `"app_user"`,
	}
	types := map[string]string{"install_run_id": "number", "base_packages": "list(string)"}
	for name, want := range seed {
		block := regexp.MustCompile(`(?s)variable "` + name + `" \{(.*?)\n\}`).FindStringSubmatch(string(src))
		if block == nil {
			t.Errorf("variables.tf has no variable %s", name)
			continue
		}
		def := regexp.MustCompile(`(?m)^\s*default\s*=\s*(.+?)\s*$`).FindStringSubmatch(block[1])
		if def == nil || def[1] != want {
			t.Errorf("variable %s defaults to %v, the seed's is %s", name, def, want)
		}
		if ty, ok := types[name]; ok {
			if got := regexp.MustCompile(`(?m)^\s*type\s*=\s*(.+?)\s*$`).FindStringSubmatch(block[1]); got == nil || got[1] != ty {
				t.Errorf("variable %s is of type %v, the seed's is %s", name, got, ty)
			}
		}
	}
}
