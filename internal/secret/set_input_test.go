package secret

import (
	"slices"
	"testing"
)

// TestAddInput: a run's secret set holds the strings under declared
// inputs and under secret-looking keys at any depth, and nothing else.
func TestAddInput(t *testing.T) {
	s := NewSet()
	s.AddInput(map[string]any{
		"db":      "declared-value-1",
		"name":    "plain-value-one",
		"api_key": "sensitive-key-value",
		"nested":  map[string]any{"password": "nested-password-1", "host": "db.example.test"},
		"list":    []any{map[string]any{"token": "token-in-a-list"}, "plain-in-a-list"},
		"creds":   []any{"declared-list-item"},
	}, map[string]bool{"db": true, "creds": true})
	want := []string{"declared-list-item", "declared-value-1", "nested-password-1", "sensitive-key-value", "token-in-a-list"}
	got := s.Values()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("secret set = %q, want %q", got, want)
	}
}
