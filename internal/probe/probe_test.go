package probe

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// script runs a probe's shell script on this host, as a soul without an
// executor would: its stdout and exit status.
func script(t *testing.T, kind string, args ...string) (string, int) {
	t.Helper()
	argv, _ := Command(kind, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.Output()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// TestFileStatAnswersAsTheScript: for every file it answers, Answer writes
// what FileStatScript writes on the same file; the others (a directory,
// an owner no file names) it leaves to the script.
func TestFileStatAnswersAsTheScript(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := write("plain", "one\n", 0o640)
	setuid := write("setuid", "#!/bin/sh\n", 0o4755|os.ModeSetuid)
	if err := os.Chmod(setuid, 0o755|os.ModeSetuid|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	none := write("none", "", 0)
	big := write("big", strings.Repeat("x", 3<<20), 0o644)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(plain, link); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "gone"), dangling); err != nil {
		t.Fatal(err)
	}
	answered := []string{plain, setuid, none, big, link, dangling, filepath.Join(dir, "absent"), filepath.Join(plain, "below-a-file")}
	left := []string{dir, "relative/path"}
	if os.Geteuid() == 0 {
		nobody := write("nobody", "n\n", 0o600)
		if err := os.Chown(nobody, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		answered = append(answered, nobody)
		stranger := write("stranger", "s\n", 0o600)
		if err := os.Chown(stranger, 54321, 54321); err != nil {
			t.Fatal(err)
		}
		left = append(left, stranger)
	}
	for _, p := range answered {
		got, ok := stdout(Answer(context.Background(), Request{Kind: KindFileStat, Args: []string{p}}))
		want, code := script(t, KindFileStat, p)
		if !ok {
			t.Errorf("%s: not answered; the script says %q (exit %d)", p, want, code)
			continue
		}
		if code != 0 || string(got) != want {
			t.Errorf("%s: answered %q, the script says %q (exit %d)", p, got, want, code)
		}
	}
	for _, p := range left {
		if got, ok := stdout(Answer(context.Background(), Request{Kind: KindFileStat, Args: []string{p}})); ok {
			want, code := script(t, KindFileStat, p)
			t.Errorf("%s: answered %q, want it left to the script (which says %q, exit %d)", p, got, want, code)
		}
	}
}

// pkgLines are the @pkg lines of an answer, without dpkg-query's records
// of names only relations mention (see AptQueryScript).
func pkgLines(out string) []string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "@pkg\t") && !strings.Contains(l, "\t\tunknown ok not-installed\t") {
			keep = append(keep, l)
		}
	}
	return keep
}

// TestAptQueryAnswersAsTheScript compares Answer with AptQueryScript on
// this host's own dpkg database and apt lists.
func TestAptQueryAnswersAsTheScript(t *testing.T) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("no dpkg-query on this host: the probe is Debian's")
	}
	patterns := []string{"libc6", "bash:" + dpkgArch(t), "tzdata:" + dpkgArch(t), "no-such-package-here", "apache2", "coreutils", "dpkg"}
	want, code := script(t, KindAptQuery, patterns...)
	got, ok := stdout(Answer(context.Background(), Request{Kind: KindAptQuery, Args: patterns}))
	if !ok || code != 0 {
		t.Fatalf("answered %v; the script exits %d", ok, code)
	}
	if g, w := strings.Join(pkgLines(string(got)), "\n"), strings.Join(pkgLines(want), "\n"); g != w || !strings.Contains(g, "\tlibc6\t") {
		t.Errorf("records answered:\n%s\nthe script's:\n%s", g, w)
	}
	lists := func(out string) []string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Split(l, "\t"); f[0] == "@lists" && len(f) == 4 {
				return f[1:]
			}
		}
		t.Fatalf("no @lists line in %q", out)
		return nil
	}
	g, w := lists(string(got)), lists(want)
	if g[1] != w[1] || g[2] != w[2] {
		t.Errorf("lists answered %v, the script's %v", g, w)
	}
}

