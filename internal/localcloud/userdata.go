package localcloud

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
)

// maxUserdata bounds the userdata of one VM, as clouds do (EC2: 16 KiB;
// this is more generous).
const maxUserdata = 64 << 10

// userdata is the part of a VM's cloud-init userdata this driver honours:
// a #cloud-config document's ssh_authorized_keys, write_files and runcmd,
// or a #! script, which runs like runcmd.
type userdata struct {
	SSHAuthorizedKeys []string
	WriteFiles        []writeFile
	// RunCmd holds one shell command line per runcmd item.
	RunCmd []string
	// Script is the text of #! userdata.
	Script string
}

// writeFile is one write_files item, decoded.
type writeFile struct {
	Path    string
	Content []byte
	Mode    os.FileMode
	Owner   string // user name or number
	Group   string // group name or number
	Append  bool
	Defer   bool
}

var cloudConfigKeys = []string{"runcmd", "ssh_authorized_keys", "write_files"}

// parseUserdata decodes userdata. Empty userdata is nothing to do; other
// formats than #cloud-config and #! scripts (MIME multipart, #include…)
// are refused, and so are cloud-config keys this driver does not honour,
// so that nothing asked for is silently skipped.
func parseUserdata(text string) (*userdata, error) {
	if len(text) > maxUserdata {
		return nil, fmt.Errorf("larger than %d bytes", maxUserdata)
	}
	ud := &userdata{}
	first, _, _ := strings.Cut(text, "\n")
	first = strings.TrimSpace(first)
	switch {
	case strings.TrimSpace(text) == "":
		return ud, nil
	case strings.HasPrefix(first, "#!"):
		ud.Script = text
		return ud, nil
	case first != "#cloud-config":
		return nil, errors.New(`only "#cloud-config" documents and "#!" scripts are supported`)
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return nil, fmt.Errorf("cloud-config: %s", yaml.FormatError(err, false, true))
	}
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(cloudConfigKeys, k) {
			return nil, fmt.Errorf("cloud-config key %q is not supported by the local driver (supported: %s)",
				k, strings.Join(cloudConfigKeys, ", "))
		}
	}
	if v, ok := doc["ssh_authorized_keys"]; ok && v != nil {
		list, ok := v.([]any)
		if !ok {
			return nil, errors.New("ssh_authorized_keys must be a list of public keys")
		}
		for i, k := range list {
			s, ok := k.(string)
			if !ok || strings.ContainsAny(s, "\r\n") || strings.TrimSpace(s) == "" {
				return nil, fmt.Errorf("ssh_authorized_keys[%d] must be one public key line", i)
			}
			ud.SSHAuthorizedKeys = append(ud.SSHAuthorizedKeys, strings.TrimSpace(s))
		}
	}
	if v, ok := doc["write_files"]; ok && v != nil {
		list, ok := v.([]any)
		if !ok {
			return nil, errors.New("write_files must be a list")
		}
		for i, item := range list {
			wf, err := parseWriteFile(item)
			if err != nil {
				return nil, fmt.Errorf("write_files[%d]: %w", i, err)
			}
			ud.WriteFiles = append(ud.WriteFiles, wf)
		}
	}
	if v, ok := doc["runcmd"]; ok && v != nil {
		list, ok := v.([]any)
		if !ok {
			return nil, errors.New("runcmd must be a list")
		}
		for i, item := range list {
			line, err := runcmdLine(item)
			if err != nil {
				return nil, fmt.Errorf("runcmd[%d]: %w", i, err)
			}
			ud.RunCmd = append(ud.RunCmd, line)
		}
	}
	return ud, nil
}

var writeFileKeys = []string{"append", "content", "defer", "encoding", "owner", "path", "permissions"}

func parseWriteFile(item any) (writeFile, error) {
	m, ok := item.(map[string]any)
	if !ok {
		return writeFile{}, errors.New("must be a mapping with a path")
	}
	for k := range m {
		if !slices.Contains(writeFileKeys, k) {
			return writeFile{}, fmt.Errorf("key %q is not supported (supported: %s)", k, strings.Join(writeFileKeys, ", "))
		}
	}
	wf := writeFile{Mode: 0o644, Owner: "root", Group: "root"}
	path, _ := m["path"].(string)
	if !filepath.IsAbs(path) {
		return writeFile{}, fmt.Errorf("path must be an absolute path, not %q", path)
	}
	wf.Path = filepath.Clean(path)
	content := ""
	if c, ok := m["content"]; ok && c != nil {
		s, ok := c.(string)
		if !ok {
			return writeFile{}, errors.New("content must be a string")
		}
		content = s
	}
	enc, _ := m["encoding"].(string)
	data, err := decodeContent(content, enc)
	if err != nil {
		return writeFile{}, err
	}
	wf.Content = data
	switch p := m["permissions"].(type) {
	case nil:
	case string:
		// cloud-init's form: an octal string such as '0644'.
		n, err := strconv.ParseUint(strings.TrimPrefix(p, "0o"), 8, 32)
		if err != nil || n > 0o7777 {
			return writeFile{}, fmt.Errorf("permissions %q is not an octal mode such as '0644'", p)
		}
		wf.Mode = fileMode(uint32(n))
	case uint64:
		// An unquoted 0644 is the YAML 1.1 octal integer 420, as in
		// cloud-init.
		if p > 0o7777 {
			return writeFile{}, fmt.Errorf("permissions %d is not a file mode", p)
		}
		wf.Mode = fileMode(uint32(p))
	default:
		return writeFile{}, errors.New("permissions must be an octal string such as '0644'")
	}
	if o, ok := m["owner"]; ok && o != nil {
		s, ok := o.(string)
		if !ok || s == "" {
			return writeFile{}, errors.New("owner must be user or user:group")
		}
		user, group, found := strings.Cut(s, ":")
		wf.Owner = user
		if found {
			wf.Group = group
		} else {
			wf.Group = user
		}
		if wf.Owner == "" || wf.Group == "" {
			return writeFile{}, fmt.Errorf("owner %q must be user or user:group", s)
		}
	}
	for _, k := range []string{"append", "defer"} {
		switch b := m[k].(type) {
		case nil:
		case bool:
			if k == "append" {
				wf.Append = b
			} else {
				wf.Defer = b
			}
		default:
			return writeFile{}, fmt.Errorf("%s must be true or false", k)
		}
	}
	return wf, nil
}

