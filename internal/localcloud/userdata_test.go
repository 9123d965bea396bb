package localcloud

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"os"
	"strings"
	"testing"
)

func TestParseUserdata(t *testing.T) {
	t.Parallel()
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write([]byte("zipped\n"))
	w.Close()
	gzb64 := base64.StdEncoding.EncodeToString(gz.Bytes())

	for _, tc := range []struct {
		name    string
		in      string
		check   func(t *testing.T, u *userdata)
		wantErr string
	}{
		{"empty", "", func(t *testing.T, u *userdata) {
			if u.runcmdScript() != "" || u.Script != "" || len(u.WriteFiles) != 0 {
				t.Errorf("%+v", u)
			}
		}, ""},
		{"script", "#!/bin/bash\necho hi\n", func(t *testing.T, u *userdata) {
			if u.Script != "#!/bin/bash\necho hi\n" {
				t.Errorf("Script = %q", u.Script)
			}
		}, ""},
		{"cloud-config", `#cloud-config
ssh_authorized_keys:
  - ssh-ed25519 AAAA one
write_files:
  - path: /etc/a
    content: |
      line
  - path: /etc/b/../c
    content: aGkK
    encoding: b64
    permissions: '0755'
    owner: app
    append: true
  - path: /etc/d
    content: ` + gzb64 + `
    encoding: gz+b64
    permissions: 0600
    owner: app:staff
    defer: true
runcmd:
  - echo "$HOME" > /x
  - [touch, "/a file", 0]
`, func(t *testing.T, u *userdata) {
			if len(u.SSHAuthorizedKeys) != 1 || u.SSHAuthorizedKeys[0] != "ssh-ed25519 AAAA one" {
				t.Errorf("keys %q", u.SSHAuthorizedKeys)
			}
			want := []writeFile{
				{Path: "/etc/a", Content: []byte("line\n"), Mode: 0o644, Owner: "root", Group: "root"},
				{Path: "/etc/c", Content: []byte("hi\n"), Mode: 0o755, Owner: "app", Group: "app", Append: true},
				{Path: "/etc/d", Content: []byte("zipped\n"), Mode: 0o600, Owner: "app", Group: "staff", Defer: true},
			}
			if len(u.WriteFiles) != len(want) {
				t.Fatalf("write_files %+v", u.WriteFiles)
			}
			for i, w := range want {
				g := u.WriteFiles[i]
				if g.Path != w.Path || string(g.Content) != string(w.Content) || g.Mode != w.Mode || g.Owner != w.Owner ||
					g.Group != w.Group || g.Append != w.Append || g.Defer != w.Defer {
					t.Errorf("write_files[%d] = %+v, want %+v", i, g, w)
				}
			}
			if got := u.runcmdScript(); got != "#!/bin/sh\necho \"$HOME\" > /x\ntouch '/a file' 0\n" {
				t.Errorf("runcmd script %q", got)
			}
		}, ""},
		{"setuid mode", "#cloud-config\nwrite_files:\n  - path: /x\n    permissions: '4755'\n", func(t *testing.T, u *userdata) {
			if m := u.WriteFiles[0].Mode; m != 0o755|os.ModeSetuid {
				t.Errorf("mode %v", m)
			}
		}, ""},
		{"not cloud-config", "packages: [x]\n", nil, `only "#cloud-config"`},
		{"mime", "Content-Type: multipart/mixed\n", nil, `only "#cloud-config"`},
		{"unsupported key", "#cloud-config\npackages: [nginx]\n", nil, `"packages" is not supported`},
		{"bad yaml", "#cloud-config\nruncmd: [\n", nil, "cloud-config"},
		{"relative path", "#cloud-config\nwrite_files:\n  - path: etc/x\n", nil, "write_files[0]: path"},
		{"unknown write_files key", "#cloud-config\nwrite_files:\n  - path: /x\n    source: http://x\n", nil, `"source"`},
		{"bad encoding", "#cloud-config\nwrite_files:\n  - path: /x\n    encoding: rot13\n", nil, "encoding"},
		{"bad b64", "#cloud-config\nwrite_files:\n  - path: /x\n    encoding: b64\n    content: '!!'\n", nil, "illegal base64"},
		{"bad permissions", "#cloud-config\nwrite_files:\n  - path: /x\n    permissions: rw-r--r--\n", nil, "permissions"},
		{"keys not a list", "#cloud-config\nssh_authorized_keys: ssh-ed25519 AAAA\n", nil, "ssh_authorized_keys"},
		{"runcmd item a map", "#cloud-config\nruncmd:\n  - {a: b}\n", nil, "runcmd[0]"},
		{"too large", "#cloud-config\n" + strings.Repeat("#", maxUserdata), nil, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := parseUserdata(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseUserdata = %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, u)
		})
	}
}
