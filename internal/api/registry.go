package api

import (
	"context"

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

// registerGet registers the get route of a registry object: get reads it
// by its key, wire turns it into the API's form; not found is a 404.
func registerGet[I keyInput, R, W any](s *Server, op huma.Operation, perm auth.Permission, get func(context.Context, string) (R, error), wire func(R) W) {
	register(s, op, perm, false, func(ctx context.Context, in *I) (*itemOutput[W], error) {
		r, err := get(ctx, (*in).key())
		if err != nil {
			return nil, err
		}
		return &itemOutput[W]{Body: wire(r)}, nil
	})
}

// registerDelete registers the delete route of a registry object: del
// removes it by its key, as the caller.
func registerDelete[I keyInput](s *Server, op huma.Operation, perm auth.Permission, del func(context.Context, store.DeleteParams) error) {
	register(s, op, perm, false, func(ctx context.Context, in *I) (*struct{}, error) {
		return nil, del(ctx, store.DeleteParams{Key: (*in).key(), Actor: principal(ctx).Actor()})
	})
}
