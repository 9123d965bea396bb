package module

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"github.com/pmezard/go-difflib/difflib"
)

// UnifiedDiff returns a unified diff (three lines of context) from old to
// new of the file at path, as diff -u prints it; existed false diffs from
// /dev/null. ok is false when either side is not text (not UTF-8, or
// holds NUL bytes), which has no useful diff.
func UnifiedDiff(path string, old, new []byte, existed bool) (diff string, ok bool) {
	for _, b := range [][]byte{old, new} {
		if !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
			return "", false
		}
	}
	from := "a" + path
	if !existed {
		from = "/dev/null"
	}
	d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(old), B: lines(new),
		FromFile: from, ToFile: "b" + path, Context: 3,
	})
	if err != nil {
		return "", false
	}
	return d, true
}

// lines splits text into lines that keep their newlines; empty text has
// none. A last line without a newline gets one, followed by diff's "\ No
// newline at end of file" marker line, so that adding or removing a final
// newline shows in the diff.
func lines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	l := strings.SplitAfter(string(b), "\n")
	if l[len(l)-1] == "" {
		return l[:len(l)-1]
	}
	l[len(l)-1] += "\n"
	return append(l, "\\ No newline at end of file\n")
}