func dpkgArch(t *testing.T) string {
	out, err := exec.Command("dpkg", "--print-architecture").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// statusFixture is a dpkg database with two architectures of one package,
// one with only config files left, one unpacked, and a name only a
// relation mentions.
const statusFixture = `Package: foo
Status: install ok installed
Priority: optional
Architecture: i386
Multi-Arch: same
Version: 1.0-1
Description: foo
 long text

Package: foo
Status: install ok installed
Architecture: amd64
Multi-Arch: same
Version: 1.0-1
Depends: qux (>= 1)
Description: foo
 long text
 .
 more

Package: bar
Status: deinstall ok config-files
Architecture: all
Version: 2:3.4
Conffiles:
 /etc/bar.conf 1234567890abcdef1234567890abcdef
Description: bar

Package: baz
Status: install ok unpacked
Architecture: amd64
Version: 0.1
Description: baz
`

// fixtureRoot lays statusFixture out as a root's dpkg database.
func fixtureRoot(t *testing.T) Root {
	t.Helper()
	root := t.TempDir()
	admin := filepath.Join(root, "var/lib/dpkg")
	for _, d := range []string{filepath.Join(admin, "updates"), filepath.Join(root, "var/lib/apt/lists")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(admin, "status"): statusFixture,
		filepath.Join(admin, "arch"):   "amd64\ni386\n",
		filepath.Join(root, "var/lib/apt/lists/deb.example_dists_x_main_binary-amd64_Packages"): "",
		filepath.Join(root, "var/lib/apt/lists/deb.example_dists_x_Release"):                    "",
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Root{Dir: root, LookPath: func(string) (string, error) { return "/usr/bin/true", nil }}
}

// TestAptQueryAsDpkgQuery compares the records answered from a database
// with what dpkg-query itself reads from it (--admindir): order,
// architectures, states and versions.
func TestAptQueryAsDpkgQuery(t *testing.T) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("no dpkg-query on this host: the probe is Debian's")
	}
	r := fixtureRoot(t)
	for _, patterns := range [][]string{{"foo", "bar", "baz", "qux"}, {"foo:i386", "bar:all", "nope"}, {"baz:i386"}, {"bar", "foo:amd64"}} {
		args := append([]string{"--admindir=" + filepath.Join(r.Dir, "var/lib/dpkg"), "-W", "-f=@pkg\t${Package}\t${Architecture}\t${Status}\t${Version}\n", "--"}, patterns...)
		out, _ := exec.Command("dpkg-query", args...).Output()
		got, ok := stdout(r.Answer(context.Background(), Request{Kind: KindAptQuery, Args: patterns}))
		if !ok {
			t.Fatalf("%v: not answered", patterns)
		}
		if g, w := strings.Join(pkgLines(string(got)), "\n"), strings.Join(pkgLines(string(out)), "\n"); g != w {
			t.Errorf("%v: answered\n%s\ndpkg-query says\n%s", patterns, g, w)
		}
		if !strings.Contains(string(got), "\t1\n") {
			t.Errorf("%v: %q does not count the one Packages file", patterns, got)
		}
	}
}

