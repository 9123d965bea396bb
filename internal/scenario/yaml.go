package scenario

import (
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/scanner"
	"github.com/goccy/go-yaml/token"
)

// Limits that keep hostile YAML from exhausting the keeper.
const (
	// MaxSize is the largest scenario accepted, in bytes; larger ones are
	// rejected before parsing.
	MaxSize = 1 << 20
	// MaxNodes bounds the values a scenario expands to, counting every
	// use of a YAML alias in full (the "billion laughs" guard).
	MaxNodes = 100_000
	// MaxDepth bounds the nesting of lists and maps.
	MaxDepth = 32
	// MaxMapKeys bounds the keys of one block mapping.
	MaxMapKeys = 1000
)

// maxBlockColumn bounds the column of block structure ("-", "key:"), which
// bounds block nesting before the parser sees it.
const maxBlockColumn = 4 * MaxDepth

// maxTokens bounds the YAML tokens of a scenario, checked before parsing:
// a document within MaxNodes has far fewer.
const maxTokens = 4 * MaxNodes

type nodeKind uint8

const (
	kindNull nodeKind = iota
	kindBool
	kindInt
	kindFloat
	kindString
	kindList
	kindMap
)

// kindNames names node kinds for messages.
var kindNames = [...]string{"null", "bool", "int", "number", "string", "list", "map"}

func (k nodeKind) String() string { return kindNames[k] }

// a returns the kind's name with an indefinite article: "an int".
func (k nodeKind) a() string {
	if k == kindInt {
		return "an int"
	}
	return "a " + kindNames[k]
}

// scalarStyle says how a string was written, for locating characters
// inside it.
type scalarStyle uint8

const (
	stylePlain scalarStyle = iota
	styleSingle
	styleDouble
	styleLiteral
	styleFolded
)

// node is a YAML value with its position: what the parser keeps of the
// document.
type node struct {
	kind  nodeKind
	pos   Pos
	value any // scalars: nil, bool, int64 or uint64, float64, string
	style scalarStyle
	items []*node // list
	keys  []*node // map keys, strings
	vals  []*node // map values
	size  int     // values in the subtree, aliases expanded
}

// get returns the key and value nodes of key in a map node.
func (n *node) get(key string) (*node, *node) {
	for i, k := range n.keys {
		if k.value == key {
			return k, n.vals[i]
		}
	}
	return nil, nil
}

// str returns the string of a string node.
func (n *node) str() string {
	s, _ := n.value.(string)
	return s
}

// plain converts n to a JSON-compatible Go value.
func (n *node) plain() any {
	switch n.kind {
	case kindList:
		out := make([]any, len(n.items))
		for i, it := range n.items {
			out[i] = it.plain()
		}
		return out
	case kindMap:
		out := make(map[string]any, len(n.keys))
		for i, k := range n.keys {
			out[k.str()] = n.vals[i].plain()
		}
		return out
	}
	return n.value
}

// source is the text of a scenario file, for positions.
type source struct {
	file  string
	text  string
	lines []int // byte offset of each line's start
}

func newSource(file string, src []byte) *source {
	s := &source{file: file, text: string(src), lines: []int{0}}
	for i, c := range src {
		if c == '\n' {
			s.lines = append(s.lines, i+1)
		}
	}
	return s
}

// line returns the text of 1-based line n, without its newline.
func (s *source) line(n int) string {
	if n < 1 || n > len(s.lines) {
		return ""
	}
	start := s.lines[n-1]
	end := len(s.text)
	if n < len(s.lines) {
		end = s.lines[n] - 1
	}
	return strings.TrimSuffix(s.text[start:end], "\r")
}

func (s *source) pos(tk *token.Token) Pos {
	if tk == nil || tk.Position == nil {
		return Pos{File: s.file, Line: 1, Column: 1}
	}
	return Pos{File: s.file, Line: max(tk.Position.Line, 1), Column: max(tk.Position.Column, 1)}
}

