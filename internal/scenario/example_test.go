package scenario_test

import (
	"context"
	"fmt"

	"github.com/soulstack/soulstack/internal/expr"
	_ "github.com/soulstack/soulstack/internal/modules/standard"
	"github.com/soulstack/soulstack/internal/scenario"
)

func ExampleLoad() {
	src := []byte(`
inputs:
  host: {type: string}
steps:
  - name: hello
    on: "${ input.host }"
    module: core.command.ran
    params: {cmd: "echo hello from ${ soul.sid }"}
`)
	plan, err := scenario.Load("hello.yaml", src, map[string]any{"host": "web-1.local.test"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	step := plan.Steps[0]
	vars := expr.Vars{Input: plan.Input}
	sids, _ := step.Targets(ctx, vars)
	for _, sid := range sids {
		vars.Soul = map[string]any{"sid": sid}
		params, _ := step.Params(ctx, vars)
		fmt.Println(sid, string(params))
	}
	// Output:
	// web-1.local.test {"cmd":"echo hello from web-1.local.test"}
}

func ExampleCheck() {
	src := []byte(`
steps:
  - name: provision
    on: web-1.local.test
    module: core.cloud.created
    params: {provider: local, cuont: 2}
`)
	_, err := scenario.Check("spawn.yaml", src)
	fmt.Println(err)
	// Output:
	// spawn.yaml:4:9: scenario.keeper_module_needs_on_keeper: step "provision": core.cloud.created runs inside the keeper, so the step must say `on: keeper`, not name souls
	// spawn.yaml:6:31: scenario.unknown_param: step "provision": unknown param "cuont" for core.cloud.created (did you mean "count"?)
}
