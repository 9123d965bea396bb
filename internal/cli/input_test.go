package cli

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/soulstack/soulstack/client"
)

func TestListAll(t *testing.T) {
	t.Parallel()
	// pages serves items 1..n, two at a time, with the last item's number
	// as the cursor; stuck repeats its first cursor forever.
	pages := func(n int, stuck bool) func(context.Context, client.ListOptions) ([]int, string, error) {
		return func(_ context.Context, o client.ListOptions) ([]int, string, error) {
			after := 0
			if o.After != "" {
				after, _ = strconv.Atoi(o.After)
			}
			if stuck && after > 0 {
				return nil, o.After, nil
			}
			var items []int
			for i := after + 1; i <= n && len(items) < 2; i++ {
				items = append(items, i)
			}
			next := ""
			if len(items) > 0 && items[len(items)-1] < n {
				next = strconv.Itoa(items[len(items)-1])
			}
			return items, next, nil
		}
	}
	tests := []struct {
		name    string
		n       int
		stuck   bool
		want    []int
		wantErr bool
	}{
		{name: "empty", n: 0, want: []int{}},
		{name: "one page", n: 2, want: []int{1, 2}},
		{name: "several pages", n: 5, want: []int{1, 2, 3, 4, 5}},
		{name: "cursor does not advance", n: 5, stuck: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := listAll(context.Background(), pages(tt.n, tt.stuck))
			if (err != nil) != tt.wantErr {
				t.Fatalf("listAll() error = %v, want error: %v", err, tt.wantErr)
			}
			if !tt.wantErr && (got == nil || !slices.Equal(got, tt.want)) {
				t.Errorf("listAll() = %#v, want %#v", got, tt.want)
			}
		})
	}

	t.Run("error", func(t *testing.T) {
		t.Parallel()
		boom := errors.New("boom")
		_, err := listAll(context.Background(), func(context.Context, client.ListOptions) ([]int, string, error) {
			return nil, "", boom
		})
		if !errors.Is(err, boom) {
			t.Errorf("listAll() error = %v, want %v", err, boom)
		}
	})
}
