package module

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// registry holds every registered module, by ID.
var registry = struct {
	sync.RWMutex
	byID map[ID]Module
}{byID: map[ID]Module{}}

// Register adds m to the registry under m.Info().ID. Module packages call
// it from init. It panics when the declaration is malformed (an empty or
// invalid ID, an invalid side, a bad param spec) or the ID is already
// registered: these are programming errors that must fail at start.
func Register(m Module) {
	if m == nil {
		panic("module: Register of a nil module")
	}
	info := m.Info()
	if err := checkInfo(info); err != nil {
		panic(fmt.Sprintf("module: Register: %v", err))
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.byID[info.ID]; dup {
		panic(fmt.Sprintf("module: Register called twice for %s", info.ID))
	}
	registry.byID[info.ID] = m
}

// Lookup returns the module registered under id. The error wraps
// ErrInvalidID or ErrUnknown.
func Lookup(id ID) (Module, error) {
	if _, err := ParseID(string(id)); err != nil {
		return nil, err
	}
	registry.RLock()
	m, ok := registry.byID[id]
	registry.RUnlock()
	if !ok {
		return nil, fmt.Errorf("module %s: %w", id, ErrUnknown)
	}
	return m, nil
}

// All returns every registered module, sorted by ID.
func All() []Module {
	registry.RLock()
	defer registry.RUnlock()
	all := make([]Module, 0, len(registry.byID))
	for _, m := range registry.byID {
		all = append(all, m)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Info().ID < all[j].Info().ID })
	return all
}

// IDs returns the IDs of every registered module, sorted.
func IDs() []ID {
	all := All()
	ids := make([]ID, len(all))
	for i, m := range all {
		ids[i] = m.Info().ID
	}
	return ids
}

// permissionPattern is the shape of a permission name (resource.action).
var permissionPattern = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)

// checkInfo reports the first thing wrong with a declaration.
func checkInfo(info Info) error {
	if _, err := ParseID(string(info.ID)); err != nil {
		return err
	}
	if !info.Side.Valid() {
		return fmt.Errorf("%s: side %q is neither %q nor %q", info.ID, info.Side, SideKeeper, SideSoul)
	}
	if info.Summary == "" {
		return fmt.Errorf("%s: empty summary", info.ID)
	}
	if info.Side == SideKeeper && info.Permission == "" {
		return fmt.Errorf("%s: a keeper-side module must declare the permission a run's creator needs for it", info.ID)
	}
	if info.Permission != "" && !permissionPattern.MatchString(info.Permission) {
		return fmt.Errorf("%s: permission %q is not a dotted lowercase name such as cloud.create", info.ID, info.Permission)
	}
	seen := map[string]bool{}
	for _, p := range info.Params {
		if err := checkIdentifier(p.Name); err != nil {
			return fmt.Errorf("%s: param name: %v", info.ID, err)
		}
		if seen[p.Name] {
			return fmt.Errorf("%s: param %q declared twice", info.ID, p.Name)
		}
		seen[p.Name] = true
		if !p.Type.Valid() {
			return fmt.Errorf("%s: param %q has invalid type %q", info.ID, p.Name, p.Type)
		}
		if p.Elem != "" && (!p.Elem.Valid() || (p.Type != TypeList && p.Type != TypeMap)) {
			return fmt.Errorf("%s: param %q: elem %q needs a valid type on a list or map", info.ID, p.Name, p.Elem)
		}
		if p.Required && p.Default != nil {
			return fmt.Errorf("%s: param %q is required and has a default", info.ID, p.Name)
		}
		if p.Default != nil {
			if err := p.Type.Check(p.Default, p.Elem); err != nil {
				return fmt.Errorf("%s: param %q default: %v", info.ID, p.Name, err)
			}
		}
		if len(p.Enum) > 0 && p.Type != TypeString {
			return fmt.Errorf("%s: param %q: enum needs type string", info.ID, p.Name)
		}
	}
	for _, g := range info.Exclusive {
		if len(g.Params) < 2 {
			return fmt.Errorf("%s: exclusive group %v needs at least two params", info.ID, g.Params)
		}
		for _, name := range g.Params {
			if !seen[name] {
				return fmt.Errorf("%s: exclusive group names undeclared param %q", info.ID, name)
			}
		}
	}
	return nil
}

// Family is a module's page across its states (core.cloud for
// core.cloud.created, .destroyed and .resized): a name of two segments,
// namespace.module, with a summary and a description.
type Family struct {
	Name        string `json:"name"`
	Summary     string `json:"summary"`
	Description string `json:"description,omitempty"`
}

var (
	familiesMu sync.RWMutex
	families   = map[string]Family{}
)

// RegisterFamily records a family's page; its states register as modules.
func RegisterFamily(f Family) {
	familiesMu.Lock()
	defer familiesMu.Unlock()
	if parts := strings.Split(f.Name, "."); len(parts) != 2 || checkIdentifier(parts[0]) != nil || checkIdentifier(parts[1]) != nil {
		panic(fmt.Sprintf("module: family name %q is not namespace.module", f.Name))
	}
	families[f.Name] = f
}

// LookupFamily returns the family name and its registered states, in ID
// order; ok is false when no module of that family is registered.
func LookupFamily(name string) (Family, []Info, bool) {
	var states []Info
	for _, m := range All() {
		if info := m.Info(); strings.HasPrefix(string(info.ID), name+".") {
			states = append(states, info)
		}
	}
	if len(states) == 0 {
		return Family{}, nil, false
	}
	familiesMu.RLock()
	f, ok := families[name]
	familiesMu.RUnlock()
	if !ok {
		f = Family{Name: name, Summary: states[0].Summary}
	}
	return f, states, true
}
