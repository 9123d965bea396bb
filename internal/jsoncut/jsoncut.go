// Package jsoncut bounds JSON values in size while keeping their shape:
// the longest strings are cut, each ending with a marker saying how much
// was dropped, so that a cut value is still valid JSON of the same shape
// (stdout is still a string) and says that it was cut.
package jsoncut

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"unicode/utf8"
)

// Marker is how a cut string ends: "…[truncated: N bytes dropped]".
const Marker = "…[truncated: %d bytes dropped]"

// markerRoom is the bytes a marker takes at most.
const markerRoom = len("…[truncated:  bytes dropped]") + 20

// Cut is a value cut to size: the value (the original when it fit), its
// JSON encoding, the size of the original's encoding, and whether it was
// cut.
type Cut struct {
	Value any
	JSON  json.RawMessage
	Bytes int
	Cut   bool
}

// Value bounds v's JSON encoding to max bytes. A value whose structure
// alone (its keys, numbers and short strings) is over max becomes
// {"truncated": true, "bytes": N}.
func Value(v any, max int) Cut {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte("null")
		v = nil
	}
	if len(b) <= max {
		return Cut{Value: v, JSON: b, Bytes: len(b)}
	}
	return cut(b, max)
}

// Raw bounds raw to max bytes, as Value does.
func Raw(raw json.RawMessage, max int) Cut {
	if len(raw) <= max {
		return Cut{JSON: raw, Bytes: len(raw)}
	}
	return cut(raw, max)
}

func cut(b []byte, max int) Cut {
	size := len(b)
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return gone(size)
	}
	budget := max
	for range 4 {
		var lens []int
		walk(v, func(s string) string { lens = append(lens, len(s)); return s })
		limit, ok := fit(lens, size, budget)
		if !ok {
			break
		}
		cv := walk(deepCopy(v), func(s string) string { return shorten(s, limit) })
		out, err := json.Marshal(cv)
		if err != nil {
			break
		}
		if len(out) <= max {
			return Cut{Value: cv, JSON: out, Bytes: size, Cut: true}
		}
		budget -= len(out) - max // escaping took more than counted
	}
	return gone(size)
}

// gone is the value that replaces one that cannot be cut to size.
func gone(size int) Cut {
	v := map[string]any{"truncated": true, "bytes": size}
	b, _ := json.Marshal(v)
	return Cut{Value: v, JSON: b, Bytes: size, Cut: true}
}

// fit finds the longest string length limit such that cutting every
// string longer than it brings the encoding (size bytes now, lens its
// strings' lengths) to max, or reports that no limit does.
func fit(lens []int, size, max int) (int, bool) {
	sorted := append([]int(nil), lens...)
	sort.Sort(sort.Reverse(sort.IntSlice(sorted)))
	after := func(limit int) int {
		n := size
		for _, l := range sorted {
			if l <= limit {
				break
			}
			n -= l - limit - markerRoom
		}
		return n
	}
	lo, hi := 0, 0
	if len(sorted) > 0 {
		hi = sorted[0]
	}
	if after(lo) > max {
		return 0, false
	}
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if after(mid) <= max {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, true
}

// String cuts s to at most max bytes, marker included, at a rune
// boundary; a string that fits is returned as it is.
func String(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	return shorten(s, max(limit-markerRoom, 0))
}

// shorten cuts s to at most limit bytes (at a rune boundary) and appends
// the marker, when it is longer.
func shorten(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	keep := limit
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + fmt.Sprintf(Marker, len(s)-keep)
}

// walk replaces every string of v (map values and keys' values, array
// items) by f's result, in place, and returns v.
func walk(v any, f func(string) string) any {
	switch t := v.(type) {
	case string:
		return f(t)
	case map[string]any:
		for k, x := range t {
			t[k] = walk(x, f)
		}
	case []any:
		for i, x := range t {
			t[i] = walk(x, f)
		}
	}
	return v
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, x := range t {
			s[i] = deepCopy(x)
		}
		return s
	}
	return v
}
