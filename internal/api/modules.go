package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/module"
	"github.com/soulstack/soulstack/internal/secret"

	// The catalog is always the complete standard set, whoever builds the
	// API.
	_ "github.com/soulstack/soulstack/internal/modules/standard"
)

// moduleWire is the catalog entry of a module declaration. The default of a
// secret param is masked: the catalog is served without key-name masking
// (see client.Module.RevealsSecret).
func moduleWire(info module.Info) client.Module {
	out := client.Module{
		ID: string(info.ID), Summary: info.Summary, Description: info.Description, Side: string(info.Side),
		Idempotent: info.Idempotent, NeedsRoot: info.NeedsRoot, Permission: info.Permission,
		Params: make([]client.ModuleParam, 0, len(info.Params)), Output: make([]client.ModuleField, 0, len(info.Output)),
		ChangesWhen: info.ChangesWhen, UnchangedWhen: info.UnchangedWhen, CheckMode: info.CheckMode, Example: info.Example, Notes: info.Notes,
		Collection: info.Collection, Category: info.Category,
	}
	for _, p := range info.Params {
		wp := client.ModuleParam{
			Name: p.Name, Type: string(p.Type), Elem: string(p.Elem), Required: p.Required,
			DefaultDoc: p.DefaultDoc, Enum: p.Enum, Secret: p.Secret, Doc: p.Doc,
		}
		if p.Default != nil {
			var def any = p.Default
			if p.Secret {
				def = secret.Masked
			}
			b, err := json.Marshal(def)
			if err != nil {
				b, _ = json.Marshal(fmt.Sprint(def))
			}
			wp.Default = b
		}
		out.Params = append(out.Params, wp)
	}
	for _, g := range info.Exclusive {
		out.Exclusive = append(out.Exclusive, client.ModuleGroup{Params: g.Params, Required: g.Required})
	}
	for _, f := range info.Output {
		out.Output = append(out.Output, client.ModuleField{Name: f.Name, Type: f.Type, Doc: f.Doc})
	}
	return out
}

func (s *Server) registerModules() {
	tags := []string{"modules"}
	register(s, huma.Operation{
		OperationID: "module-list", Method: http.MethodGet, Path: "/v1/modules", Tags: tags,
		Summary:     "List the module catalog, sorted by ID",
		Description: "Every module state the keeper can run, with its params and output. Any valid token may read it.",
	}, auth.Authenticated, false, func(_ context.Context, in *struct{ ListInput }) (*struct{ Body client.ModuleList }, error) {
		all, next := pageOf(module.All(), &in.ListInput, func(m module.Module) string { return string(m.Info().ID) })
		out := &struct{ Body client.ModuleList }{Body: client.ModuleList{Items: make([]client.Module, 0, len(all)), Next: next}}
		for _, m := range all {
			out.Body.Items = append(out.Body.Items, moduleWire(m.Info()))
		}
		return out, nil
	})

	register(s, huma.Operation{
		OperationID: "module-get", Method: http.MethodGet, Path: "/v1/modules/{id}", Tags: tags,
		Summary:     "Get one module state of the catalog",
		Description: "404 module.not_found for an unknown ID; 422 module.id_invalid for an ID that is not namespace.module.state.",
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.Authenticated, false, func(_ context.Context, in *struct {
		ID string `path:"id" doc:"The module ID, namespace.module.state (e.g. core.command.ran)."`
	}) (*struct{ Body client.Module }, error) {
		m, err := module.Lookup(module.ID(in.ID))
		switch {
		case errors.Is(err, module.ErrInvalidID):
			return nil, invalid("module.id_invalid", "path.id", "%v", err)
		case errors.Is(err, module.ErrUnknown):
			return nil, problem(http.StatusNotFound, "module.not_found", fmt.Sprintf("module %q does not exist; GET /v1/modules lists the catalog", in.ID))
		case err != nil:
			return nil, err
		}
		return &struct{ Body client.Module }{Body: moduleWire(m.Info())}, nil
	})

	register(s, huma.Operation{
		OperationID: "module-family-get", Method: http.MethodGet, Path: "/v1/modules/families/{name}", Tags: tags,
		Summary:     "Get a module's catalog page across its states",
		Description: "The family's summary, description, collection and category, and each of its states (core.cloud: created, destroyed, resized). 404 module.not_found when no state of that family exists.",
		Errors:      []int{http.StatusNotFound},
	}, auth.Authenticated, false, func(_ context.Context, in *struct {
		Name string `path:"name" maxLength:"127" doc:"The family, namespace.module (e.g. core.cloud)."`
	}) (*struct{ Body client.ModuleFamily }, error) {
		f, states, ok := module.LookupFamily(in.Name)
		if !ok {
			return nil, problem(http.StatusNotFound, "module.not_found", fmt.Sprintf("no module state is named %s.*; GET /v1/modules lists the catalog", in.Name))
		}
		out := client.ModuleFamily{Name: f.Name, Summary: f.Summary, Description: f.Description, States: make([]client.Module, 0, len(states))}
		for _, st := range states {
			out.States = append(out.States, moduleWire(st))
		}
		out.Collection, out.Category = states[0].Collection, states[0].Category
		return &struct{ Body client.ModuleFamily }{Body: out}, nil
	})
}
