package config

import (
	"fmt"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// Duration is a Go duration in keeper.yml ("30s", "2m", "1h"), decoded
// once when the file is read: a malformed one fails Load with its line,
// and the keeper's parts get a time.Duration (Std), never a string to
// parse. Zero means unset until WithDefaults fills it in.
type Duration time.Duration

// Std is d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String is d as keeper.yml writes it.
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalText decodes a Go duration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration such as 30s, 5m or 1h", b)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalYAML decodes a Go duration from keeper.yml; a malformed one is
// an error with its line and column.
func (d *Duration) UnmarshalYAML(node ast.Node) error {
	tk := node.GetToken()
	if err := d.UnmarshalText([]byte(tk.Value)); err != nil {
		return fmt.Errorf("[%d:%d] %w", tk.Position.Line, tk.Position.Column, err)
	}
	return nil
}

// MarshalText encodes d as a Go duration.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// positive reports a duration field that is not above zero (or below
// least), naming the field and an example.
func positive(field string, d, least Duration, example string) error {
	if d <= 0 || d < least {
		if least > 0 {
			return fmt.Errorf("%s: %s is not a duration of at least %s such as %s", field, d, least, example)
		}
		return fmt.Errorf("%s: %s is not a positive duration such as %s", field, d, example)
	}
	return nil
}

// orDefault sets *d to def when it is unset.
func orDefault(d *Duration, def time.Duration) {
	if *d == 0 {
		*d = Duration(def)
	}
}
