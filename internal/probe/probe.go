// Package probe holds the read-only questions modules ask a soul — a
// file's state, what dpkg knows of some packages — in two forms that give
// the same answer: a shell script any host can run, and Answer, which the
// soul's executor (the agent, or `soul exec --stdio` over SSH) runs in its
// own process instead of forking a shell and its tools.
//
// A module sends a probe as one command (Command): the script's argv plus
// the Request. A transport that reaches an executor hands it the Request,
// and the executor answers it natively when it can (Answer's ok) or runs
// the argv; every other way the argv runs. An older executor, which does
// not know the request, runs the argv too. So the script is the contract:
// Answer writes what the script writes, in the same format, for every case
// it claims (tests compare the two on real files and a real dpkg
// database), and leaves every case it cannot be sure of to the script.
package probe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Request is a probe as it travels to an executor: its kind and the
// script's arguments.
type Request struct {
	Kind string   `json:"kind"`
	Args []string `json:"args,omitempty"`
}

// The kinds of probe.
const (
	// KindFileStat: one path; see FileStatScript.
	KindFileStat = "file.stat"
	// KindAptQuery: dpkg package patterns; see AptQueryScript.
	KindAptQuery = "apt.query"
	// KindFileExists: one path; see FileExistsScript.
	KindFileExists = "file.exists"
)

// FileExistsScript exits 0 when its path exists (following links), 1
// when not: core.command's creates and removes guards.
const FileExistsScript = `test -e "$1"`

// FileStatScript reports a file's mode, owner, group, size and SHA-256
// in one round trip ("<mode> <owner> <group> <size>\n<sha256>\n", the
// first line as `stat -c '%a %U %G %s'` gives it for the path itself), or
// "absent", or exits 3 with "not a regular file".
const FileStatScript = `p=$1
if [ ! -e "$p" ]; then echo absent; exit 0; fi
if [ ! -f "$p" ]; then echo "not a regular file"; exit 3; fi
stat -c '%a %U %G %s' -- "$p" || exit 4
sha256sum -- "$p" | cut -d' ' -f1`

// AptQueryScript prints the age of the package lists and the dpkg records
// of the packages given as arguments. Lines are tagged and tab-separated:
//
//	@nomanager                      (no dpkg-query or apt-get: nothing else)
//	@lists <now> <newest mtime of the update stamp and the lists dir> <number of Packages files>
//	@pkg <name> <arch> <status> <version>
//
// The records are dpkg-query's, in its order. dpkg-query also prints a
// record "unknown ok not-installed" with no architecture for a name that
// only another package's relations mention; Answer leaves those out (to
// every reader a package that is not installed), and that is the only
// difference between the two.
const AptQueryScript = `export LC_ALL=C
if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
	echo '@nomanager'
	exit 0
fi
stamp=0
for f in /var/lib/apt/periodic/update-success-stamp /var/lib/apt/lists; do
	m=$(stat -c %Y "$f" 2>/dev/null) || continue
	[ "$m" -gt "$stamp" ] && stamp=$m
done
n=$(ls /var/lib/apt/lists 2>/dev/null | grep -c '_Packages')
printf '@lists\t%s\t%s\t%s\n' "$(date +%s)" "$stamp" "$n"
dpkg-query -W -f='@pkg\t${Package}\t${Architecture}\t${Status}\t${Version}\n' -- "$@" 2>/dev/null
exit 0
`

var scripts = map[string]string{KindFileStat: FileStatScript, KindAptQuery: AptQueryScript, KindFileExists: FileExistsScript}

// Command is the argv that runs probe kind with args through the shell,
// and the Request an executor may answer instead.
func Command(kind string, args ...string) ([]string, *Request) {
	argv := append([]string{"/bin/sh", "-c", scripts[kind], "sh"}, args...)
	return argv, &Request{Kind: kind, Args: slices.Clone(args)}
}