// TestAptQueryLeavesToTheScript: what Answer cannot read as dpkg-query
// would, it does not answer.
func TestAptQueryLeavesToTheScript(t *testing.T) {
	r := fixtureRoot(t)
	if _, ok := stdout(r.Answer(context.Background(), Request{Kind: KindAptQuery, Args: []string{"foo"}})); !ok {
		t.Fatal("the fixture itself is not answered")
	}
	cases := map[string]func(r *Root){
		"a glob pattern": func(*Root) {},
		"a pending dpkg journal": func(r *Root) {
			os.WriteFile(filepath.Join(r.Dir, "var/lib/dpkg/updates/0001"), []byte("Package: foo\n"), 0o644)
		},
		"no apt-get": func(r *Root) {
			r.LookPath = func(p string) (string, error) {
				if p == "apt-get" {
					return "", exec.ErrNotFound
				}
				return "/usr/bin/" + p, nil
			}
		},
		"a stanza without an architecture": func(r *Root) {
			os.WriteFile(filepath.Join(r.Dir, "var/lib/dpkg/status"), []byte(statusFixture+"\nPackage: old\nStatus: purge ok not-installed\n"), 0o644)
		},
		"no status file": func(r *Root) { os.Remove(filepath.Join(r.Dir, "var/lib/dpkg/status")) },
	}
	for name, spoil := range cases {
		r := fixtureRoot(t)
		spoil(&r)
		pattern := "foo"
		if name == "a glob pattern" {
			pattern = "fo*"
		}
		if got, ok := stdout(r.Answer(context.Background(), Request{Kind: KindAptQuery, Args: []string{pattern}})); ok {
			t.Errorf("%s: answered %q, want it left to the script", name, got)
		}
	}
	if _, ok := stdout(r.Answer(context.Background(), Request{Kind: "no.such.kind"})); ok {
		t.Error("an unknown kind was answered")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := stdout(r.Answer(ctx, Request{Kind: KindAptQuery, Args: []string{"foo"}})); ok {
		t.Error("answered under a cancelled context")
	}
	r.Now = func() time.Time { return time.Unix(1700000000, 0) }
	if got, _ := stdout(r.Answer(context.Background(), Request{Kind: KindAptQuery})); !strings.HasPrefix(string(got), "@lists\t1700000000\t") {
		t.Errorf("with no patterns: %q, want the lists line alone", got)
	}
}

// TestAptQuerySeesDpkgChanges: dpkg replaces its status file on every
// change; an answer after that reads the new file, not the one read before.
func TestAptQuerySeesDpkgChanges(t *testing.T) {
	r := fixtureRoot(t)
	first, _ := stdout(r.Answer(context.Background(), Request{Kind: KindAptQuery, Args: []string{"baz"}}))
	if !strings.Contains(string(first), "\tbaz\tamd64\tinstall ok unpacked\t0.1\n") {
		t.Fatalf("first answer %q", first)
	}
	status := filepath.Join(r.Dir, "var/lib/dpkg/status")
	next := strings.Replace(statusFixture, "Status: install ok unpacked\nArchitecture: amd64\nVersion: 0.1", "Status: install ok installed\nArchitecture: amd64\nVersion: 0.2", 1)
	if err := os.WriteFile(status+"-new", []byte(next), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(status+"-new", status); err != nil {
		t.Fatal(err)
	}
	again, _ := stdout(r.Answer(context.Background(), Request{Kind: KindAptQuery, Args: []string{"baz"}}))
	if !strings.Contains(string(again), "\tbaz\tamd64\tinstall ok installed\t0.2\n") {
		t.Fatalf("after dpkg's change: %q", again)
	}
}

// TestFileStatStopsWithItsContext: hashing gives up once the caller's
// context ends, as the script's sha256sum is killed.
func TestFileStatStopsWithItsContext(t *testing.T) {
	f := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(f, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := Root{Dir: "/"}
	cancel()
	if out, ok := r.fileStat(ctx, f); ok {
		t.Fatalf("answered %q after the context ended", out)
	}
	if _, ok := r.fileStat(context.Background(), f); !ok {
		t.Fatal("not answered with a live context")
	}
}

// stdout is an answer's standard output.
func stdout(rep Reply, ok bool) ([]byte, bool) { return rep.Stdout, ok }

// TestFileExistsAnswersAsTheScript: the native answer's exit status is
// test -e's for files, directories, links and missing paths; a relative
// path is the script's (it is relative to the login directory).
func TestFileExistsAnswersAsTheScript(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "gone"), dangling); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f, dir, dangling, filepath.Join(dir, "missing"), filepath.Join(f, "below")} {
		rep, ok := Answer(context.Background(), Request{Kind: KindFileExists, Args: []string{p}})
		out, code := script(t, KindFileExists, p)
		if !ok || rep.Exit != code || string(rep.Stdout) != out {
			t.Errorf("%s: answered exit %d %q (%v), the script exits %d %q", p, rep.Exit, rep.Stdout, ok, code, out)
		}
	}
	if _, ok := Answer(context.Background(), Request{Kind: KindFileExists, Args: []string{"relative"}}); ok {
		t.Error("a relative path was answered")
	}
}
