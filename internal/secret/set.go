package secret

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Limits of a run's Set.
const (
	// MinValueLen is the shortest value a Set (or Register) accepts:
	// masking "a" everywhere would destroy output without protecting
	// anything.
	MinValueLen = 6
	// MaxRunValues is how many distinct values one run's Set holds. A run
	// that registers more has its Set overflow: from then on every string
	// its Set masks is replaced whole (see Set.Overflowed).
	MaxRunValues = 1024
	// maxKeeperValues bounds the keeper's own set; past it the oldest
	// value is forgotten (the keeper's credentials are few; rotated ones
	// are the ones that go).
	maxKeeperValues = 4096
)

// Set is the text of the secrets one run has seen — its secret inputs, the
// keys it resolved, the tokens it minted — masked in that run's events,
// outputs, logs and errors and nowhere else. A Set holds at most
// MaxRunValues distinct values of at least MinValueLen bytes; shorter
// values are ignored. A run that adds more values than that makes its Set
// overflow, and an overflowed Set masks every string whole: output is lost,
// but no secret the Set could not hold leaks. A Set is safe for concurrent
// use; the nil *Set masks as the package functions do (token patterns and
// key names only). A Set made by a Keeper (Keeper.NewSet) masks the
// keeper's secrets as well.
type Set struct {
	mu       sync.Mutex
	order    []string                 // values in the order they came
	values   atomic.Pointer[[]string] // longest first; replaced, never changed
	max      int
	evict    bool // at max, forget the oldest value instead of overflowing
	overflow atomic.Bool
	keeper   *Keeper // masked as well; nil: none
}

// NewSet returns an empty Set with the limits of a run.
func NewSet() *Set { return &Set{max: MaxRunValues} }

// Keeper holds the keeper's secrets, which every output channel the
// keeper hands it to masks: its own (its SSH keys, the secrets of its
// configuration) and, apart, the credentials it resolved for projects, so
// that however many a project makes the keeper resolve, they evict only
// each other, never the keeper's own. A run's secrets go to the run's Set
// (NewSet), never here: a value registered here rewrites every answer of
// the keeper. The keeper builds one (System.Secrets); the nil *Keeper
// holds nothing.
type Keeper struct {
	own, projects *Set
}

// NewKeeper returns an empty Keeper.
func NewKeeper() *Keeper {
	return &Keeper{own: &Set{max: maxKeeperValues, evict: true}, projects: &Set{max: maxKeeperValues, evict: true}}
}

// Register records the text of one of the keeper's own secrets (its SSH
// private key, a secret of its configuration). Values shorter than
// MinValueLen are ignored.
func (k *Keeper) Register(value string) {
	if k != nil {
		k.own.Add(value)
	}
}

// RegisterResolved records a credential the keeper resolved for a
// project's provider, masked as Register's values are.
func (k *Keeper) RegisterResolved(value string) {
	if k != nil {
		k.projects.Add(value)
	}
}

// NewSet returns an empty Set with the limits of a run that masks k's
// secrets as well as its own.
func (k *Keeper) NewSet() *Set {
	s := NewSet()
	s.keeper = k
	return s
}

// values are the keeper's secrets, both kinds, longest first.
func (k *Keeper) values() []string {
	if k == nil {
		return nil
	}
	own, p := k.own.snapshot(), k.projects.snapshot()
	switch {
	case len(p) == 0:
		return own
	case len(own) == 0:
		return p
	}
	all := append(append(make([]string, 0, len(own)+len(p)), own...), p...)
	sortLongestFirst(all)
	return slices.Compact(all)
}

// Add records value (see Set); it implements module.Secrets.
func (s *Set) Add(value string) {
	if s == nil || len(value) < MinValueLen {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Contains(s.order, value) {
		return
	}
	if len(s.order) >= s.max {
		if !s.evict {
			s.overflow.Store(true)
			return
		}
		s.order = slices.Delete(s.order, 0, 1)
	}
	s.order = append(s.order, value)
	sorted := slices.Clone(s.order)
	sortLongestFirst(sorted)
	s.values.Store(&sorted)
}

// AddInput adds the text of every string of a run's input that is
// secret: under an input declared secret (declared), or under a
// secret-looking key (IsSensitiveKey) at any depth.
func (s *Set) AddInput(input map[string]any, declared map[string]bool) {
	var walk func(v any, secretHere bool)
	walk = func(v any, secretHere bool) {
		switch x := v.(type) {
		case string:
			if secretHere {
				s.Add(x)
			}
		case map[string]any:
			for k, val := range x {
				walk(val, secretHere || IsSensitiveKey(k))
			}
		case []any:
			for _, val := range x {
				walk(val, secretHere)
			}
		}
	}
	for k, v := range input {
		walk(v, declared[k] || IsSensitiveKey(k))
	}
}

// Values returns a copy of the values s holds, longest first.
func (s *Set) Values() []string {
	return slices.Clone(s.snapshot())
}

// Len is how many values s holds.
func (s *Set) Len() int { return len(s.snapshot()) }

// Overflowed reports whether more than MaxRunValues values were added to
// s: it then masks every string whole.
func (s *Set) Overflowed() bool { return s != nil && s.overflow.Load() }

func (s *Set) snapshot() []string {
	if s == nil {
		return nil
	}
	if p := s.values.Load(); p != nil {
		return *p
	}
	return nil
}

// sortLongestFirst orders values so that a secret containing another is
// replaced whole; equal lengths sort by text, so the order is stable.
func sortLongestFirst(values []string) {
	slices.SortFunc(values, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
}

// masker is what one masking pass replaces: the values of the keeper's
// set and of a run's Set, longest first, and token patterns; redact masks
// every string whole.
type masker struct {
	values []string
	redact bool
}

// masker masks token patterns and k's secrets.
func (k *Keeper) masker() masker { return masker{values: k.values()} }

// masker masks token patterns, the values of s and those of its keeper.
func (s *Set) masker() masker {
	if s == nil {
		return masker{}
	}
	k, own := s.keeper.values(), s.snapshot()
	if len(own) == 0 {
		return masker{values: k, redact: s.Overflowed()}
	}
	if len(k) == 0 {
		return masker{values: own, redact: s.Overflowed()}
	}
	all := make([]string, 0, len(k)+len(own))
	all = append(append(all, k...), own...)
	sortLongestFirst(all)
	return masker{values: slices.Compact(all), redact: s.Overflowed()}
}

// str masks one string value.
func (m masker) str(s string) string {
	if m.redact {
		if s == "" {
			return s
		}
		return Masked
	}
	for _, v := range m.values {
		if strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, Masked)
		}
	}
	return maskTokens(s)
}