// Root is the file system Answer reads: "/" on a soul; tests point it
// elsewhere.
type Root struct {
	// Dir is the root directory.
	Dir string
	// LookPath finds a program as the script's shell would; nil means
	// exec.LookPath.
	LookPath func(string) (string, error)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Reply is a probe's answer: what its script would print and exit with.
type Reply struct {
	Stdout []byte
	Exit   int
}

// Answer answers req natively on this host: the script's standard output
// and exit status and ok, or ok false when it cannot give the script's answer for sure
// (an unknown kind, a name service it does not read, a dpkg database
// with a pending journal, …), and then the caller runs the script. It
// runs as the calling process's user: a probe that needs another user's
// rights is the caller's to refuse.
func Answer(ctx context.Context, req Request) (Reply, bool) {
	return Root{Dir: "/"}.Answer(ctx, req)
}

// Answer is Answer under r.
func (r Root) Answer(ctx context.Context, req Request) (Reply, bool) {
	if ctx.Err() != nil {
		return Reply{}, false
	}
	var out []byte
	ok := false
	switch req.Kind {
	case KindFileStat:
		if len(req.Args) == 1 {
			out, ok = r.fileStat(ctx, req.Args[0])
		}
	case KindAptQuery:
		out, ok = r.aptQuery(req.Args)
	case KindFileExists:
		if len(req.Args) == 1 && strings.HasPrefix(req.Args[0], "/") {
			// test -e: any stat failure is "does not exist".
			if _, err := os.Stat(r.path(req.Args[0])); err != nil {
				return Reply{Exit: 1}, true
			}
			return Reply{}, true
		}
	}
	return Reply{Stdout: out}, ok
}

func (r Root) path(p string) string { return filepath.Join(r.Dir, p) }

// fileStat is FileStatScript's answer for path p, for a regular file (or
// a link to one) whose owner and group /etc/passwd and /etc/group name
// and which this process can read; "absent" where `[ -e ]` is false.
func (r Root) fileStat(ctx context.Context, p string) ([]byte, bool) {
	if !strings.HasPrefix(p, "/") {
		return nil, false // relative to the shell's directory
	}
	full := r.path(p)
	fi, err := os.Stat(full)
	if err != nil {
		// test -e is false for any stat failure.
		return []byte("absent\n"), true
	}
	if !fi.Mode().IsRegular() {
		return nil, false // the script's exit status 3, left to it
	}
	// stat(1) without -L describes the path itself: a link's own mode,
	// owner and size; sha256sum reads through it.
	li, err := os.Lstat(full)
	if err != nil {
		return nil, false
	}
	st, ok := li.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, false
	}
	owner, ok := r.idName("etc/passwd", st.Uid)
	if !ok {
		return nil, false
	}
	group, ok := r.idName("etc/group", st.Gid)
	if !ok {
		return nil, false
	}
	f, err := os.Open(full)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, ctxReader{ctx, f}); err != nil {
		return nil, false // unreadable, or the caller gave up on a long hash
	}
	return fmt.Appendf(nil, "%o %s %s %d\n%s\n", permBits(li.Mode()), owner, group, li.Size(), hex.EncodeToString(h.Sum(nil))), true
}

// ctxReader ends a read loop once ctx has ended: hashing a large file
// stops when the command is cancelled, as the script's sha256sum is
// killed.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// permBits is stat's %a: the permission bits with set-user-ID, set-group-ID
// and sticky.
func permBits(m fs.FileMode) uint32 {
	b := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		b |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		b |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}

// idName is the name of id in a passwd-format file, when the name service
// reads only files for it (nsswitch.conf) and the file names it.
func (r Root) idName(file string, id uint32) (string, bool) {
	db := strings.TrimPrefix(file, "etc/")
	if !r.filesOnly(db) {
		return "", false
	}
	b, err := os.ReadFile(r.path(file))
	if err != nil {
		return "", false
	}
	want := strconv.FormatUint(uint64(id), 10)
	for line := range strings.Lines(string(b)) {
		f := strings.Split(strings.TrimRight(line, "\n"), ":")
		if len(f) >= 3 && f[2] == want && f[0] != "" && !strings.HasPrefix(f[0], "+") && !strings.HasPrefix(f[0], "-") {
			return f[0], true
		}
	}
	return "", false
}

// filesOnly reports whether nsswitch.conf looks database db up in files
// alone (or with systemd's, which names no user that /etc/passwd does
// not, for the ids files name first).
func (r Root) filesOnly(db string) bool {
	b, err := os.ReadFile(r.path("etc/nsswitch.conf"))
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		line, _, _ = strings.Cut(line, "#")
		name, srcs, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) != db {
			continue
		}
		f := strings.Fields(srcs)
		if len(f) == 0 || f[0] != "files" {
			return false
		}
		for _, s := range f[1:] {
			if s != "systemd" {
				return false
			}
		}
		return true
	}
	return false
}