// fileMode turns a chmod(2) mode (with setuid, setgid and sticky bits) into
// an os.FileMode.
func fileMode(m uint32) os.FileMode {
	mode := os.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

func decodeContent(content, encoding string) ([]byte, error) {
	switch strings.ToLower(encoding) {
	case "", "text/plain":
		return []byte(content), nil
	case "b64", "base64":
		return base64.StdEncoding.DecodeString(strings.Join(strings.Fields(content), ""))
	case "gz", "gzip":
		return gunzip([]byte(content))
	case "gz+b64", "gz+base64", "gzip+b64", "gzip+base64":
		raw, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(content), ""))
		if err != nil {
			return nil, fmt.Errorf("content: %w", err)
		}
		return gunzip(raw)
	default:
		return nil, fmt.Errorf("encoding %q is not one of b64, gzip, gz+b64, text/plain", encoding)
	}
}

func gunzip(b []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("content: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(r, maxUserdata*64))
	if err != nil {
		return nil, fmt.Errorf("content: %w", err)
	}
	return out, nil
}

// runcmdLine renders one runcmd item as cloud-init does: a string is a
// shell line as it is, a list is an argv, each word quoted.
func runcmdLine(item any) (string, error) {
	switch v := item.(type) {
	case string:
		return v, nil
	case []any:
		if len(v) == 0 {
			return "", errors.New("an empty command")
		}
		words := make([]string, len(v))
		for i, w := range v {
			switch w := w.(type) {
			case string:
				words[i] = shellQuote(w)
			case uint64, int64, float64, bool:
				words[i] = shellQuote(fmt.Sprint(w))
			default:
				return "", fmt.Errorf("word %d must be a string", i)
			}
		}
		return strings.Join(words, " "), nil
	default:
		return "", errors.New("must be a shell line or a list of words")
	}
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,@%+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// runcmdScript is the shell script the VM runs for runcmd, like the one
// cloud-init writes to /var/lib/cloud/instance/scripts/runcmd: each item
// in order, a failing one does not stop the next.
func (u *userdata) runcmdScript() string {
	if len(u.RunCmd) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	for _, l := range u.RunCmd {
		b.WriteString(l)
		b.WriteString("\n")
	}
	return b.String()
}

// idLookup resolves user and group names in a root filesystem's
// /etc/passwd and /etc/group, without NSS (the VM's root is not the
// process's).
type idLookup struct {
	root string
}

func (l idLookup) uid(name string) (int, error) {
	return l.lookup("etc/passwd", name, 2)
}

func (l idLookup) gid(name string) (int, error) {
	return l.lookup("etc/group", name, 2)
}

// home returns a user's home directory from passwd.
func (l idLookup) home(name string) (string, error) {
	f, err := os.Open(filepath.Join(l.root, "etc/passwd"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) >= 6 && fields[0] == name {
			return fields[5], nil
		}
	}
	return "", fmt.Errorf("no user %q in /etc/passwd", name)
}

func (l idLookup) lookup(file, name string, col int) (int, error) {
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		return n, nil
	}
	f, err := os.Open(filepath.Join(l.root, file))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) > col && fields[0] == name {
			return strconv.Atoi(fields[col])
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %q in /%s", name, file)
}

// writeFiles applies the write_files items whose Defer equals deferred,
// under root, resolving owners in root's own passwd and group files.
func (u *userdata) writeFiles(root string, deferred bool) error {
	ids := idLookup{root: root}
	var errs []error
	for _, wf := range u.WriteFiles {
		if wf.Defer != deferred {
			continue
		}
		if err := wf.write(root, ids); err != nil {
			errs = append(errs, fmt.Errorf("write_files %s: %w", wf.Path, err))
		}
	}
	return errors.Join(errs...)
}

func (wf writeFile) write(root string, ids idLookup) error {
	uid, err := ids.uid(wf.Owner)
	if err != nil {
		return err
	}
	gid, err := ids.gid(wf.Group)
	if err != nil {
		return err
	}
	p := filepath.Join(root, wf.Path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if wf.Append {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	f, err := os.OpenFile(p, flags, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(wf.Content); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Lchown(p, uid, gid); err != nil {
		return err
	}
	// Chmod after chown: chown clears the setuid and setgid bits.
	return os.Chmod(p, wf.Mode)
}
