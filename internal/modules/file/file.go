// Package file declares core.file.present, which makes sure a file exists
// on souls with the given content, mode and ownership.
package file

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/probe"
)

// PresentID is the ID of the Present state.
const PresentID module.ID = "core.file.present"

func init() { module.Register(new(Present)) }

// Present is the core.file.present state. Provisioned with Services it
// remembers which files runs wrote from secrets; unprovisioned (tests,
// tools) it knows only the secrets of the step at hand.
type Present struct {
	marks SecretFiles
}

// SecretFiles remembers the files runs wrote from secret content, by soul
// and path (never the content), so that no later check shows what they
// hold: the keeper's store.
type SecretFiles interface {
	SecretFileMark(ctx context.Context, sid, path, runID string) error
	SecretFileClear(ctx context.Context, sid, path string) error
	SecretFileMarked(ctx context.Context, sid, path string) (string, error)
}

// Services are what the keeper gives core.file.present.
type Services struct {
	SecretFiles SecretFiles
}

// Provision returns the state with the keeper's services.
func (*Present) Provision(s Services) (module.Module, error) {
	return &Present{marks: s.SecretFiles}, nil
}

var (
	_ module.Module                = (*Present)(nil)
	_ module.Validator             = (*Present)(nil)
	_ module.Checker               = (*Present)(nil)
	_ module.Provisioner[Services] = (*Present)(nil)
)

