package moduletest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/soulstack/soulstack/internal/module"
)

// Tree is a snapshot of a directory: each entry's type, mode, owner,
// size, modification time and content hash (or link target).
type Tree map[string]string

// Snapshot records the tree under dir.
func Snapshot(tb testing.TB, dir string) Tree {
	tb.Helper()
	t := Tree{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		desc := fmt.Sprintf("%v", info.Mode())
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			desc += fmt.Sprintf(" %d:%d", st.Uid, st.Gid)
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(path)
			desc += " -> " + target
		case info.Mode().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += fmt.Sprintf(" %d %s %s", info.Size(), info.ModTime().UTC().Format(time.RFC3339Nano), hex.EncodeToString(sum[:8]))
		}
		t[rel] = desc
		return nil
	})
	if err != nil {
		tb.Fatalf("snapshot %s: %v", dir, err)
	}
	return t
}

// Diff lists what differs between two snapshots.
func (a Tree) Diff(b Tree) []string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			out = append(out, "removed "+k)
		} else if v != w {
			out = append(out, fmt.Sprintf("changed %s: %s -> %s", k, v, w))
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, "added "+k)
		}
	}
	slices.Sort(out)
	return out
}

// processes lists the VM's processes (pid and command), leaving out the
// ones that run the listing itself.
func (v *VM) processes(tb testing.TB) []string {
	tb.Helper()
	out := v.Sh(tb, `for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = $$ ] && continue; c=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null); [ -n "$c" ] && printf '%s %s\n' "$p" "$c"; done`)
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		// The listing's own shell, its subshells and the session's sshd.
		if strings.Contains(l, "/proc/[0-9]*") || strings.Contains(l, "sshd:") || strings.Contains(l, "tr \\0") {
			continue
		}
		keep = append(keep, l)
	}
	return keep
}

// settledProcesses lists the VM's processes once two listings a moment
// apart agree: what the previous step left finishing (a package script's
// last child, a session's shell) has ended, so that a check is not blamed
// for it. After a few seconds it takes the last listing.
func (v *VM) settledProcesses(tb testing.TB) []string {
	tb.Helper()
	last := v.processes(tb)
	for range 20 {
		time.Sleep(250 * time.Millisecond)
		now := v.processes(tb)
		if slices.Equal(now, last) {
			return now
		}
		last = now
	}
	return last
}

// CheckThenApply runs module m's check path on the VM with params, proves
// it read-only (the VM's writable layer byte-identical, no process
// started or stopped), then runs the apply and proves the prediction
// exact: the apply changed the VM exactly when the check said it would.
// It returns both for the caller's own assertions.
func CheckThenApply(t *testing.T, v *VM, m module.Module, params map[string]any) (module.Prediction, module.Result, error) {
	t.Helper()
	c, ok := m.(module.Checker)
	if !ok {
		t.Fatalf("%s has no check path", m.Info().ID)
	}
	raw, err := json.Marshal(module.ApplyDefaults(m.Info(), params))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	procs := v.settledProcesses(t)
	before := Snapshot(t, v.UpperDir())
	p, err := c.Check(ctx, module.RunInfo{}, raw, v)
	if err != nil {
		t.Fatalf("check %s %v: %v", m.Info().ID, params, err)
	}
	if d := before.Diff(Snapshot(t, v.UpperDir())); len(d) > 0 {
		t.Fatalf("check %s %v changed the VM's filesystem:\n%s", m.Info().ID, params, strings.Join(d, "\n"))
	}
	if after := v.processes(t); !slices.Equal(procs, after) {
		t.Fatalf("check %s %v started or stopped processes:\nbefore %q\nafter  %q", m.Info().ID, params, procs, after)
	}
	if v.twin != nil {
		p2, err := c.Check(ctx, module.RunInfo{}, raw, v.twin)
		if err != nil {
			t.Fatalf("check %s %v through the executor: %v", m.Info().ID, params, err)
		}
		if d := before.Diff(Snapshot(t, v.UpperDir())); len(d) > 0 {
			t.Fatalf("check %s %v through the executor changed the VM's filesystem:\n%s", m.Info().ID, params, strings.Join(d, "\n"))
		}
		a, _ := json.Marshal(p)
		b, _ := json.Marshal(p2)
		if string(a) != string(b) {
			t.Fatalf("check %s %v: through the shell\n%s\nthrough the executor\n%s", m.Info().ID, params, a, b)
		}
	}
	res, err := m.Run(ctx, module.RunInfo{}, raw, v)
	t.Logf("%s %v: check would_change=%v unknown=%q changes=%v; apply changed=%v err=%v", m.Info().ID, params, p.WouldChange, p.Unknown, p.Changes, res.Changed, err)
	if p.Unknown == "" && err == nil && res.Changed != p.WouldChange {
		t.Fatalf("%s %v: the check said would_change=%v, the apply changed=%v", m.Info().ID, params, p.WouldChange, res.Changed)
	}
	if p.Unknown == "" && !p.WouldChange && p.OutputKnown {
		got, _ := json.Marshal(res.Output)
		want, _ := json.Marshal(p.Output)
		if string(got) != string(want) {
			t.Fatalf("%s %v: the check predicted the output %s, the apply gave %s", m.Info().ID, params, want, got)
		}
	}
	return p, res, err
}
