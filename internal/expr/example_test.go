package expr_test

import (
	"context"
	"fmt"

	"github.com/soulstack/soulstack/internal/expr"
)

func ExampleEnv_Template() {
	env, err := expr.NewEnv()
	if err != nil {
		fmt.Println(err)
		return
	}
	vars := expr.Vars{Input: map[string]any{"count": int64(2), "packages": []any{"git", "curl"}}}
	for _, s := range []string{
		"${ input.count + 1 }",        // the whole string: the value keeps its type
		"install ${ input.packages }", // inside a longer string: text
		"$${ input.count } is not interpolated",
	} {
		tpl, err := env.Template(s, 0)
		if err != nil {
			fmt.Println(err)
			continue
		}
		v, err := tpl.Eval(context.Background(), vars)
		fmt.Printf("%#v %v\n", v, err)
	}
	_, err = env.Template("${ input.count + }", 0)
	fmt.Println(err)
	// Output:
	// 3 <nil>
	// "install [\"git\",\"curl\"]" <nil>
	// "${ input.count } is not interpolated" <nil>
	// column 18: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}
}
