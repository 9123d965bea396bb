package cloud

import (
	"fmt"
	"strings"

	"github.com/soulstack/soulstack/internal/module"
)

// checkSeeds validates each seed's scenario with its input plus sid (the
// first predicted SID, or what the first one would be): a seed that could
// never run fails the step before anything is made. It notes in each seed
// the inputs its scenario declares secret.
func checkSeeds(h *Services, seeds []SeedParam, sid string) error {
	for i := range seeds {
		sd := &seeds[i]
		loc := fmt.Sprintf("seeds[%d]", i)
		if strings.TrimSpace(sd.Scenario) == "" {
			return &module.Error{Code: "cloud.seed_invalid", Message: loc + ".scenario: must be the scenario's YAML text, not empty"}
		}
		if _, ok := sd.Input["sid"]; ok {
			return &module.Error{Code: "cloud.seed_invalid", Message: loc + ".input.sid: is set by the keeper to the soul's SID; leave it out"}
		}
		if h.CheckSeed == nil {
			continue
		}
		input := map[string]any{"sid": sid}
		for k, v := range sd.Input {
			input[k] = v
		}
		secret, problems := h.CheckSeed(loc+".scenario", sd.Scenario, input)
		if len(problems) > 0 {
			return &module.Error{Code: "cloud.seed_invalid", Message: strings.Join(problems, "; ")}
		}
		sd.secret = secret
	}
	return nil
}
