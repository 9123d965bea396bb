package expr

import (
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
)

// recoverInvalid turns a panic inside cel-go, which scenarios written by
// anyone with run.create can reach, into an *Error with ErrInvalid located
// at the start of the expression in src, so that a hostile expression fails its validation
// or its step instead of the keeper's request or soulctl. It must be
// deferred directly by the function that calls into cel-go.
func recoverInvalid(src string, err *error) {
	if r := recover(); r != nil {
		start := len(src) - len(strings.TrimLeft(src, " \t\r\n"))
		*err = newError(ErrInvalid, src, start, fmt.Sprintf("CEL cannot handle this expression (%v); rewrite it", r))
	}
}

// checkMapKeys reports map literals whose keys CEL cannot use: the
// language allows int, uint, bool and string keys, but its checker lets
// others through, and cel-go panics planning or evaluating, for example,
// {b"0": 1}. The error is located at the first such key.
func checkMapKeys(checked *cel.Ast, src string) error {
	native := checked.NativeRep()
	bad := ast.MatchDescendants(ast.NavigateAST(native), func(e ast.NavigableExpr) bool {
		p, ok := e.Parent()
		if !ok || p.Kind() != ast.MapKind {
			return false
		}
		for _, en := range p.AsMap().Entries() {
			if en.Kind() == ast.MapEntryKind && en.AsMapEntry().Key().ID() == e.ID() {
				return !mapKeyKind(e.Type().Kind())
			}
		}
		return false
	})
	if len(bad) == 0 {
		return nil
	}
	k := bad[0]
	off := 0
	if r, ok := native.SourceInfo().GetOffsetRange(k.ID()); ok {
		off = runeOffset(src, 0, int(r.Start))
	}
	return newError(ErrCheck, src, off, fmt.Sprintf("a map key of type %s; map keys must be int, uint, bool or string", cel.FormatCELType(k.Type())))
}

// mapKeyKind reports whether a key of kind k may be used in a map: the
// kinds CEL allows, and those known only at run time.
func mapKeyKind(k types.Kind) bool {
	switch k {
	case types.IntKind, types.UintKind, types.BoolKind, types.StringKind,
		types.DynKind, types.AnyKind, types.TypeParamKind, types.ErrorKind:
		return true
	}
	return false
}
