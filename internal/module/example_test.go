package module_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/soulstack/soulstack/internal/module"
)

// Greeted is a module state a module author might write: it declares its
// params, registers itself at init, and decodes its params strictly.
type Greeted struct{}

var _ module.Module = (*Greeted)(nil)

func (*Greeted) Info() module.Info {
	return module.Info{
		ID:         "example.greeting.greeted",
		Summary:    "Print a greeting on each target soul.",
		Side:       module.SideSoul,
		Idempotent: true,
		Params: []module.Param{
			{Name: "name", Type: module.TypeString, Required: true, Doc: "Who to greet."},
		},
		Output:        []module.Field{{Name: "greeting", Type: "string", Doc: "What was printed."}},
		ChangesWhen:   "Never: printing changes nothing.",
		UnchangedWhen: "Always.",
	}
}

func (*Greeted) Run(ctx context.Context, run module.RunInfo, params json.RawMessage, target module.Target) (module.Result, error) {
	var p struct {
		Name string `json:"name"`
	}
	if err := module.DecodeParams(params, &p); err != nil {
		return module.Result{}, err
	}
	greeting := "hello, " + p.Name
	res, err := target.Exec(ctx, module.Command{Argv: []string{"echo", greeting}})
	if err != nil {
		return module.Result{}, err
	}
	if res.ExitCode != 0 {
		return module.Result{}, &module.Error{Code: "greeting.failed", Message: string(res.Stderr)}
	}
	return module.Result{Output: map[string]any{"greeting": greeting}}, nil
}

func init() { module.Register(new(Greeted)) }

func ExampleRegister() {
	m, err := module.Lookup("example.greeting.greeted")
	if err != nil {
		fmt.Println(err)
		return
	}
	var v module.Values
	v.Set("nmae", "world")
	for _, e := range module.CheckParams(m, v) {
		fmt.Println(e.Problem, e.Message)
	}
	_, err = module.Lookup("example.greeting.waved")
	fmt.Println(err)
	// Output:
	// unknown_param unknown param "nmae" for example.greeting.greeted (did you mean "name"?)
	// missing_param missing required param "name" for example.greeting.greeted
	// module example.greeting.waved: unknown module
}
