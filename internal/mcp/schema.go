package mcp

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// schemaFor is the JSON schema of T as a tool's input or output: the SDK's
// inference from the Go type (objects admit no other properties), with
// json.RawMessage as any JSON value, and the descriptions and enums of the
// wire types' doc, jsonschema and enum tags, so that a model reads what
// the OpenAPI document says.
func schemaFor[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[json.RawMessage](): {},
	}})
	if err != nil {
		panic(fmt.Sprintf("mcp: schema of %T: %v", *new(T), err)) // a programmer error in a tool's types
	}
	annotate(reflect.TypeFor[T](), s, map[reflect.Type]bool{})
	noTrueSchemas(s)
	portable(s)
	return s
}

// portable rewrites every schema of s that lists several types (a
// nullable slice or pointer: ["null", "array"]; any JSON value: every
// type) into anyOf branches of one type each: clients that map tool
// schemas onto a single-type dialect (the OpenAPI subset of Gemini's
// function declarations) refuse or truncate type arrays. A branch keeps
// the keywords of the schema it came from (those of other types do not
// apply to it); the description stays on the schema.
func portable(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	for _, sub := range s.Properties {
		portable(sub)
	}
	for _, sub := range []*jsonschema.Schema{s.Items, s.AdditionalProperties} {
		portable(sub)
	}
	for _, list := range [][]*jsonschema.Schema{s.AnyOf, s.OneOf, s.AllOf, s.PrefixItems} {
		for _, sub := range list {
			portable(sub)
		}
	}
	if len(s.Types) == 0 {
		return
	}
	types := s.Types
	s.Types = nil
	var branches []*jsonschema.Schema
	for _, t := range types {
		if t == "null" {
			branches = append(branches, &jsonschema.Schema{Type: "null"})
			continue
		}
		b := *s
		b.Type, b.Title, b.Description, b.Default = t, "", "", nil
		branches = append(branches, &b)
	}
	*s = jsonschema.Schema{Title: s.Title, Description: s.Description, Default: s.Default, AnyOf: branches}
}

// anyJSON is what a schema that admits any JSON value says: the types
// listed, rather than {} — which encodes as the boolean schema true, which
// the MCP schema forbids where a tool's properties are (the TypeScript
// SDK, and so most clients, refuse a tool list holding one).
var anyJSON = []string{"object", "array", "string", "number", "boolean", "null"}

// noTrueSchemas rewrites every empty subschema of s (json.RawMessage,
// any, map[string]any values) into an object that lists the JSON types.
func noTrueSchemas(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	for _, sub := range s.Properties {
		anyIfEmpty(sub)
		noTrueSchemas(sub)
	}
	for _, sub := range []*jsonschema.Schema{s.Items, s.AdditionalProperties} {
		if sub != nil && !isFalse(sub) {
			anyIfEmpty(sub)
			noTrueSchemas(sub)
		}
	}
	for _, list := range [][]*jsonschema.Schema{s.AnyOf, s.OneOf, s.AllOf, s.PrefixItems} {
		for _, sub := range list {
			anyIfEmpty(sub)
			noTrueSchemas(sub)
		}
	}
}

// isFalse reports whether s is the schema that admits nothing (objects
// that admit no other properties).
func isFalse(s *jsonschema.Schema) bool {
	b, _ := json.Marshal(s)
	return string(b) == "false"
}

func anyIfEmpty(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if b, _ := json.Marshal(s); string(b) == "true" {
		s.Types = append([]string(nil), anyJSON...)
	} else if s.Type == "" && len(s.Types) == 0 && s.Ref == "" && len(s.AnyOf) == 0 && len(s.OneOf) == 0 && len(s.Enum) == 0 && s.Properties == nil && s.Items == nil {
		// A described value of any type ({"description": …}).
		s.Types = append([]string(nil), anyJSON...)
	}
}

// annotate copies the doc and enum tags of t's fields into s.
func annotate(t reflect.Type, s *jsonschema.Schema, seen map[reflect.Type]bool) {
	if s == nil {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if t != reflect.TypeFor[json.RawMessage]() {
			annotate(t.Elem(), s.Items, seen)
		}
		return
	case reflect.Map:
		annotate(t.Elem(), s.AdditionalProperties, seen)
		return
	case reflect.Struct:
	default:
		return
	}
	if seen[t] {
		return
	}
	seen[t] = true
	defer delete(seen, t)
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		ps := s.Properties[name]
		if ps == nil {
			continue
		}
		if doc := f.Tag.Get("doc"); doc != "" && ps.Description == "" {
			ps.Description = doc
		}
		if enum := f.Tag.Get("enum"); enum != "" && f.Type.Kind() == reflect.String {
			for _, v := range strings.Split(enum, ",") {
				ps.Enum = append(ps.Enum, v)
			}
		}
		annotate(f.Type, ps, seen)
	}
}
