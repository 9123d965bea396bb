package scenario

import (
	"context"
	"fmt"
	"strings"

	"github.com/soulstack/soulstack/internal/expr"
)

// value is a compiled YAML value: literal where no ${ } appears, with
// templates where strings hold expressions.
type value struct {
	n     *node
	lit   any            // the plain value, when dyn is false
	tpl   *expr.Template // a string with expressions
	items []*value       // list
	keys  []string       // map
	vals  []*value       // map
	dyn   bool           // the value, or a part of it, is known only at run time
	bad   bool           // an expression in it did not compile
}

// kind returns the kind of value v produces, as far as it is known before
// the run: the expression's kind for a whole-string expression.
func (v *value) kind() expr.Kind {
	if v.tpl != nil {
		return v.tpl.Kind()
	}
	switch v.n.kind {
	case kindNull:
		return expr.KindNull
	case kindBool:
		return expr.KindBool
	case kindInt:
		return expr.KindInt
	case kindFloat:
		return expr.KindDouble
	case kindString:
		return expr.KindString
	case kindList:
		return expr.KindList
	}
	return expr.KindMap
}

// typeName describes the value's type for messages.
func (v *value) typeName() string {
	if v.tpl != nil {
		return v.tpl.TypeName()
	}
	return v.n.kind.String()
}

// eval returns the value with every expression evaluated.
func (v *value) eval(ctx context.Context, vars expr.Vars) (any, error) {
	if !v.dyn {
		return v.lit, nil
	}
	switch {
	case v.tpl != nil:
		return v.tpl.Eval(ctx, vars)
	case v.n.kind == kindList:
		out := make([]any, len(v.items))
		for i, it := range v.items {
			x, err := it.eval(ctx, vars)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = x
		}
		return out, nil
	case v.n.kind == kindMap:
		out := make(map[string]any, len(v.keys))
		for i, k := range v.keys {
			x, err := v.vals[i].eval(ctx, vars)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = x
		}
		return out, nil
	}
	return v.lit, nil
}

// compileValue compiles n, reporting expression problems. where labels
// the value in messages.
func (c *checker) compileValue(n *node, scope expr.Scope, st *Step, where string) *value {
	v := &value{n: n}
	switch n.kind {
	case kindString:
		s := n.str()
		if !strings.Contains(s, "${") {
			v.lit = s
			return v
		}
		tpl, err := c.env.Template(s, scope)
		if err != nil {
			c.exprErrors(err, n, 0, st, where)
			v.lit, v.bad = s, true
			return v
		}
		c.checkRefs(tpl.Refs(), n, 0, st, where)
		if tpl.IsLiteral() {
			v.lit = tpl.Literal()
			return v
		}
		v.tpl, v.dyn = tpl, true
	case kindList:
		for i, it := range n.items {
			cv := c.compileValue(it, scope, st, fmt.Sprintf("%s[%d]", where, i))
			v.items = append(v.items, cv)
			v.dyn = v.dyn || cv.dyn
			v.bad = v.bad || cv.bad
		}
	case kindMap:
		for i, k := range n.keys {
			cv := c.compileValue(n.vals[i], scope, st, where+"."+k.str())
			v.keys = append(v.keys, k.str())
			v.vals = append(v.vals, cv)
			v.dyn = v.dyn || cv.dyn
			v.bad = v.bad || cv.bad
		}
	}
	if !v.dyn {
		v.lit = v.plainLiteral()
	}
	return v
}

// plainLiteral builds the plain value of a value without expressions,
// with $${ escapes resolved.
func (v *value) plainLiteral() any {
	switch v.n.kind {
	case kindString:
		return v.lit
	case kindList:
		out := make([]any, len(v.items))
		for i, it := range v.items {
			out[i] = it.lit
		}
		return out
	case kindMap:
		out := make(map[string]any, len(v.keys))
		for i, k := range v.keys {
			out[k] = v.vals[i].lit
		}
		return out
	}
	return v.n.value
}