// PresentParams are the params of core.file.present.
type PresentParams struct {
	Path    string  `json:"path"`
	Content *string `json:"content,omitempty"`
	Source  string  `json:"source,omitempty"`
	Mode    string  `json:"mode,omitempty"`
	Owner   string  `json:"owner,omitempty"`
	Group   string  `json:"group,omitempty"`
	// Diff false shows no diff of the content in check runs.
	Diff *bool `json:"diff,omitempty"`
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
			{Name: "diff", Type: module.TypeBool, Default: true, Doc: "Whether a check run shows the content's diff; false for a file that holds secrets the scenario does not declare."},
		},
		Exclusive: []module.Group{{Params: []string{"content", "source"}}},
		Output: []module.Field{
			{Name: "path", Type: "string", Doc: "Path of the file."},
			{Name: "sha256", Type: "string", Doc: "SHA-256 of the file's content, hex; absent when `content` carries a secret (a secret input), since a hash of a short secret lets anyone who reads the output guess it."},
			{Name: "size", Type: "int", Doc: "Size in bytes."},
			{Name: "mode", Type: "string", Doc: "Permission bits, octal."},
			{Name: "owner", Type: "string", Doc: "Owning user."},
			{Name: "group", Type: "string", Doc: "Owning group."},
		},
		ChangesWhen:   "The file was created, or its bytes, mode, owner or group differed and were set.",
		UnchangedWhen: "The file already had the requested bytes, mode, owner and group.",
		CheckMode: "Reads the file's state as apply does (stat and SHA-256) and says what it would write or set: content as a unified diff (one more round trip reads the old text), mode, owner and group as before → after. " +
			"No diff for content from a secret (secret input), for a file a run wrote from a secret (before or after: the keeper remembers the soul and path, never the content), with `diff: false`, " +
			"for binary content or files over 256 KiB; the change says why. Writes nothing.",
		Example: `- name: motd
  on: web-1.local.test
  module: core.file.present
  params:
    path: /etc/motd
    content: "Managed by Soul Stack\n"
    mode: "0644"`,
		Notes: []string{
			"Changing owner or group, or writing where the connecting user may not, needs root (sudo is used when the connecting user is not root).",
			"The file is written to a temporary name beside it, given its mode, owner and group, and only then renamed, so readers never see half a file and the file never exists under its name with other permissions.",
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

// writeScript replaces the file atomically when write is 1: the content
// (stdin) goes to a private temporary file next to it, which takes the old
// file's mode and ownership (0644 for a new file) and then the requested
// ones, and only then is renamed over the path, so the path never holds
// the new content under other permissions. Ownership is set before the mode,
// since chown clears set-user-ID bits. When write is 0 the requested mode,
// owner and group are set on the file in place.
const writeScript = `set -e
p=$1; mode=$2; owner=$3; group=$4; write=$5
f=$p
if [ "$write" = 1 ]; then
  f=$(mktemp "$(dirname -- "$p")/.soulstack.XXXXXX")
  trap 'rm -f -- "$f"' EXIT
  cat > "$f"
  if [ -e "$p" ]; then
    chown --reference="$p" -- "$f" 2>/dev/null || true
    chmod --reference="$p" -- "$f"
  else
    chmod 0644 -- "$f"
  fi
fi
if [ -n "$owner" ]; then chown "$owner" -- "$f"; fi
if [ -n "$group" ]; then chgrp "$group" -- "$f"; fi
if [ -n "$mode" ]; then chmod "$mode" -- "$f"; fi
if [ "$write" = 1 ]; then
  mv -f -- "$f" "$p"
  trap - EXIT
fi`

// fileState is what probe.FileStatScript reports.
type fileState struct {
	exists             bool
	mode, owner, group string
	size               int64
	sha256             string
}

func stat(ctx context.Context, t module.Target, path string) (fileState, error) {
	argv, req := probe.Command(probe.KindFileStat, path)
	res, err := t.Exec(ctx, module.Command{Argv: argv, Probe: req, ReadOnly: true})
	if err != nil {
		return fileState{}, err
	}
	out := strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 {
		return fileState{}, &module.Error{Code: "file.stat_failed", Message: fmt.Sprintf("%s: %s", path, strings.TrimSpace(out+" "+string(res.Stderr)))}
	}
	if out == "absent" {
		return fileState{}, nil
	}
	lines := strings.Split(out, "\n")
	f := strings.Fields(lines[0])
	if len(lines) != 2 || len(f) != 4 {
		return fileState{}, &module.Error{Code: "file.stat_failed", Message: fmt.Sprintf("%s: unexpected stat output %q", path, out)}
	}
	size, _ := strconv.ParseInt(f[3], 10, 64)
	return fileState{exists: true, mode: f[0], owner: f[1], group: f[2], size: size, sha256: strings.TrimSpace(lines[1])}, nil
}

// sameMode compares octal permission strings ("0644" and "644").
func sameMode(a, b string) bool {
	x, errA := strconv.ParseUint(a, 8, 32)
	y, errB := strconv.ParseUint(b, 8, 32)
	return errA == nil && errB == nil && x == y
}

// decision is what the file needs, from its state now: whether its bytes
// are written, and the mode, owner and group to set ("" where they are
// right already).
type decision struct {
	content            []byte
	before             fileState
	write              bool
	mode, owner, group string
	secretContent      bool
}

func (d decision) none() bool { return !d.write && d.mode == "" && d.owner == "" && d.group == "" }

// decide reads the file's state in one round trip (and a source file from
// the keeper) and says what differs.
func decide(ctx context.Context, run module.RunInfo, p PresentParams, t module.Target) (decision, error) {
	var content []byte
	switch {
	case p.Content != nil:
		content = []byte(*p.Content)
	case p.Source != "":
		b, err := module.ReadKeeperFile(ctx, t, p.Source)
		if err != nil {
			return decision{}, err
		}
		content = b
	}
	sum := sha256.Sum256(content)
	want := hex.EncodeToString(sum[:])
	before, err := stat(ctx, t, p.Path)
	if err != nil {
		return decision{}, err
	}
	d := decision{content: content, before: before, mode: p.Mode, owner: p.Owner, group: p.Group,
		secretContent: p.Content != nil && run.SecretParam("content")}
	d.write = !before.exists || ((p.Content != nil || p.Source != "") && before.sha256 != want)
	if before.exists && d.mode != "" && sameMode(d.mode, before.mode) {
		d.mode = ""
	}
	if before.exists && d.owner == before.owner {
		d.owner = ""
	}
	if before.exists && d.group == before.group {
		d.group = ""
	}
	return d, nil
}

// output is the module's output for the file in state s.
func (d decision) output(path string, s fileState) map[string]any {
	out := map[string]any{"path": path, "size": s.size, "mode": fmt.Sprintf("%04s", s.mode), "owner": s.owner, "group": s.group}
	if !d.secretContent {
		out["sha256"] = s.sha256
	}
	return out
}

// Run makes the file match: it reads the file's state in one round trip
// and writes only what differs, so an unchanged file costs one command.
// When run says content carries a secret, the output has no sha256.
func (m *Present) Run(ctx context.Context, run module.RunInfo, raw json.RawMessage, t module.Target) (module.Result, error) {
	var p PresentParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Result{}, err
	}
	d, err := decide(ctx, run, p, t)
	if err != nil {
		return module.Result{}, err
	}
	if d.none() {
		return module.Result{Changed: false, Output: d.output(p.Path, d.before)}, nil
	}
	w := "0"
	if d.write {
		w = "1"
	}
	// A file about to hold a secret is marked first: a keeper stopped
	// between the write and the mark must not leave it diffable.
	if m.marks != nil && d.write && d.secretContent {
		if err := m.marks.SecretFileMark(ctx, t.SID(), p.Path, run.ID); err != nil {
			return module.Result{}, err
		}
	}
	res, err := t.Exec(ctx, module.Command{Argv: []string{"/bin/sh", "-c", writeScript, "sh", p.Path, d.mode, d.owner, d.group, w}, Stdin: d.content})
	if err != nil {
		return module.Result{}, err
	}
	if res.ExitCode != 0 {
		return module.Result{Changed: d.write}, &module.Error{Code: "file.write_failed", Message: fmt.Sprintf("%s: %s", p.Path, strings.TrimSpace(string(res.Stderr)))}
	}
	if err := m.remember(ctx, t, p, d); err != nil {
		return module.Result{Changed: true}, err
	}
	after, err := stat(ctx, t, p.Path)
	if err != nil {
		return module.Result{Changed: true}, err
	}
	return module.Result{Changed: true, Output: d.output(p.Path, after)}, nil
}

