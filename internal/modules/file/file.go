// Package file declares core.file.present, which makes sure a file exists
// on souls with the given content, mode and ownership.
//
// Run is not implemented in this build: it returns an error with code
// module.not_implemented. The declaration is registered so that scenarios
// using the module validate and the catalog lists it.
package file

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/soulstack/soulstack/internal/module"
)

// PresentID is the ID of the Present state.
const PresentID module.ID = "core.file.present"

func init() { module.Register(new(Present)) }

// Present is the core.file.present state.
type Present struct{}

var (
	_ module.Module    = (*Present)(nil)
	_ module.Validator = (*Present)(nil)
)

// PresentParams are the params of core.file.present.
type PresentParams struct {
	Path    string  `json:"path"`
	Content *string `json:"content,omitempty"`
	Source  string  `json:"source,omitempty"`
	Mode    string  `json:"mode,omitempty"`
	Owner   string  `json:"owner,omitempty"`
	Group   string  `json:"group,omitempty"`
}

// Info returns the declaration of core.file.present.
func (*Present) Info() module.Info {
	return module.Info{
		ID:      PresentID,
		Summary: "Make sure a file exists on each target soul with the given content, mode and ownership.",
		Description: "The content comes from `content` (text in the scenario) or `source` (a file on the keeper). " +
			"Without either, the file is created empty when missing and its content is left alone when present.",
		Side:       module.SideSoul,
		Idempotent: true,
		NeedsRoot:  false,
		Params: []module.Param{
			{Name: "path", Type: module.TypeString, Required: true, Doc: "Absolute path of the file on the soul."},
			{Name: "content", Type: module.TypeString, Doc: "Exact content of the file."},
			{Name: "source", Type: module.TypeString, Doc: "Path of a file on the keeper whose bytes are copied."},
			{Name: "mode", Type: module.TypeString, Doc: "Permission bits as an octal string, such as \"0644\" (quote it in YAML)."},
			{Name: "owner", Type: module.TypeString, Doc: "User that owns the file."},
			{Name: "group", Type: module.TypeString, Doc: "Group that owns the file."},
		},
		Exclusive: []module.Group{{Params: []string{"content", "source"}}},
		Output: []module.Field{
			{Name: "path", Type: "string", Doc: "Path of the file."},
			{Name: "sha256", Type: "string", Doc: "SHA-256 of the file's content, hex."},
			{Name: "size", Type: "int", Doc: "Size in bytes."},
			{Name: "mode", Type: "string", Doc: "Permission bits, octal."},
			{Name: "owner", Type: "string", Doc: "Owning user."},
			{Name: "group", Type: "string", Doc: "Owning group."},
		},
		ChangesWhen:   "The file was created, or its bytes, mode, owner or group differed and were set.",
		UnchangedWhen: "The file already had the requested bytes, mode, owner and group.",
		Example: `- name: motd
  on: web-1.local.test
  module: core.file.present
  params:
    path: /etc/motd
    content: "Managed by Soul Stack\n"
    mode: "0644"`,
		Notes: []string{
			"Changing owner or group, or writing where the connecting user may not, needs root (sudo is used when the connecting user is not root).",
			"The file is written to a temporary name beside it and renamed, so readers never see half a file.",
		},
	}
}

// ValidateParams checks that path is absolute and mode is an octal
// permission string.
func (*Present) ValidateParams(v module.Values) error {
	var errs []error
	if p, ok := v.Get("path"); ok {
		if s, _ := p.(string); !strings.HasPrefix(s, "/") {
			errs = append(errs, module.Invalid("path", "param \"path\" must be an absolute path, got %q", s))
		}
	}
	if m, ok := v.Get("mode"); ok {
		s, _ := m.(string)
		if n, err := strconv.ParseUint(s, 8, 32); err != nil || n > 0o7777 {
			errs = append(errs, module.Invalid("mode", "param \"mode\" must be octal permission bits such as \"0644\", got %q", s))
		}
	}
	return errors.Join(errs...)
}

// Run is not implemented in this build; it returns a module.not_implemented
// error.
func (*Present) Run(context.Context, json.RawMessage, module.Target) (module.Result, error) {
	return module.Result{}, module.NotImplemented(PresentID)
}
