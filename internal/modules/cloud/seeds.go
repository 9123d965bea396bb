package cloud

import (
	"errors"
	"fmt"
	"strings"

	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/scenario"
)

// checkSeeds validates each seed's scenario with its input plus sid (the
// first predicted SID, or what the first one would be): a seed that could
// never run fails the step before anything is made.
func checkSeeds(seeds []SeedParam, sid string) error {
	for i, sd := range seeds {
		loc := fmt.Sprintf("seeds[%d]", i)
		if strings.TrimSpace(sd.Scenario) == "" {
			return &module.Error{Code: "cloud.seed_invalid", Message: loc + ".scenario: must be the scenario's YAML text, not empty"}
		}
		if _, ok := sd.Input["sid"]; ok {
			return &module.Error{Code: "cloud.seed_invalid", Message: loc + ".input.sid: is set by the keeper to the soul's SID; leave it out"}
		}
		input := map[string]any{"sid": sid}
		for k, v := range sd.Input {
			input[k] = v
		}
		_, err := scenario.Load(loc+".scenario", []byte(sd.Scenario), input)
		var se *scenario.Error
		if errors.As(err, &se) && len(se.Problems) > 0 {
			var parts []string
			for _, p := range se.Problems {
				parts = append(parts, p.Pos.String()+": "+p.Message)
			}
			return &module.Error{Code: "cloud.seed_invalid", Message: strings.Join(parts, "; ")}
		}
		if err != nil {
			return &module.Error{Code: "cloud.seed_invalid", Message: loc + ".scenario: " + err.Error()}
		}
	}
	return nil
}
