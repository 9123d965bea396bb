package scenario

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/soulstack/soulstack/internal/expr"
)

// ErrInvalid is matched (errors.Is) by every *Error: the scenario or its
// input has problems and nothing may run.
var ErrInvalid = errors.New("invalid scenario")

// CodeInvalid is the API code of an invalid scenario; each Problem has its
// own, more precise code.
const CodeInvalid = "scenario.invalid"

// The codes of problems. They are stable: clients branch on them.
const (
	CodeTooLarge              = "scenario.too_large"
	CodeTooComplex            = "scenario.too_complex"
	CodeYAMLSyntax            = "scenario.yaml_syntax"
	CodeDuplicateKey          = "scenario.duplicate_key"
	CodeUnknownField          = "scenario.unknown_field"
	CodeMissingField          = "scenario.missing_field"
	CodeFieldType             = "scenario.field_type"
	CodeFieldValue            = "scenario.field_value"
	CodeFieldNotApplicable    = "scenario.field_not_applicable"
	CodeEmptySteps            = "scenario.empty_steps"
	CodeBadStepName           = "scenario.bad_step_name"
	CodeDuplicateStep         = "scenario.duplicate_step"
	CodeUnknownModule         = "scenario.unknown_module"
	CodeKeeperModuleNeedsKeep = "scenario.keeper_module_needs_on_keeper"
	CodeSoulModuleOnKeeper    = "scenario.soul_module_on_keeper"
	CodeBadTarget             = "scenario.bad_target"
	CodeUnknownParam          = "scenario.unknown_param"
	CodeMissingParam          = "scenario.missing_param"
	CodeParamType             = "scenario.param_type"
	CodeParamConflict         = "scenario.param_conflict"
	CodeParamInvalid          = "scenario.param_invalid"
	CodeSecretLiteral         = "scenario.secret_literal"
	CodeBadExpression         = "scenario.bad_expression"
	CodeExpressionType        = "scenario.expression_type"
	CodeUnknownStepRef        = "scenario.unknown_step_reference"
	CodeForwardStepRef        = "scenario.forward_step_reference"
	CodeUnknownStepField      = "scenario.unknown_step_field"
	CodeUnknownInputRef       = "scenario.unknown_input_reference"
	CodeRetriesNotIdempotent  = "scenario.retries_not_idempotent"
	CodeBadInput              = "scenario.bad_input"
	CodeInputUndeclared       = "scenario.input_undeclared"
	CodeInputMissing          = "scenario.input_missing"
	CodeInputType             = "scenario.input_type"

	// CodeExpressionInvalid is an expression the CEL implementation
	// failed on (expr.ErrInvalid); it keeps the expression layer's code.
	CodeExpressionInvalid = expr.CodeInvalid
)

// Pos is a position in a scenario file. Line and Column are 1-based;
// Column counts characters.
type Pos struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
}

func (p Pos) String() string {
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
}

// Problem is one thing wrong with a scenario or its input.
type Problem struct {
	Pos     Pos    `json:"pos"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// String formats the problem as "file:line:column: code: message".
func (p Problem) String() string {
	return fmt.Sprintf("%s: %s: %s", p.Pos, p.Code, p.Message)
}

// Error lists every problem found in a scenario, ordered by position.
type Error struct {
	Problems []Problem
}

func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Is reports whether target is ErrInvalid.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Code returns the API code of the error, scenario.invalid.
func (e *Error) Code() string { return CodeInvalid }

// problems collects problems.
type problems struct {
	list []Problem
}

func (ps *problems) add(pos Pos, code, format string, args ...any) {
	ps.list = append(ps.list, Problem{Pos: pos, Code: code, Message: fmt.Sprintf(format, args...)})
}

// err returns the collected problems, sorted by position and without
// duplicates, as an *Error; nil when there are none.
func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	list := append([]Problem(nil), ps.list...)
	sort.SliceStable(list, func(i, j int) bool {
		a, b := list[i].Pos, list[j].Pos
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	seen := map[Problem]bool{}
	out := list[:0]
	for _, p := range list {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return &Error{Problems: out}
}
