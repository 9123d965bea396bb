package expr

import (
	"context"
	"strings"
)

// Segment is one piece of a string split by Split: literal text, or the
// source of one ${ } expression.
type Segment struct {
	// Text is the literal text, with $${ escapes resolved, or the
	// expression's source between "${" and the matching "}".
	Text string
	// Expr reports whether Text is an expression.
	Expr bool
	// Offset is the byte offset in the split string where Text starts
	// (for an expression, just after "${").
	Offset int
}

// Split cuts s into literal text and ${ } expressions, without compiling
// anything. Inside an expression, braces nest ("${ {"a": 1} }"), and
// braces within CEL string literals and // comments do not count. "$${"
// produces a literal "${". An unterminated or empty expression is an
// *Error with ErrSyntax and the offset of its "${".
func Split(s string) ([]Segment, error) {
	var segs []Segment
	var lit strings.Builder
	litStart := 0
	flush := func() {
		if lit.Len() > 0 {
			segs = append(segs, Segment{Text: lit.String(), Offset: litStart})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); {
		if s[i] != '$' {
			if lit.Len() == 0 {
				litStart = i
			}
			lit.WriteByte(s[i])
			i++
			continue
		}
		if strings.HasPrefix(s[i:], "$${") {
			if lit.Len() == 0 {
				litStart = i
			}
			lit.WriteString("${")
			i += 3
			continue
		}
		if !strings.HasPrefix(s[i:], "${") {
			if lit.Len() == 0 {
				litStart = i
			}
			lit.WriteByte('$')
			i++
			continue
		}
		start := i + 2
		end, msg := scanExpr(s, start)
		if msg != "" {
			return nil, newError(ErrSyntax, s, i, msg)
		}
		src := s[start:end]
		if strings.TrimSpace(src) == "" {
			return nil, newError(ErrSyntax, s, i, "empty expression ${ }")
		}
		flush()
		segs = append(segs, Segment{Text: src, Expr: true, Offset: start})
		i = end + 1
	}
	flush()
	return segs, nil
}

// scanExpr returns the index of the "}" that closes an expression whose
// source starts at s[start], or a message saying why there is none.
func scanExpr(s string, start int) (int, string) {
	depth := 0
	for j := start; j < len(s); {
		switch c := s[j]; c {
		case '{':
			depth++
			j++
		case '}':
			if depth == 0 {
				return j, ""
			}
			depth--
			j++
		case '"', '\'':
			end, ok := skipString(s, j)
			if !ok {
				return 0, "unterminated string literal inside ${ }"
			}
			j = end
		case '/':
			if strings.HasPrefix(s[j:], "//") {
				nl := strings.IndexByte(s[j:], '\n')
				if nl < 0 {
					return 0, "unterminated ${: a // comment runs to the end of the text, hiding the closing }"
				}
				j += nl + 1
				continue
			}
			j++
		default:
			j++
		}
	}
	return 0, "unterminated ${: missing the closing }"
}

// skipString returns the index just after the CEL string literal whose
// opening quote is s[q]. It knows triple quotes and the r (raw) prefix.
func skipString(s string, q int) (int, bool) {
	k := q
	for k > 0 && q-k < 2 && strings.IndexByte("rRbB", s[k-1]) >= 0 {
		k--
	}
	// A prefix that is the tail of an identifier (such as "bar") is not
	// a prefix at all.
	raw := strings.ContainsAny(s[k:q], "rR") && !(k > 0 && isIdentByte(s[k-1]))
	quote := s[q : q+1]
	if strings.HasPrefix(s[q:], strings.Repeat(quote, 3)) {
		quote = strings.Repeat(quote, 3)
	}
	for j := q + len(quote); j < len(s); {
		if !raw && s[j] == '\\' {
			j += 2
			continue
		}
		if strings.HasPrefix(s[j:], quote) {
			return j + len(quote), true
		}
		j++
	}
	return 0, false
}

func isIdentByte(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// Template is a compiled string that may hold ${ } expressions.
type Template struct {
	src  string
	segs []templateSeg
}

type templateSeg struct {
	text   string
	prog   *Program
	offset int
}

// Template compiles s, a string that may hold ${ } expressions, in scope.
// All the expressions' problems are returned, joined; each is an *Error
// whose Offset is relative to s.
func (e *Env) Template(s string, scope Scope) (*Template, error) {
	segs, err := Split(s)
	if err != nil {
		return nil, err
	}
	t := &Template{src: s}
	var errs []error
	for _, seg := range segs {
		if !seg.Expr {
			t.segs = append(t.segs, templateSeg{text: seg.Text, offset: seg.Offset})
			continue
		}
		p, err := e.Compile(seg.Text, scope)
		if err != nil {
			errs = append(errs, shift(err, s, seg.Offset))
			continue
		}
		t.segs = append(t.segs, templateSeg{prog: p, offset: seg.Offset})
	}
	if len(errs) > 0 {
		return nil, join(errs)
	}
	return t, nil
}

// Source returns the text the template was compiled from.
func (t *Template) Source() string { return t.src }

// IsLiteral reports whether the template holds no expression.
func (t *Template) IsLiteral() bool {
	for _, s := range t.segs {
		if s.prog != nil {
			return false
		}
	}
	return true
}

// Literal returns the text of a template with no expression, with $${
// escapes resolved.
func (t *Template) Literal() string {
	var b strings.Builder
	for _, s := range t.segs {
		b.WriteString(s.text)
	}
	return b.String()
}

// Whole returns the expression when the whole string is one ${ }
// expression (its result keeps its CEL type), or nil.
func (t *Template) Whole() *Program {
	if len(t.segs) == 1 && t.segs[0].prog != nil && t.segs[0].offset == 2 && len(t.src) == len(t.segs[0].prog.src)+3 {
		return t.segs[0].prog
	}
	return nil
}

// Kind returns the kind of the template's value: the expression's when
// the string is one whole expression, otherwise KindString.
func (t *Template) Kind() Kind {
	if p := t.Whole(); p != nil {
		return p.Kind()
	}
	return KindString
}

// TypeName returns the CEL type of the template's value, for messages.
func (t *Template) TypeName() string {
	if p := t.Whole(); p != nil {
		return p.TypeName()
	}
	return "string"
}

// Refs returns the references of every expression in the template, with
// offsets relative to the template's text.
func (t *Template) Refs() []Ref {
	var refs []Ref
	for _, s := range t.segs {
		if s.prog == nil {
			continue
		}
		for _, r := range s.prog.refs {
			r.Offset += s.offset
			refs = append(refs, r)
		}
	}
	return refs
}

// Eval evaluates the template. A whole-string expression returns its value
// as a JSON-compatible Go value of its own type (int64, []any,
// map[string]any…); otherwise the expressions' values are rendered as text
// (see Text) and the result is a string.
func (t *Template) Eval(ctx context.Context, vars Vars) (any, error) {
	if p := t.Whole(); p != nil {
		v, err := p.Eval(ctx, vars)
		if err != nil {
			return nil, shift(err, t.src, t.segs[0].offset)
		}
		return v, nil
	}
	var b strings.Builder
	for _, s := range t.segs {
		if s.prog == nil {
			b.WriteString(s.text)
			continue
		}
		v, err := s.prog.Eval(ctx, vars)
		if err != nil {
			return nil, shift(err, t.src, s.offset)
		}
		b.WriteString(Text(v))
	}
	return b.String(), nil
}

// String returns the template's source text.
func (t *Template) String() string { return t.src }
