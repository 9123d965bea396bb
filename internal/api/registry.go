package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/store"
)

// keyInput is the path parameter of a registry object's routes: its name
// (providers, profiles) or its SID (souls).
type keyInput interface {
	nameInput | sidInput
	key() string
}

func (in nameInput) key() string { return in.Name }
func (in sidInput) key() string  { return in.SID }

// itemOutput is a registry object as a route answers it.
type itemOutput[W any] struct {
	Body W
}

// owned says which project owns a registry object and which it is
// shared with.
type owned[R any] func(R) (project string, shared []string)

// registerGet registers the get route of a registry object: get reads it
// by its key, wire turns it into the API's form; not found, and another
// project's object the caller may not see, is a 404.
func registerGet[I keyInput, R, W any](s *Server, op huma.Operation, perm auth.Permission, kind string, get func(context.Context, string) (R, error), owner owned[R], wire func(context.Context, R) W) {
	register(s, op, perm, false, func(ctx context.Context, in *I) (*itemOutput[W], error) {
		r, err := get(ctx, (*in).key())
		if err != nil {
			return nil, err
		}
		if project, shared := owner(r); !sees(ctx, project, shared) {
			return nil, hidden(kind, (*in).key())
		}
		return &itemOutput[W]{Body: wire(ctx, r)}, nil
	})
}

// registerDelete registers the delete route of a registry object: del
// removes it by its key, as the caller, when the caller manages its
// project (another project's object is a 404, a shared one too).
func registerDelete[I keyInput, R any](s *Server, op huma.Operation, perm auth.Permission, kind string, get func(context.Context, string) (R, error), owner owned[R], del func(context.Context, store.DeleteParams) error) {
	register(s, op, perm, false, func(ctx context.Context, in *I) (*struct{}, error) {
		r, err := get(ctx, (*in).key())
		if err != nil {
			return nil, err
		}
		if project, shared := owner(r); !manages(ctx, project) {
			if sees(ctx, project, shared) {
				return nil, problem(http.StatusForbidden, "auth.forbidden", fmt.Sprintf("%s %q is shared with your project to use, not to manage", kind, (*in).key()))
			}
			return nil, hidden(kind, (*in).key())
		}
		return nil, del(ctx, store.DeleteParams{Key: (*in).key(), Actor: principal(ctx).Actor()})
	})
}
