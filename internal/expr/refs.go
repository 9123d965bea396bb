package expr

import (
	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
)

// scenarioVars are the variables whose uses findRefs reports.
var scenarioVars = map[string]bool{"input": true, "steps": true, "soul": true, "result": true}

// findRefs returns the uses of scenario variables in a checked expression.
func findRefs(checked *cel.Ast, src string) []Ref {
	native := checked.NativeRep()
	w := refWalker{info: native.SourceInfo(), src: src}
	w.walk(native.Expr(), nil)
	return w.refs
}

type refWalker struct {
	info *ast.SourceInfo
	src  string
	refs []Ref
}

// walk visits e; shadowed holds comprehension variables in scope, which
// hide scenario variables of the same name.
func (w *refWalker) walk(e ast.Expr, shadowed map[string]bool) {
	if e == nil {
		return
	}
	if root, path, optional, ok := chain(e); ok {
		if scenarioVars[root.AsIdent()] && !shadowed[root.AsIdent()] {
			if len(path) > 2 {
				path = path[:2]
			}
			w.refs = append(w.refs, Ref{Var: root.AsIdent(), Path: path, Offset: w.offset(root.ID()), Optional: optional})
		}
		return
	}
	switch e.Kind() {
	case ast.CallKind:
		c := e.AsCall()
		if c.IsMemberFunction() {
			w.walk(c.Target(), shadowed)
		}
		for _, a := range c.Args() {
			w.walk(a, shadowed)
		}
	case ast.SelectKind:
		w.walk(e.AsSelect().Operand(), shadowed)
	case ast.ListKind:
		for _, el := range e.AsList().Elements() {
			w.walk(el, shadowed)
		}
	case ast.MapKind:
		for _, en := range e.AsMap().Entries() {
			if en.Kind() == ast.MapEntryKind {
				w.walk(en.AsMapEntry().Key(), shadowed)
				w.walk(en.AsMapEntry().Value(), shadowed)
			}
		}
	case ast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			if f.Kind() == ast.StructFieldKind {
				w.walk(f.AsStructField().Value(), shadowed)
			}
		}
	case ast.ComprehensionKind:
		c := e.AsComprehension()
		w.walk(c.IterRange(), shadowed)
		inner := map[string]bool{c.IterVar(): true, c.AccuVar(): true}
		if c.HasIterVar2() {
			inner[c.IterVar2()] = true
		}
		for k := range shadowed {
			inner[k] = true
		}
		w.walk(c.AccuInit(), shadowed)
		w.walk(c.LoopCondition(), inner)
		w.walk(c.LoopStep(), inner)
		w.walk(c.Result(), inner)
	}
}

// chain reports whether e is an identifier followed by selections or
// indexes with constant string keys (steps.build["output"]), returning the
// identifier, the selected names, and whether the first name is selected
// optionally (has(), .?, [?]).
func chain(e ast.Expr) (ast.Expr, []string, bool, bool) {
	switch e.Kind() {
	case ast.IdentKind:
		return e, nil, false, true
	case ast.SelectKind:
		s := e.AsSelect()
		root, path, optional, ok := chain(s.Operand())
		if !ok {
			return nil, nil, false, false
		}
		if len(path) == 0 && s.IsTestOnly() {
			optional = true
		}
		return root, append(path, s.FieldName()), optional, true
	case ast.CallKind:
		c := e.AsCall()
		switch c.FunctionName() {
		case "_[_]", "_[?_]", "_?._":
		default:
			return nil, nil, false, false
		}
		args := c.Args()
		if len(args) != 2 || args[1].Kind() != ast.LiteralKind {
			return nil, nil, false, false
		}
		key, ok := args[1].AsLiteral().(types.String)
		if !ok {
			return nil, nil, false, false
		}
		root, path, optional, ok := chain(args[0])
		if !ok {
			return nil, nil, false, false
		}
		if len(path) == 0 && c.FunctionName() != "_[_]" {
			optional = true
		}
		return root, append(path, string(key)), optional, true
	}
	return nil, nil, false, false
}

// offset returns the byte offset in the source of the expression id.
func (w *refWalker) offset(id int64) int {
	r, ok := w.info.GetOffsetRange(id)
	if !ok {
		return 0
	}
	return runeOffset(w.src, 0, int(r.Start))
}