// aptQuery is AptQueryScript's answer.
func (r Root) aptQuery(patterns []string) ([]byte, bool) {
	look := r.LookPath
	if look == nil {
		look = exec.LookPath
	}
	if _, err := look("dpkg-query"); err != nil {
		return nil, false
	}
	if _, err := look("apt-get"); err != nil {
		return nil, false
	}
	for _, p := range patterns {
		if p == "" || strings.ContainsAny(p, "*?[]\\") {
			return nil, false // dpkg's glob patterns
		}
	}
	if pending, err := os.ReadDir(r.path("var/lib/dpkg/updates")); err != nil && !os.IsNotExist(err) {
		return nil, false
	} else {
		for _, e := range pending {
			if e.Name() != "tmp.i" {
				return nil, false // a journal dpkg-query would read first
			}
		}
	}
	all, ok := statusRecords(r.path("var/lib/dpkg/status"))
	if !ok {
		return nil, false
	}
	var recs []record
	for _, rec := range all {
		if rec.matches(patterns) {
			recs = append(recs, rec)
		}
	}
	var stamp int64
	for _, f := range []string{"var/lib/apt/periodic/update-success-stamp", "var/lib/apt/lists"} {
		if fi, err := os.Lstat(r.path(f)); err == nil && fi.ModTime().Unix() > stamp {
			stamp = fi.ModTime().Unix()
		}
	}
	n := 0
	if ents, err := os.ReadDir(r.path("var/lib/apt/lists")); err == nil {
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), ".") && strings.Contains(e.Name(), "_Packages") {
				n++
			}
		}
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "@lists\t%d\t%d\t%d\n", now().Unix(), stamp, n)
	for _, rec := range recs {
		fmt.Fprintf(&out, "@pkg\t%s\t%s\t%s\t%s\n", rec.name, rec.arch, rec.status, rec.version)
	}
	return out.Bytes(), true
}

// statusCache keeps the last status file read, by its identity: dpkg
// replaces the file by a rename on every change (a new inode, size and
// time), so an executor answering probe after probe parses it once per
// change, not per probe.
var statusCache struct {
	sync.Mutex
	path string
	id   fileID
	recs []record
}

// fileID is what tells one version of a file from another.
type fileID struct {
	dev, ino uint64
	size     int64
	mtime    int64
}

// statusRecords returns every record of the status file at path.
func statusRecords(path string) ([]record, bool) {
	id, ok := identify(path)
	if !ok {
		return nil, false
	}
	statusCache.Lock()
	defer statusCache.Unlock()
	if statusCache.path == path && statusCache.id == id {
		return statusCache.recs, true
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	recs, ok := parseStatus(b, func(record) bool { return true })
	// Cached only when the file did not change while it was read.
	if after, same := identify(path); ok && same && after == id {
		statusCache.path, statusCache.id, statusCache.recs = path, id, recs
	}
	return recs, ok
}

func identify(path string) (fileID, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, size: fi.Size(), mtime: fi.ModTime().UnixNano()}, true
}

// record is one stanza of dpkg's status file.
type record struct{ name, arch, status, version string }

// matches is dpkg-query -W's pattern match without globs: a name matches
// every architecture of it, name:arch that one.
func (rec record) matches(patterns []string) bool {
	for _, p := range patterns {
		name, arch, qualified := strings.Cut(p, ":")
		if name == rec.name && (!qualified || arch == rec.arch) {
			return true
		}
	}
	return false
}

// parseStatus reads dpkg's status file and returns the records keep
// wants, in dpkg-query's order (by name, then architecture); ok is false
// for a stanza it does not understand. It reads bytes, and keeps the
// fields of the stanzas kept only: a Debian system's file is about a
// megabyte.
func parseStatus(b []byte, keep func(record) bool) ([]record, bool) {
	var recs []record
	var name, arch, status, version []byte
	flush := func() bool {
		if name == nil && arch == nil && status == nil && version == nil {
			return true
		}
		if len(name) == 0 || len(status) == 0 || len(arch) == 0 {
			return false
		}
		if r := (record{name: string(name), arch: string(arch), status: string(status), version: string(version)}); keep(r) {
			recs = append(recs, r)
		}
		name, arch, status, version = nil, nil, nil, nil
		return true
	}
	for len(b) > 0 {
		var line []byte
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			line, b = b, nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			if !flush() {
				return nil, false
			}
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue // a continuation line
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return nil, false
		}
		switch string(k) {
		case "Package":
			name = bytes.TrimSpace(v)
		case "Architecture":
			arch = bytes.TrimSpace(v)
		case "Status":
			status = bytes.TrimSpace(v)
		case "Version":
			version = bytes.TrimSpace(v)
		}
	}
	if !flush() {
		return nil, false
	}
	slices.SortStableFunc(recs, func(a, b record) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		return strings.Compare(a.arch, b.arch)
	})
	return recs, true
}
