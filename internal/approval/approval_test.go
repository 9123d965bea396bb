package approval_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/approval"
)

const policies = `
@id("big-create")
forbid (principal, action == Action::"core.cloud.created", resource)
when { context.params has count && context.params.count > 5 };

@id("prod-destroy")
forbid (principal, action == Action::"core.cloud.destroyed", resource == Project::"prod");

@id("wide-commands")
forbid (principal, action == Action::"core.command.ran", resource)
when { context.targets > 10 && context.role != "admin" };

@id("needs-size")
forbid (principal, action == Action::"core.cloud.resized", resource)
when { context.params.size == "xl" };
`

// TestCheck: each policy holds what it forbids and nothing else; a policy
// that cannot be evaluated holds the step (fails closed) and says why.
func TestCheck(t *testing.T) {
	p, err := approval.Parse("test.cedar", policies)
	if err != nil {
		t.Fatal(err)
	}
	params := func(s string) json.RawMessage { return json.RawMessage(s) }
	for _, c := range []struct {
		name string
		req  approval.Request
		want string // the policy that holds it; "" none
	}{
		{"create 6", approval.Request{Module: "core.cloud.created", Project: "dev", Params: params(`{"count": 6, "provider": "aws"}`)}, "big-create"},
		{"create 5", approval.Request{Module: "core.cloud.created", Project: "dev", Params: params(`{"count": 5}`)}, ""},
		{"create without count", approval.Request{Module: "core.cloud.created", Project: "dev", Params: params(`{}`)}, ""},
		{"destroy in prod", approval.Request{Module: "core.cloud.destroyed", Project: "prod"}, "prod-destroy"},
		{"destroy in dev", approval.Request{Module: "core.cloud.destroyed", Project: "dev"}, ""},
		{"commands on 11 as operator", approval.Request{Module: "core.command.ran", Project: "dev", Targets: 11, Role: "operator"}, "wide-commands"},
		{"commands on 11 as admin", approval.Request{Module: "core.command.ran", Project: "dev", Targets: 11, Role: "admin"}, ""},
		{"commands on 3", approval.Request{Module: "core.command.ran", Project: "dev", Targets: 3, Role: "operator"}, ""},
		{"resize without size: the policy errs", approval.Request{Module: "core.cloud.resized", Project: "dev", Params: params(`{"vm_ids": ["a"]}`)}, "needs-size"},
		{"resize to xl", approval.Request{Module: "core.cloud.resized", Project: "dev", Params: params(`{"size": "xl"}`)}, "needs-size"},
		{"resize to s", approval.Request{Module: "core.cloud.resized", Project: "dev", Params: params(`{"size": "s"}`)}, ""},
	} {
		h := p.Check(c.req)
		switch {
		case c.want == "" && h != nil:
			t.Errorf("%s: held by %v (%s)", c.name, h.Policies, h.Why)
		case c.want != "" && (h == nil || len(h.Policies) != 1 || h.Policies[0] != c.want):
			t.Errorf("%s: hold %+v; want %s", c.name, h, c.want)
		}
	}
	h := p.Check(approval.Request{Module: "core.cloud.resized", Project: "dev", Params: params(`{}`)})
	if h == nil || !strings.Contains(h.Why, "could not be evaluated") {
		t.Fatalf("a policy that errs: %+v", h)
	}
	if (approval.Policy{}).Check(approval.Request{Module: "core.cloud.destroyed", Project: "prod"}) != nil {
		t.Fatal("no policy holds nothing")
	}
}

// TestParse: permit rules, reused ids and bad syntax are refused with
// where they are.
func TestParse(t *testing.T) {
	for text, want := range map[string]string{
		`permit (principal, action, resource);`: "is a permit",
		"@id(\"a\") forbid (principal, action, resource);\n@id(\"a\") forbid (principal, action, resource);": "used twice",
		`forbid (principal, action, resource)`: "1:37",
	} {
		if _, err := approval.Parse("test.cedar", text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want %q", text, err, want)
		}
	}
	a, _ := approval.Parse("a", `@id("x") forbid (principal, action, resource);`)
	b, _ := approval.Parse("b", `@id("x") forbid (principal, action, resource);`)
	if _, err := approval.Join(a, b); err == nil {
		t.Fatal("joined two policies with one id")
	}
}
