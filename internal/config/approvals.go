package config

import (
	"fmt"
	"os"
	"time"

	"github.com/soulstack/soulstack/internal/approval"
)

// Approvals is keeper.yml's approvals section: Cedar forbid rules, each
// naming what needs a second person's approval (internal/approval).
type Approvals struct {
	// Policy is the policies' Cedar text; PolicyFile a file holding more.
	Policy     string `yaml:"policy"`
	PolicyFile string `yaml:"policy_file"`
	// ExpiresIn is how long a held step waits for a decision (default
	// 24h; never past the run's timeout).
	ExpiresIn Duration `yaml:"expires_in"`
}

// Parsed returns the policies of Policy and PolicyFile together.
func (a Approvals) Parsed() (approval.Policy, error) {
	inline, err := approval.Parse("keeper.yml approvals.policy", a.Policy)
	if err != nil || a.PolicyFile == "" {
		return inline, err
	}
	b, err := os.ReadFile(a.PolicyFile)
	if err != nil {
		return approval.Policy{}, fmt.Errorf("approvals.policy_file: %w", err)
	}
	file, err := approval.Parse(a.PolicyFile, string(b))
	if err != nil {
		return approval.Policy{}, err
	}
	return approval.Join(inline, file)
}

func (a Approvals) validate() error {
	if _, err := a.Parsed(); err != nil {
		return fmt.Errorf("approvals: %w", err)
	}
	return positive("approvals.expires_in", a.ExpiresIn, Duration(time.Second), "24h")
}
