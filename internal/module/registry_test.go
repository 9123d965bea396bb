package module

import (
	"errors"
	"strings"
	"testing"
)

func TestRegisterLookup(t *testing.T) {
	t.Parallel()
	a := &fake{info: Info{ID: "test.registry.b", Summary: "B.", Side: SideSoul}}
	b := &fake{info: Info{ID: "test.registry.a", Summary: "A.", Side: SideKeeper, Permission: "test.run"}}
	Register(a)
	Register(b)

	got, err := Lookup("test.registry.b")
	if err != nil || got != a {
		t.Fatalf("Lookup = %v, %v; want the registered module", got, err)
	}
	if _, err := Lookup("test.registry.zzz"); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Lookup of unknown id: %v; want ErrUnknown", err)
	}
	if _, err := Lookup("Bad"); !errors.Is(err, ErrInvalidID) {
		t.Fatalf("Lookup of invalid id: %v; want ErrInvalidID", err)
	}
	ids := IDs()
	ia, ib := -1, -1
	for i, id := range ids {
		switch id {
		case "test.registry.a":
			ia = i
		case "test.registry.b":
			ib = i
		}
		if i > 0 && ids[i-1] >= id {
			t.Fatalf("IDs not sorted: %v", ids)
		}
	}
	if ia < 0 || ib < 0 {
		t.Fatalf("IDs() = %v; want both test modules", ids)
	}
}

func TestRegisterPanics(t *testing.T) {
	t.Parallel()
	Register(&fake{info: Info{ID: "test.registry.dup", Summary: "X.", Side: SideSoul}})
	tests := []struct {
		name string
		m    Module
		want string
	}{
		{"nil", nil, "nil module"},
		{"empty id", &fake{info: Info{Summary: "X.", Side: SideSoul}}, "empty"},
		{"invalid id", &fake{info: Info{ID: "Bad.id", Summary: "X.", Side: SideSoul}}, "invalid module id"},
		{"duplicate", &fake{info: Info{ID: "test.registry.dup", Summary: "X.", Side: SideSoul}}, "twice"},
		{"bad side", &fake{info: Info{ID: "test.registry.side", Summary: "X.", Side: "moon"}}, "side"},
		{"no summary", &fake{info: Info{ID: "test.registry.sum", Side: SideSoul}}, "summary"},
		{"bad param type", &fake{info: Info{ID: "test.registry.pt", Summary: "X.", Side: SideSoul, Params: []Param{{Name: "a", Type: "float"}}}}, "invalid type"},
		{"duplicate param", &fake{info: Info{ID: "test.registry.pd", Summary: "X.", Side: SideSoul, Params: []Param{{Name: "a", Type: TypeString}, {Name: "a", Type: TypeString}}}}, "twice"},
		{"bad default", &fake{info: Info{ID: "test.registry.df", Summary: "X.", Side: SideSoul, Params: []Param{{Name: "a", Type: TypeInt, Default: "x"}}}}, "default"},
		{"required with default", &fake{info: Info{ID: "test.registry.rd", Summary: "X.", Side: SideSoul, Params: []Param{{Name: "a", Type: TypeInt, Required: true, Default: 1}}}}, "required"},
		{"keeper side without permission", &fake{info: Info{ID: "test.registry.kp", Summary: "X.", Side: SideKeeper}}, "must declare the permission"},
		{"malformed permission", &fake{info: Info{ID: "test.registry.mp", Summary: "X.", Side: SideSoul, Permission: "Cloud Create"}}, "dotted lowercase"},
		{"group of unknown", &fake{info: Info{ID: "test.registry.gu", Summary: "X.", Side: SideSoul, Params: []Param{{Name: "a", Type: TypeInt}}, Exclusive: []Group{{Params: []string{"a", "b"}}}}}, "undeclared"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				r := recover()
				if r == nil {
					t.Fatal("Register did not panic")
				}
				if msg, _ := r.(string); !strings.Contains(msg, tt.want) {
					t.Fatalf("panic %q; want it to mention %q", r, tt.want)
				}
			}()
			Register(tt.m)
		})
	}
}

func TestNotImplemented(t *testing.T) {
	t.Parallel()
	err := NotImplemented("core.x.y")
	if !errors.Is(err, ErrNotImplemented) || Code(err) != CodeNotImplemented {
		t.Fatalf("NotImplemented = %v (code %s)", err, Code(err))
	}
	if Code(errors.New("x")) != CodeFailed {
		t.Fatal("Code of a plain error should be module.failed")
	}
}
