package scenario

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	_ "github.com/soulstack/soulstack/internal/modules/standard"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with the file at path, or rewrites it under -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (run go test -update to accept):\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

// TestGolden loads every testdata/validate/*.yaml (with the input in
// *.input.json when there is one) and compares the problems, or a summary
// of the plan, with *.golden.
func TestGolden(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "validate", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test scenarios: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var input map[string]any
			if b, err := os.ReadFile(strings.TrimSuffix(file, ".yaml") + ".input.json"); err == nil {
				if err := json.Unmarshal(b, &input); err != nil {
					t.Fatal(err)
				}
			}
			plan, err := Load(filepath.Base(file), src, input)
			var got string
			if err != nil {
				got = err.Error() + "\n"
			} else {
				got = summary(plan)
			}
			golden(t, strings.TrimSuffix(file, ".yaml")+".golden", got)
		})
	}
}

// summary describes a plan for golden files.
func summary(p *Plan) string {
	var b strings.Builder
	in, _ := json.Marshal(p.Input)
	fmt.Fprintf(&b, "plan %q from %s\ninput: %s\nsecret inputs: %v\n", p.Name, p.File, in, p.SecretInputs)
	for _, st := range p.Steps {
		on := "keeper"
		if !st.Keeper {
			on = "souls"
		}
		fmt.Fprintf(&b, "step %d %s at %s: %s on %s", st.Index, st.Name, st.Pos, st.ID, on)
		if st.when != nil {
			fmt.Fprintf(&b, ", when")
		}
		if st.changedWhen != nil {
			fmt.Fprintf(&b, ", changed_when")
		}
		if st.failedWhen != nil {
			fmt.Fprintf(&b, ", failed_when")
		}
		if st.AnyErrorsFatal {
			fmt.Fprintf(&b, ", any_errors_fatal")
		}
		if st.Forks > 0 {
			fmt.Fprintf(&b, ", forks %d", st.Forks)
		}
		if st.Retries > 0 {
			fmt.Fprintf(&b, ", retries %d every %s", st.Retries, st.RetryDelay)
		}
		if st.Connect != nil {
			fmt.Fprintf(&b, ", connect %d every %s", st.Connect.Retries, st.Connect.Delay)
		}
		if st.Timeout > 0 {
			fmt.Fprintf(&b, ", timeout %s", st.Timeout)
		}
		var params []string
		if st.params != nil {
			params = append(params, st.params.keys...)
		}
		sort.Strings(params)
		fmt.Fprintf(&b, "\n  params: %s\n", strings.Join(params, ", "))
	}
	return b.String()
}
