package tfprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
)

var objectAsOptions = basetypes.ObjectAsOptions{}

// jsonObject validates that a string attribute holds a JSON object.
type jsonObject struct{}

var _ validator.String = jsonObject{}

func (jsonObject) Description(context.Context) string { return "must be a JSON object" }

func (v jsonObject) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (jsonObject) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, err := decodeObject(req.ConfigValue.ValueString()); err != nil {
		// The value itself is never quoted: it may be sensitive.
		resp.Diagnostics.AddAttributeError(req.Path, "Not a JSON object",
			fmt.Sprintf("%s must be a JSON object, e.g. jsonencode({packages = [\"git\"]}): %v", req.Path, err))
	}
}

// decodeObject decodes a JSON object; the empty string is an empty object.
func decodeObject(s string) (map[string]any, error) {
	if s == "" {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("invalid JSON: more than one value")
	}
	m, ok := v.(map[string]any)
	if !ok || m == nil {
		return nil, fmt.Errorf("got %s, want an object", kindOf(v))
	}
	return m, nil
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}

// sameJSON reports whether two JSON texts hold equal values.
func sameJSON(a, b string) bool {
	var va, vb any
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return false
	}
	ca, _ := json.Marshal(va)
	cb, _ := json.Marshal(vb)
	return bytes.Equal(ca, cb)
}

// keepJSON returns the prior string when it holds the same JSON as the
// keeper's answer (so that formatting differences plan nothing), the
// answer otherwise; an empty or null answer keeps a null prior null.
func keepJSON(prior types.String, answer json.RawMessage) types.String {
	s := string(bytes.TrimSpace(answer))
	if s == "" || s == "null" || s == "{}" {
		if prior.IsNull() || sameJSON(prior.ValueString(), "{}") {
			return prior
		}
	}
	if !prior.IsNull() && !prior.IsUnknown() && sameJSON(prior.ValueString(), s) {
		return prior
	}
	if s == "" || s == "null" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

// optString is a keeper string as an optional attribute: "" is null
// unless the prior value was "" too.
func optString(prior types.String, v string) types.String {
	if v == "" && (prior.IsNull() || prior.IsUnknown()) {
		return types.StringNull()
	}
	return types.StringValue(v)
}