// remember forgets a file's secret mark once a run wrote it from content
// that is not a secret (Run marks one about to hold a secret before it
// writes).
func (m *Present) remember(ctx context.Context, t module.Target, p PresentParams, d decision) error {
	if m.marks == nil || !d.write || d.secretContent || (p.Content == nil && p.Source == "") {
		return nil
	}
	return m.marks.SecretFileClear(ctx, t.SID(), p.Path)
}

// maxDiffBytes bounds the old and new content a check diffs; larger
// files get a note instead of a diff.
const maxDiffBytes = 256 << 10

// Check reads the file's state as Run does and says what Run would
// write or set; for content it would rewrite, a unified diff of the text
// (one more round trip to read the old content), unless the content
// comes from a secret or either side is binary or large.
func (m *Present) Check(ctx context.Context, run module.RunInfo, raw json.RawMessage, t module.Target) (module.Prediction, error) {
	var p PresentParams
	if err := module.DecodeParams(raw, &p); err != nil {
		return module.Prediction{}, err
	}
	d, err := decide(ctx, run, p, t)
	if err != nil {
		return module.Prediction{}, err
	}
	if d.none() {
		return module.Prediction{Output: d.output(p.Path, d.before), OutputKnown: true}, nil
	}
	var changes []client.Change
	if d.write {
		c := client.Change{Kind: "file", Action: "update", Name: p.Path}
		if !d.before.exists {
			c.Action = "create"
		}
		marked := ""
		if m.marks != nil && d.before.exists {
			if marked, err = m.marks.SecretFileMarked(ctx, t.SID(), p.Path); err != nil {
				return module.Prediction{}, err
			}
		}
		switch {
		case d.secretContent:
			c.Note = "the content comes from a secret: no diff is shown"
		case marked != "":
			c.Note = fmt.Sprintf("run %s wrote the file from a secret: no diff of what it holds is shown", marked)
		case p.Diff != nil && !*p.Diff:
			c.Note = "diff: false: no diff is shown"
		case len(d.content) > maxDiffBytes || d.before.size > maxDiffBytes:
			c.Note = fmt.Sprintf("%d bytes now, %d after: too large to diff", d.before.size, len(d.content))
		default:
			var old []byte
			if d.before.exists {
				res, err := t.Exec(ctx, module.Command{Argv: []string{"cat", "--", p.Path}, ReadOnly: true})
				if err != nil {
					return module.Prediction{}, err
				}
				if res.ExitCode != 0 {
					return module.Prediction{}, &module.Error{Code: "file.stat_failed", Message: fmt.Sprintf("%s: read: %s", p.Path, strings.TrimSpace(string(res.Stderr)))}
				}
				old = res.Stdout
			}
			if diff, ok := module.UnifiedDiff(p.Path, old, d.content, d.before.exists); ok {
				c.Diff = diff
			} else {
				c.Note = "binary content: no diff is shown"
			}
		}
		changes = append(changes, c)
	}
	if d.mode != "" {
		before := ""
		if d.before.exists {
			before = fmt.Sprintf("%04s", d.before.mode)
		}
		changes = append(changes, client.Change{Kind: "file", Action: "update", Name: p.Path + " (mode)", Before: before, After: fmt.Sprintf("%04s", strings.TrimLeft(d.mode, "0"))})
	}
	if d.owner != "" {
		changes = append(changes, client.Change{Kind: "file", Action: "update", Name: p.Path + " (owner)", Before: d.before.owner, After: d.owner})
	}
	if d.group != "" {
		changes = append(changes, client.Change{Kind: "file", Action: "update", Name: p.Path + " (group)", Before: d.before.group, After: d.group})
	}
	return module.Prediction{WouldChange: true, Changes: changes}, nil
}
