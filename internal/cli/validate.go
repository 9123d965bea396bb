package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
)

// validateResult is one file's answer, as -o json prints it.
type validateResult struct {
	File string `json:"file"`
	client.ScenarioValidation
}

func (a *app) validateCommand() *cobra.Command {
	var inputs []string
	var inputFile string
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check scenarios without running them (for CI and pre-commit hooks)",
		Example: `  soulctl validate examples/*.yaml
  soulctl validate examples/hello.yaml --input host=db-1.example.com`,
		Long: `Check each scenario file, with the input a run would get, exactly as the keeper
checks a run before it accepts it — modules, params, expressions, step and input
references (an undeclared ${ input.x } too), the input against the declared
inputs, literal targets that are not registered souls — and run nothing.
Every problem is printed as file:line:column: code: message. Without --input
or --input-file the file is checked alone: a required input is then not a
problem (a run must give it); with either, the input is checked whole.

Exit codes: 0 every file is valid, 4 at least one is not, 1 the keeper could not
be asked, 2 a usage error.

  soulctl validate examples/*.yaml
  soulctl validate deploy.yaml --input env=prod --input-file common.json`,
		Args: cobra.MinimumNArgs(1),
		RunE: a.action(func(cmd *cobra.Command, args []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			input, err := runInput(inputs, inputFile, a.env.Stdin) // once: --input-file - reads stdin
			if err != nil {
				return err
			}
			var results []validateResult
			invalid := 0
			for _, path := range args {
				in, err := readScenario(path)
				if err != nil {
					return err
				}
				v, err := c.ScenarioValidate(cmd.Context(), client.ScenarioValidate{Scenario: in.Scenario, File: path, Input: input,
					PartialInput: len(inputs) == 0 && inputFile == ""})
				if err != nil {
					return err
				}
				results = append(results, validateResult{File: path, ScenarioValidation: *v})
				if !v.Valid {
					invalid++
				}
			}
			t := text("")
			for _, r := range results {
				if r.Valid {
					t += text(fmt.Sprintf("%s: valid\n", r.File))
					continue
				}
				for _, pr := range r.Problems {
					t += text(fmt.Sprintf("%s: %s: %s\n", pr.Location, pr.Code, pr.Message))
				}
			}
			if err := p.print(results, t); err != nil {
				return err
			}
			if invalid > 0 {
				return &exitError{code: ExitInvalid, msg: fmt.Sprintf("%d of %d scenario(s) have problems", invalid, len(args))}
			}
			return nil
		}),
	}
	cmd.Flags().StringArrayVar(&inputs, "input", nil, "input key=value for every file; the value is JSON when it parses as JSON, else a string (repeatable)")
	cmd.Flags().StringVar(&inputFile, "input-file", "", "JSON object with the input (- for stdin); --input keys override it")
	return cmd
}
