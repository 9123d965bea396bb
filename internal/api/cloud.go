package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/store"
)

// CloudService finds and removes VMs that crashed creates left behind.
type CloudService interface {
	// Orphans lists the orphaned VMs of provider (every provider when empty).
	Orphans(ctx context.Context, provider string) ([]client.Orphan, error)
	// DestroyOrphans destroys the given VMs after checking each is still an
	// orphan, and audits it.
	DestroyOrphans(ctx context.Context, provider string, vmIDs []string, actor store.Actor) ([]client.Orphan, error)
}

func (s *Server) registerCloud() {
	if s.cloud == nil {
		return
	}
	tags := []string{"cloud"}
	register(s, huma.Operation{
		OperationID: "cloud-orphans", Method: http.MethodGet, Path: "/v1/cloud/orphans", Tags: tags,
		Summary:     "List orphaned VMs",
		Description: "VMs a provider's driver reports with a keeper request tag that no live soul owns — what a crash during core.cloud.created leaves behind.",
		Errors:      []int{http.StatusNotFound, http.StatusBadGateway},
	}, auth.ProviderRead, false, func(ctx context.Context, in *struct {
		Provider string `query:"provider" doc:"Only this provider."`
	}) (*struct{ Body client.OrphanList }, error) {
		items, err := s.cloud.Orphans(ctx, in.Provider)
		if err != nil {
			return nil, err
		}
		return &struct{ Body client.OrphanList }{Body: client.OrphanList{Items: items}}, nil
	})
	register(s, huma.Operation{
		OperationID: "cloud-orphans-destroy", Method: http.MethodPost, Path: "/v1/cloud/orphans/destroy", Tags: tags,
		Summary: "Destroy orphaned VMs", Description: "Each VM must still be an orphan (409 cloud.not_orphan otherwise). Audited as cloud.orphans_destroyed.",
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusBadGateway},
	}, auth.ProviderDelete, false, func(ctx context.Context, in *struct{ Body client.OrphansDestroy }) (*struct{ Body client.OrphanList }, error) {
		if err := checkName("body.provider", in.Body.Provider); err != nil {
			return nil, err
		}
		items, err := s.cloud.DestroyOrphans(ctx, in.Body.Provider, in.Body.VMIDs, principal(ctx).Actor())
		if err != nil {
			return nil, err
		}
		return &struct{ Body client.OrphanList }{Body: client.OrphanList{Items: items}}, nil
	})
}
