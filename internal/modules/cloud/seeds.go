package cloud

import (
	"fmt"
	"strings"

	"github.com/soulstack/soulstack/internal/module"
)

// SeedChecker is an optional interface of Host: it validates a seed's
// scenario text with its input and returns the problems found, each as
// "location: message". A Host without it stores seeds unchecked (they
// are checked again when their run is created).
type SeedChecker interface {
	CheckSeed(name, text string, input map[string]any) []string
}

// checkSeeds validates each seed's scenario with its input plus sid (the
// first predicted SID, or what the first one would be): a seed that could
// never run fails the step before anything is made.
func checkSeeds(h Host, seeds []SeedParam, sid string) error {
	checker, _ := h.(SeedChecker)
	for i, sd := range seeds {
		loc := fmt.Sprintf("seeds[%d]", i)
		if strings.TrimSpace(sd.Scenario) == "" {
			return &module.Error{Code: "cloud.seed_invalid", Message: loc + ".scenario: must be the scenario's YAML text, not empty"}
		}
		if _, ok := sd.Input["sid"]; ok {
			return &module.Error{Code: "cloud.seed_invalid", Message: loc + ".input.sid: is set by the keeper to the soul's SID; leave it out"}
		}
		if checker == nil {
			continue
		}
		input := map[string]any{"sid": sid}
		for k, v := range sd.Input {
			input[k] = v
		}
		if problems := checker.CheckSeed(loc+".scenario", sd.Scenario, input); len(problems) > 0 {
			return &module.Error{Code: "cloud.seed_invalid", Message: strings.Join(problems, "; ")}
		}
	}
	return nil
}

// SelfJoiner is an optional interface of Host: JoinsByItself reports
// whether a self_onboard VM of driver runs the agent's join from its
// userdata. Such a soul's SSH host key is pinned when it joins, and SSH
// waits for that (store.Connection.AwaitJoin). Without it, or when the
// driver reported the VM's host key, nothing waits.
type SelfJoiner interface {
	JoinsByItself(driver string) bool
}
