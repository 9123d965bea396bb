package module

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestTypeCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		typ  Type
		elem Type
		v    any
		ok   bool
	}{
		{"string", TypeString, "", "x", true},
		{"string from int", TypeString, "", int64(1), false},
		{"int", TypeInt, "", int64(3), true},
		{"int from uint64", TypeInt, "", uint64(3), true},
		{"int from integral float", TypeInt, "", 3.0, true},
		{"int from fraction", TypeInt, "", 3.5, false},
		{"int from json number", TypeInt, "", json.Number("7"), true},
		{"bool", TypeBool, "", true, true},
		{"bool from string", TypeBool, "", "true", false},
		{"list", TypeList, "", []any{1, "a"}, true},
		{"list of string", TypeList, TypeString, []any{"a", "b"}, true},
		{"list of string with int", TypeList, TypeString, []any{"a", int64(2)}, false},
		{"map of string", TypeMap, TypeString, map[string]any{"A": "1"}, true},
		{"map of string with bool", TypeMap, TypeString, map[string]any{"A": true}, false},
		{"object", TypeObject, "", map[string]any{"a": []any{}}, true},
		{"object from list", TypeObject, "", []any{}, false},
		{"any", TypeAny, "", nil, true},
		{"null string", TypeString, "", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.typ.Check(tt.v, tt.elem)
			if (err == nil) != tt.ok {
				t.Fatalf("%s.Check(%#v) = %v; want ok=%v", tt.typ, tt.v, err, tt.ok)
			}
		})
	}
}

func TestCheckParams(t *testing.T) {
	t.Parallel()
	cloud := &validating{fake: fake{info: cloudInfo()}}
	cloud.validate = func(v Values) error {
		if n, ok := v.Get("count"); ok && n.(int64) < 1 {
			return Invalid("count", "count must be at least 1")
		}
		return nil
	}
	exactly := &fake{info: Info{ID: "test.cmd.ran", Summary: "X.", Side: SideSoul,
		Params:    []Param{{Name: "cmd", Type: TypeString}, {Name: "argv", Type: TypeList}},
		Exclusive: []Group{{Params: []string{"cmd", "argv"}, Required: true}}}}

	type set struct {
		known   map[string]any
		dynamic []string
	}
	tests := []struct {
		name string
		m    Module
		in   set
		want []string // "problem:param"
	}{
		{"ok", cloud, set{known: map[string]any{"provider": "local", "count": int64(2)}}, nil},
		{"dynamic satisfies required", cloud, set{dynamic: []string{"provider"}}, nil},
		{"missing", cloud, set{}, []string{"missing_param:"}},
		{"null is absent", cloud, set{known: map[string]any{"provider": nil}}, []string{"missing_param:"}},
		{"unknown", cloud, set{known: map[string]any{"provider": "x", "provder": 1}}, []string{"unknown_param:provder"}},
		{"type", cloud, set{known: map[string]any{"provider": "x", "count": "two"}}, []string{"param_type:count"}},
		{"enum", cloud, set{known: map[string]any{"provider": "x", "mode": "warp"}}, []string{"param_invalid:mode"}},
		{"conflict", cloud, set{known: map[string]any{"provider": "x", "userdata": "#!", "generate_userdata": true}}, []string{"param_conflict:generate_userdata"}},
		{"conflict with dynamic", cloud, set{known: map[string]any{"provider": "x", "userdata": "#!"}, dynamic: []string{"generate_userdata"}}, []string{"param_conflict:generate_userdata"}},
		{"validator", cloud, set{known: map[string]any{"provider": "x", "count": int64(0)}}, []string{"param_invalid:count"}},
		{"required group none", exactly, set{}, []string{"missing_param:"}},
		{"required group one", exactly, set{known: map[string]any{"argv": []any{"true"}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var v Values
			for k, x := range tt.in.known {
				v.Set(k, x)
			}
			for _, k := range tt.in.dynamic {
				v.SetDynamic(k)
			}
			var got []string
			for _, e := range CheckParams(tt.m, v) {
				got = append(got, string(e.Problem)+":"+e.Param)
				if !errors.Is(e, ErrBadParams) || e.Error() == "" {
					t.Errorf("param error %v does not match ErrBadParams or has no message", e)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("CheckParams = %v; want %v", got, tt.want)
			}
		})
	}
}

func TestUnknownParamSuggestion(t *testing.T) {
	t.Parallel()
	var v Values
	v.Set("provider", "x")
	v.Set("cuont", int64(1))
	errs := CheckParams(&fake{info: cloudInfo()}, v)
	if len(errs) != 1 || !strings.Contains(errs[0].Message, `did you mean "count"`) {
		t.Fatalf("errors = %v; want a suggestion of count", errs)
	}
}

func TestApplyDefaults(t *testing.T) {
	t.Parallel()
	in := map[string]any{"provider": "x", "userdata": nil}
	got := ApplyDefaults(cloudInfo(), in)
	want := map[string]any{"provider": "x", "count": 1, "tags": []any{"a|b"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ApplyDefaults = %v; want %v", got, want)
	}
	if _, ok := in["count"]; ok {
		t.Fatal("ApplyDefaults changed its input")
	}
}

func TestDecodeParams(t *testing.T) {
	t.Parallel()
	var dst struct {
		Cmd string `json:"cmd"`
	}
	if err := DecodeParams(json.RawMessage(`{"cmd":"true"}`), &dst); err != nil || dst.Cmd != "true" {
		t.Fatalf("DecodeParams = %v, %+v", err, dst)
	}
	if err := DecodeParams(json.RawMessage(`{"cmd":"true","x":1}`), &dst); err == nil {
		t.Fatal("unknown field accepted")
	}
	if err := DecodeParams(json.RawMessage(`{"cmd":"true"} {}`), &dst); err == nil {
		t.Fatal("trailing data accepted")
	}
}

func TestSuggest(t *testing.T) {
	t.Parallel()
	cands := []string{"steps", "inputs", "name"}
	for in, want := range map[string]string{"stpes": "steps", "input": "inputs", "nmae": "name", "zzz": "", "x": ""} {
		if got := Suggest(in, cands); got != want {
			t.Errorf("Suggest(%q) = %q; want %q", in, got, want)
		}
	}
}