// at returns the position of byte offset off of the string in n: exact
// for single-line plain and quoted scalars written without escapes and for
// literal blocks, the start of the scalar otherwise.
func (s *source) at(n *node, off int) Pos {
	v, ok := n.value.(string)
	if !ok || off < 0 || off > len(v) {
		return n.pos
	}
	switch n.style {
	case stylePlain, styleSingle, styleDouble:
		if strings.Contains(v, "\n") {
			return n.pos
		}
		line := s.line(n.pos.Line)
		start := runeIndex(line, n.pos.Column-1)
		quote := 0
		if n.style != stylePlain {
			quote = 1
		}
		if start < 0 || start+quote > len(line) || !strings.HasPrefix(line[start+quote:], v[:off]) {
			return n.pos
		}
		return Pos{File: s.file, Line: n.pos.Line, Column: n.pos.Column + quote + utf8.RuneCountInString(v[:off])}
	case styleLiteral:
		lineStart := strings.LastIndexByte(v[:off], '\n') + 1
		lineEnd := strings.IndexByte(v[off:], '\n')
		if lineEnd < 0 {
			lineEnd = len(v)
		} else {
			lineEnd += off
		}
		lineNo := n.pos.Line + 1 + strings.Count(v[:off], "\n")
		text := s.line(lineNo)
		content := v[lineStart:lineEnd]
		if !strings.HasSuffix(text, content) {
			return n.pos
		}
		indent := text[:len(text)-len(content)]
		return Pos{File: s.file, Line: lineNo, Column: utf8.RuneCountInString(indent) + 1 + utf8.RuneCountInString(v[lineStart:off])}
	}
	return n.pos
}

