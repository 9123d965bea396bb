package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"text/template"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/itchyny/gojq"
	"github.com/theory/jsonpath"
)

// Output formats: -o table (the default) or json; yaml; jsonpath=EXPR
// (RFC 9535); go-template=TEMPLATE; and --jq EXPR over the JSON form.
const (
	formatTable      = "table"
	formatJSON       = "json"
	formatYAML       = "yaml"
	formatJSONPath   = "jsonpath"
	formatGoTemplate = "go-template"
)

// printer writes the results of commands in the chosen format: as JSON,
// the API's object or list exactly, indented; that JSON as YAML, or
// what a JSONPath, a Go template or a jq expression makes of it; or as
// text for people.
type printer struct {
	w io.Writer
	// json: a structured format (any but table): no tables, no live
	// views, the result as data.
	json bool
	emit func(w io.Writer, v any) error // writes a result in that format
}

// newPrinter makes the printer of -o format and --jq query.
func newPrinter(w io.Writer, format, query string) (*printer, error) {
	name, arg, hasArg := strings.Cut(format, "=")
	if query != "" {
		if format != formatTable && format != formatJSON {
			return nil, usageErrorf("--jq works on the JSON form: give it alone or with -o json, not -o %s", name)
		}
		code, err := compileJQ(query)
		if err != nil {
			return nil, err
		}
		return &printer{w: w, json: true, emit: code}, nil
	}
	if hasArg != (name == formatJSONPath || name == formatGoTemplate) {
		return nil, usageErrorf("-o/--output: %q is not a format (table, json, yaml, jsonpath=EXPR, go-template=TEMPLATE)", format)
	}
	switch name {
	case formatTable:
		return &printer{w: w}, nil
	case formatJSON:
		return &printer{w: w, json: true, emit: writeJSON}, nil
	case formatYAML:
		return &printer{w: w, json: true, emit: writeYAML}, nil
	case formatJSONPath:
		path, err := jsonpath.Parse(arg)
		if err != nil {
			return nil, usageErrorf("-o jsonpath: %v", err)
		}
		return &printer{w: w, json: true, emit: func(w io.Writer, v any) error { return writeJSONPath(w, path, v) }}, nil
	case formatGoTemplate:
		t, err := template.New("go-template").Option("missingkey=error").Funcs(templateFuncs).Parse(arg)
		if err != nil {
			return nil, usageErrorf("-o go-template: %v", err)
		}
		return &printer{w: w, json: true, emit: func(w io.Writer, v any) error { return writeTemplate(w, t, v) }}, nil
	}
	return nil, usageErrorf("-o/--output: %q is not a format (table, json, yaml, jsonpath=EXPR, go-template=TEMPLATE)", format)
}

// view is the text form of a result.
type view interface {
	render(w io.Writer) error
}

// print writes v in the structured format (nothing when v is nil: the
// API answered without a body), and text otherwise.
func (p *printer) print(v any, text view) error {
	if p.json {
		if v == nil {
			return nil
		}
		return p.emit(p.w, v)
	}
	return text.render(p.w)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

// writeYAML writes v's JSON form as YAML, its keys in the JSON's order.
func writeYAML(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err == nil {
		b, err = yaml.JSONToYAML(b)
	}
	if err != nil {
		return fmt.Errorf("write YAML: %w", err)
	}
	_, err = w.Write(b)
	return err
}

// generic is v's JSON form decoded into maps, slices and scalars (numbers
// as json.Number, so that large integers stay exact).
func generic(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var out any
	return out, d.Decode(&out)
}

// writeValue writes one selected value on a line: a string or a number
// as it is, anything else as compact JSON (as kubectl's jsonpath and gh's
// --jq do).
func writeValue(w io.Writer, v any) error {
	switch x := v.(type) {
	case string:
		_, err := fmt.Fprintln(w, x)
		return err
	case json.Number:
		_, err := fmt.Fprintln(w, x.String())
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func writeJSONPath(w io.Writer, path *jsonpath.Path, v any) error {
	g, err := generic(v)
	if err != nil {
		return err
	}
	for _, n := range path.Select(g) {
		if err := writeValue(w, n); err != nil {
			return err
		}
	}
	return nil
}

// templateFuncs are the Go template's functions beyond text/template's:
// json (compact JSON of a value) and join (strings.Join of a list).
var templateFuncs = template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"join": func(sep string, v []any) string {
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = fmt.Sprint(x)
		}
		return strings.Join(parts, sep)
	},
}

func writeTemplate(w io.Writer, t *template.Template, v any) error {
	g, err := generic(v)
	if err != nil {
		return err
	}
	if err := t.Execute(w, g); err != nil {
		return fmt.Errorf("-o go-template: %w", err)
	}
	return nil
}

// compileJQ compiles a --jq expression into the printer's emit: each
// result on a line as writeValue writes it.
func compileJQ(src string) (func(io.Writer, any) error, error) {
	q, err := gojq.Parse(src)
	if err != nil {
		return nil, usageErrorf("--jq: %v", err)
	}
	code, err := gojq.Compile(q)
	if err != nil {
		return nil, usageErrorf("--jq: %v", err)
	}
	return func(w io.Writer, v any) error {
		g, err := generic(v)
		if err != nil {
			return err
		}
		iter := code.Run(jqValue(g))
		for {
			x, ok := iter.Next()
			if !ok {
				return nil
			}
			if err, isErr := x.(error); isErr {
				return fmt.Errorf("--jq: %w", err)
			}
			if err := writeValue(w, x); err != nil {
				return err
			}
		}
	}, nil
}

// jqValue turns json.Numbers into what gojq takes (int, float64 or
// *big.Int: it refuses json.Number).
func jqValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jqValue(e)
		}
	case []any:
		for i, e := range x {
			x[i] = jqValue(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return int(i)
		}
		if f, err := x.Float64(); err == nil {
			return f
		}
		return x.String()
	}
	return v
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
