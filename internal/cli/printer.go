package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Output formats.
const (
	formatTable = "table"
	formatJSON  = "json"
)

// printer writes the results of commands in the chosen format: as JSON,
// the API's object or list exactly, indented; or as text for people.
type printer struct {
	w    io.Writer
	json bool
}

func newPrinter(w io.Writer, format string) (*printer, error) {
	switch format {
	case formatTable:
		return &printer{w: w}, nil
	case formatJSON:
		return &printer{w: w, json: true}, nil
	}
	return nil, usageErrorf("-o/--output: %q is not %s or %s", format, formatTable, formatJSON)
}

// view is the text form of a result.
type view interface {
	render(w io.Writer) error
}

// print writes v as JSON in JSON mode (nothing when v is nil: the API
// answered without a body), and text otherwise.
func (p *printer) print(v any, text view) error {
	if p.json {
		if v == nil {
			return nil
		}
		enc := json.NewEncoder(p.w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("write JSON: %w", err)
		}
		return nil
	}
	return text.render(p.w)
}

// table is a list: a header row and one row per item, in aligned columns.
type table struct {
	header []string
	rows   [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) render(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.header, "\t"))
	for _, row := range t.rows {
		cells := make([]string, len(row))
		for i, c := range row {
			cells[i] = cell(c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// record is one object: a label and a value per line.
type record [][2]string

func (r record) render(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	for _, f := range r {
		fmt.Fprintf(tw, "%s:\t%s\n", f[0], cell(f[1]))
	}
	return tw.Flush()
}

// text is a message for people, printed as is.
type text string

func (t text) render(w io.Writer) error {
	_, err := io.WriteString(w, string(t))
	return err
}

// cell makes a value fit in one aligned cell: "-" when empty, no tabs or
// line breaks.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.NewReplacer("\t", " ", "\r", " ", "\n", " ").Replace(s)
}

// timestamp formats a time for tables: UTC, to the second.
func timestamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// compactJSON shows a JSON document on one line; "{}" and null show as
// empty.
func compactJSON(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	if s := b.String(); s != "{}" && s != "null" {
		return s
	}
	return ""
}