// runeIndex returns the byte index of the n-th character of s, or -1.
func runeIndex(s string, n int) int {
	i := 0
	for ; n > 0; n-- {
		if i >= len(s) {
			return -1
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return i
}

// fatal is a problem that stops parsing.
type fatal struct{ p Problem }

// parseYAML parses src into a node tree. A problem that stops parsing is
// returned as *fatal; others are added to ps.
func parseYAML(src *source, ps *problems) (root *node, err error) {
	if len(src.text) > MaxSize {
		return nil, &fatal{Problem{Pos{src.file, 1, 1}, CodeTooLarge, fmt.Sprintf("the scenario is %d bytes; at most %d (1 MiB) are accepted", len(src.text), MaxSize)}}
	}
	tokens, f := tokenize(src)
	if f != nil {
		return nil, f
	}
	if f := prescan(src, tokens); f != nil {
		return nil, f
	}
	defer func() {
		// The parser is third-party code fed hostile input: a panic in it
		// is a syntax problem of this scenario, not a crash of the keeper.
		if r := recover(); r != nil {
			root, err = nil, &fatal{Problem{Pos{src.file, 1, 1}, CodeYAMLSyntax, fmt.Sprintf("the YAML parser failed: %v", r)}}
		}
	}()
	file, perr := parser.Parse(tokens, 0)
	if perr != nil {
		return nil, &fatal{yamlProblem(src, perr)}
	}
	var body ast.Node
	for _, doc := range file.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if _, ok := doc.Body.(*ast.CommentGroupNode); ok {
			continue
		}
		if body != nil {
			return nil, &fatal{Problem{src.pos(doc.Body.GetToken()), CodeYAMLSyntax, "a scenario is one YAML document; found a second one"}}
		}
		body = doc.Body
	}
	b := &builder{src: src, ps: ps, anchors: map[string]*node{}}
	if body == nil {
		return &node{kind: kindNull, pos: Pos{src.file, 1, 1}}, nil
	}
	root, err = b.build(body, 0)
	if err != nil {
		return nil, err
	}
	return root, nil
}

func (f *fatal) Error() string { return f.p.String() }

// tokenize lexes the scenario, stopping at maxTokens.
func tokenize(src *source) (token.Tokens, *fatal) {
	var s scanner.Scanner
	s.Init(src.text)
	var tokens token.Tokens
	for {
		sub, err := s.Scan()
		if err == io.EOF {
			return tokens, nil
		}
		tokens.Add(sub...)
		if len(tokens) > maxTokens {
			return nil, &fatal{Problem{Pos{src.file, 1, 1}, CodeTooComplex, fmt.Sprintf("the scenario has more than %d YAML tokens", maxTokens)}}
		}
	}
}

// prescan rejects token streams the parser would take too long on: deep
// nesting and block mappings with very many keys (the parser is quadratic
// in both).
func prescan(src *source, tokens token.Tokens) *fatal {
	type level struct{ col, keys int }
	var stack []level
	flow := 0
	for i, tk := range tokens {
		switch tk.Type {
		case token.SequenceStartType, token.MappingStartType:
			flow++
			if flow > MaxDepth {
				return &fatal{Problem{src.pos(tk), CodeTooComplex, fmt.Sprintf("lists and maps nest deeper than %d levels", MaxDepth)}}
			}
		case token.SequenceEndType, token.MappingEndType:
			flow = max(flow-1, 0)
		case token.SequenceEntryType:
			if flow == 0 && tk.Position != nil && tk.Position.Column > maxBlockColumn {
				return &fatal{Problem{src.pos(tk), CodeTooComplex, fmt.Sprintf("lists and maps nest deeper than %d levels", MaxDepth)}}
			}
		case token.MappingValueType:
			if flow > 0 || i == 0 {
				continue
			}
			key := tokens[i-1]
			if key.Position == nil {
				continue
			}
			col := key.Position.Column
			if col > maxBlockColumn {
				return &fatal{Problem{src.pos(key), CodeTooComplex, fmt.Sprintf("lists and maps nest deeper than %d levels", MaxDepth)}}
			}
			for len(stack) > 0 && stack[len(stack)-1].col > col {
				stack = stack[:len(stack)-1]
			}
			if len(stack) == 0 || stack[len(stack)-1].col < col {
				stack = append(stack, level{col: col})
			}
			top := &stack[len(stack)-1]
			top.keys++
			if top.keys > MaxMapKeys {
				return &fatal{Problem{src.pos(key), CodeTooComplex, fmt.Sprintf("a mapping has more than %d keys", MaxMapKeys)}}
			}
		}
	}
	return nil
}

// yamlProblem turns a parser error into a problem.
func yamlProblem(src *source, err error) Problem {
	type yamlError interface {
		GetToken() *token.Token
		GetMessage() string
	}
	if ye, ok := err.(yamlError); ok {
		code := CodeYAMLSyntax
		if strings.Contains(ye.GetMessage(), "already defined") {
			code = CodeDuplicateKey
		}
		return Problem{src.pos(ye.GetToken()), code, ye.GetMessage()}
	}
	return Problem{Pos{src.file, 1, 1}, CodeYAMLSyntax, err.Error()}
}

// builder converts the parser's AST into nodes, resolving anchors, aliases,
// merge keys and tags.
type builder struct {
	src     *source
	ps      *problems
	anchors map[string]*node
	total   int
}

func (b *builder) count(n *node) error {
	b.total += n.size
	if b.total > MaxNodes {
		return &fatal{Problem{n.pos, CodeTooComplex, fmt.Sprintf("the scenario holds more than %d values (each use of a YAML alias counts in full)", MaxNodes)}}
	}
	return nil
}

func (b *builder) build(an ast.Node, depth int) (*node, error) {
	if depth > MaxDepth {
		return nil, &fatal{Problem{b.src.pos(an.GetToken()), CodeTooComplex, fmt.Sprintf("lists and maps nest deeper than %d levels", MaxDepth)}}
	}
	n, err := b.build1(an, depth)
	if err != nil {
		return nil, err
	}
	if _, isAlias := an.(*ast.AliasNode); !isAlias {
		if err := b.count(&node{size: 1, pos: n.pos}); err != nil {
			return nil, err
		}
	}
	return n, nil
}

func (b *builder) build1(an ast.Node, depth int) (*node, error) {
	pos := b.src.pos(an.GetToken())
	scalar := func(k nodeKind, v any) (*node, error) {
		return &node{kind: k, pos: pos, value: v, size: 1}, nil
	}
	switch x := an.(type) {
	case *ast.NullNode:
		return scalar(kindNull, nil)
	case *ast.BoolNode:
		return scalar(kindBool, x.Value)
	case *ast.IntegerNode:
		return integer(x, pos), nil
	case *ast.FloatNode:
		if math.IsInf(x.Value, 0) || math.IsNaN(x.Value) {
			b.ps.add(pos, CodeFieldValue, "infinite and NaN numbers are not supported")
			return scalar(kindNull, nil)
		}
		return scalar(kindFloat, x.Value)
	case *ast.InfinityNode, *ast.NanNode:
		b.ps.add(pos, CodeFieldValue, "infinite and NaN numbers are not supported")
		return scalar(kindNull, nil)
	case *ast.StringNode:
		n, _ := scalar(kindString, x.Value)
		switch x.GetToken().Type {
		case token.SingleQuoteType:
			n.style = styleSingle
		case token.DoubleQuoteType:
			n.style = styleDouble
		}
		return n, nil
	case *ast.LiteralNode:
		n, _ := scalar(kindString, x.Value.Value)
		n.style = styleFolded
		if strings.HasPrefix(x.Start.Value, "|") {
			n.style = styleLiteral
		}
		return n, nil
	case *ast.MappingNode:
		return b.mapping(pos, x.Values, depth)
	case *ast.MappingValueNode:
		return b.mapping(pos, []*ast.MappingValueNode{x}, depth)
	case *ast.SequenceNode:
		return b.sequence(x, pos, depth)
	case *ast.AnchorNode:
		return b.anchor(x, depth)
	case *ast.AliasNode:
		return b.alias(x, pos)
	case *ast.TagNode:
		return b.tagged(x, pos, depth)
	case *ast.CommentGroupNode, *ast.CommentNode:
		return scalar(kindNull, nil)
	case nil:
		return scalar(kindNull, nil)
	}
	b.ps.add(pos, CodeYAMLSyntax, "unsupported YAML %s", an.Type())
	return scalar(kindNull, nil)
}

// integer is an integer scalar: an int64, a uint64 past int64's range, or
// the literal text of one past uint64's.
func integer(x *ast.IntegerNode, pos Pos) *node {
	n := &node{kind: kindInt, pos: pos, size: 1}
	switch v := x.Value.(type) {
	case int64:
		n.value = v
	case uint64:
		if v <= math.MaxInt64 {
			n.value = int64(v)
		} else {
			n.value = v
		}
	default:
		n.kind, n.value = kindString, x.GetToken().Value
	}
	return n
}

// sequence builds a list.
func (b *builder) sequence(x *ast.SequenceNode, pos Pos, depth int) (*node, error) {
	n := &node{kind: kindList, pos: pos, size: 1}
	for _, v := range x.Values {
		it, err := b.build(v, depth+1)
		if err != nil {
			return nil, err
		}
		n.items = append(n.items, it)
		n.size += it.size
	}
	return n, nil
}

// anchor builds an anchored node and remembers it by name.
func (b *builder) anchor(x *ast.AnchorNode, depth int) (*node, error) {
	n, err := b.build1(x.Value, depth)
	if err != nil {
		return nil, err
	}
	if x.Name != nil {
		b.anchors[x.Name.GetToken().Value] = n
	}
	return n, nil
}

// alias is the node an earlier anchor named, counted again toward the
// document's size (an alias bomb stops there).
func (b *builder) alias(x *ast.AliasNode, pos Pos) (*node, error) {
	name := ""
	if x.Value != nil {
		name = x.Value.GetToken().Value
	}
	n, ok := b.anchors[name]
	if !ok {
		b.ps.add(pos, CodeYAMLSyntax, "alias *%s refers to no earlier anchor &%s", name, name)
		return &node{kind: kindNull, pos: pos, size: 1}, nil
	}
	if err := b.count(n); err != nil {
		return nil, err
	}
	return n, nil
}

// tagged handles the standard tags; others are problems.
func (b *builder) tagged(x *ast.TagNode, pos Pos, depth int) (*node, error) {
	tag := x.Start.Value
	switch tag {
	case "!!str":
		if x.Value == nil {
			return &node{kind: kindString, pos: pos, value: "", size: 1}, nil
		}
		if sc, ok := x.Value.(ast.ScalarNode); ok {
			n, err := b.build1(x.Value, depth)
			if err != nil {
				return nil, err
			}
			if n.kind != kindString {
				n = &node{kind: kindString, pos: n.pos, value: sc.GetToken().Value, size: 1}
			}
			return n, nil
		}
	case "!!int", "!!float", "!!bool", "!!null", "!!map", "!!seq", "!!binary", "!!timestamp":
		if x.Value == nil {
			return &node{kind: kindNull, pos: pos, size: 1}, nil
		}
		return b.build1(x.Value, depth)
	}
	b.ps.add(pos, CodeYAMLSyntax, "unsupported YAML tag %s", tag)
	return &node{kind: kindNull, pos: pos, size: 1}, nil
}

// mapping builds a map node. Explicit keys win over merged ones (<<).
func (b *builder) mapping(pos Pos, pairs []*ast.MappingValueNode, depth int) (*node, error) {
	n := &node{kind: kindMap, pos: pos, size: 1}
	if len(pairs) > 0 && pairs[0].Key != nil {
		n.pos = b.src.pos(pairs[0].Key.GetToken())
	}
	var merges []*node
	for _, pair := range pairs {
		if pair.Key == nil {
			continue
		}
		if pair.Key.IsMergeKey() {
			m, err := b.build(pair.Value, depth+1)
			if err != nil {
				return nil, err
			}
			merges = append(merges, m)
			continue
		}
		k, ok := b.key(pair.Key)
		if !ok {
			continue
		}
		v, err := b.build(pair.Value, depth+1)
		if err != nil {
			return nil, err
		}
		n.keys = append(n.keys, k)
		n.vals = append(n.vals, v)
		n.size += v.size
	}
	for _, m := range merges {
		sources := []*node{m}
		if m.kind == kindList {
			sources = m.items
		}
		for _, src := range sources {
			if src.kind != kindMap {
				b.ps.add(m.pos, CodeFieldType, "a merge key (<<) takes a map or a list of maps, not %s", src.kind.a())
				continue
			}
			for i, k := range src.keys {
				if kk, _ := n.get(k.str()); kk != nil {
					continue
				}
				n.keys = append(n.keys, k)
				n.vals = append(n.vals, src.vals[i])
				n.size += src.vals[i].size
			}
		}
	}
	return n, nil
}

// key returns the node of a mapping key: scalars become their text.
func (b *builder) key(k ast.MapKeyNode) (*node, bool) {
	var an ast.Node = k
	if mk, ok := k.(*ast.MappingKeyNode); ok {
		an = mk.Value
	}
	if tn, ok := an.(*ast.TagNode); ok {
		an = tn.Value
	}
	if an == nil {
		return nil, false
	}
	pos := b.src.pos(an.GetToken())
	switch x := an.(type) {
	case *ast.StringNode:
		return &node{kind: kindString, pos: pos, value: x.Value, size: 1}, true
	case ast.ScalarNode:
		return &node{kind: kindString, pos: pos, value: x.GetToken().Value, size: 1}, true
	}
	b.ps.add(pos, CodeFieldType, "a mapping key must be a plain value, not a %s", an.Type())
	return nil, false
}
