// Package promtest reads metric values in tests: from a registry, or from
// a text exposition as /metrics serves it.
package promtest

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// Value is the value of series (as the text format writes it: name and
// sorted labels, e.g. `x_total{a="1",b="2"}`) in exposition; -1 when it
// is absent.
func Value(exposition, series string) float64 {
	for _, l := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// Gathered is the value of series in reg (Value of its exposition).
func Gathered(t testing.TB, reg *prometheus.Registry, series string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return Value(b.String(), series)
}
