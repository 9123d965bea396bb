package engine

import "testing"

// TestFailureMessage covers the shapes of a failed run's message.
func TestFailureMessage(t *testing.T) {
	t.Parallel()
	one := "a on h1: command.failed: exit status 1: (no output)"
	two := "b on h2: ssh.unreachable: dial tcp 127.0.0.1:1: connection refused"
	tests := []struct {
		name   string
		errors []string
		failed int
		want   string
	}{
		{"one", []string{one}, 1, one},
		{"two joined", []string{one, two}, 2, one + "; " + two},
		{"more than recorded", []string{one, two}, 9, one + "; " + two + "; and 7 more failed target(s)"},
		{"none recorded", nil, 3, "3 failed target(s)"},
		{"nothing failed", nil, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := &state{Errors: tt.errors, Failed: map[string]string{}}
			for i := 0; i < tt.failed; i++ {
				st.Failed[string(rune('a'+i))] = "s"
			}
			if got := failureMessage(st); got != tt.want {
				t.Errorf("failureMessage = %q, want %q", got, tt.want)
			}
		})
	}
}
