package cli

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/soulstack/soulstack/client"
)

// pagesOf serves items 1..n, at most o.Limit of them a page (perPage
// without one), with the last item's number as the cursor, and records
// the limit each call asked for; stuck repeats its first cursor forever.
func pagesOf(n, perPage int, stuck bool, asked *[]int) func(context.Context, client.ListOptions) ([]int, string, error) {
	return func(_ context.Context, o client.ListOptions) ([]int, string, error) {
		if asked != nil {
			*asked = append(*asked, o.Limit)
		}
		limit := o.Limit
		if limit == 0 {
			limit = perPage
		}
		after := 0
		if o.After != "" {
			after, _ = strconv.Atoi(o.After)
		}
		if stuck && after > 0 {
			return nil, o.After, nil
		}
		var items []int
		for i := after + 1; i <= n && len(items) < limit; i++ {
			items = append(items, i)
		}
		next := ""
		if len(items) > 0 && items[len(items)-1] < n {
			next = strconv.Itoa(items[len(items)-1])
		}
		return items, next, nil
	}
}

func TestListAll(t *testing.T) {
	t.Parallel()
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
			got, err := listAll(context.Background(), pagesOf(tt.n, 2, tt.stuck, nil))
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

func TestListUpTo(t *testing.T) {
	t.Parallel()
	// The keeper's page is 3 items here when no limit is asked for.
	tests := []struct {
		name      string
		n, most   int
		want      []int
		wantAsked []int
	}{
		{name: "all", n: 7, most: 0, want: []int{1, 2, 3, 4, 5, 6, 7}, wantAsked: []int{0, 0, 0}},
		{name: "fewer than there are", n: 7, most: 2, want: []int{1, 2}, wantAsked: []int{2}},
		{name: "more than there are", n: 2, most: 5, want: []int{1, 2}, wantAsked: []int{5}},
		{name: "more than a page", n: 2500, most: 1500, wantAsked: []int{maxPage, 500}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var asked []int
			got, err := listUpTo(context.Background(), tt.most, pagesOf(tt.n, 3, false, &asked))
			if err != nil {
				t.Fatal(err)
			}
			if tt.want != nil && !slices.Equal(got, tt.want) {
				t.Errorf("listUpTo(%d) = %v, want %v", tt.most, got, tt.want)
			}
			if tt.want == nil && (len(got) != tt.most || got[0] != 1 || got[len(got)-1] != tt.most) {
				t.Errorf("listUpTo(%d) = %d items from %d to %d", tt.most, len(got), got[0], got[len(got)-1])
			}
			if !slices.Equal(asked, tt.wantAsked) {
				t.Errorf("listUpTo(%d) asked for pages of %v, want %v", tt.most, asked, tt.wantAsked)
			}
		})
	}
}
