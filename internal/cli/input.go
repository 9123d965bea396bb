package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/soulstack/soulstack/client"
)

// This file turns flag values into request fields and follows list
// cursors. Malformed values are usage errors that name the flag.

// jsonObject decodes the value of flag as a JSON object: inline JSON,
// @path to read it from a file, or @- to read it from stdin. An empty value
// is a nil map.
func jsonObject(flag, value string, stdin io.Reader) (map[string]any, error) {
	if value == "" {
		return nil, nil
	}
	data := []byte(value)
	if name, ok := strings.CutPrefix(value, "@"); ok {
		var err error
		if name == "-" {
			data, err = io.ReadAll(stdin)
		} else {
			data, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, usageErrorf("--%s: %v", flag, err)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, usageErrorf("--%s: want a JSON object: %v", flag, err)
	}
	if m == nil {
		return nil, usageErrorf("--%s: want a JSON object, not null", flag)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, usageErrorf("--%s: unexpected data after the JSON object", flag)
	}
	return m, nil
}

// keyValues decodes repeated key=value flags into a map of strings.
func keyValues(flag string, pairs []string) (map[string]any, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]any, len(pairs))
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "":
			return nil, usageErrorf("--%s: want key=value, got %q", flag, kv)
		case m[k] != nil:
			return nil, usageErrorf("--%s: key %q given twice", flag, k)
		}
		m[k] = v
	}
	return m, nil
}

// duration parses a positive Go duration ("90m", "720h"), also accepting a
// whole number of days ("30d").
func duration(flag, value string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(value, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return 0, usageErrorf("--%s: %q is not a duration like 720h or 30d", flag, value)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(value); err != nil {
			return 0, usageErrorf("--%s: %q is not a duration like 720h or 30d", flag, value)
		}
	}
	if d <= 0 {
		return 0, usageErrorf("--%s: must be positive", flag)
	}
	return d, nil
}

// maxPage is the most items the keeper returns in one page.
const maxPage = 1000

// listAll fetches every page of a list, following the next cursors.
func listAll[T any](ctx context.Context, page func(context.Context, client.ListOptions) ([]T, string, error)) ([]T, error) {
	return listUpTo(ctx, 0, page)
}

// listUpTo is listAll stopping at most items (0: all), asking the keeper
// for no more than it needs.
func listUpTo[T any](ctx context.Context, most int, page func(context.Context, client.ListOptions) ([]T, string, error)) ([]T, error) {
	items := []T{}
	var o client.ListOptions
	for {
		if most > 0 {
			o.Limit = min(most-len(items), maxPage)
		}
		got, next, err := page(ctx, o)
		if err != nil {
			return nil, err
		}
		items = append(items, got...)
		if most > 0 && len(items) >= most {
			return items[:most], nil
		}
		if next == "" {
			return items, nil
		}
		if next == o.After {
			return nil, fmt.Errorf("list: the keeper returned the cursor %q twice", next)
		}
		o.After = next
	}
}
