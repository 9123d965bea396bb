package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

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
	// CloudDrift compares the VMs each provider's driver lists (every
	// provider when empty) with the souls the registry holds for them; of
	// project's providers and souls alone when project is set.
	CloudDrift(ctx context.Context, provider, project string) ([]client.CloudDrift, error)
}

// Errors a CloudService returns, which errors.go maps to problems; a
// provider that does not exist is the store's own not-found error.
var (
	// ErrNotListable: the provider's driver cannot list its VMs (422
	// cloud.not_listable).
	ErrNotListable = errors.New("the driver cannot list its VMs")
	// ErrNotOrphan: a VM to destroy is not an orphan (409
	// cloud.not_orphan); nothing was destroyed.
	ErrNotOrphan = errors.New("not an orphan")
)

// DriverError is a provider's driver failing a call (502, with the
// driver's own code, or driver.failed), or its credentials not resolving
// (502 provider.credentials_unavailable, Ref set).
type DriverError struct {
	Provider string
	// Ref is the credentials reference that did not resolve; empty for a
	// failure of the driver itself.
	Ref string
	Err error
}

func (e *DriverError) Error() string {
	if e.Ref != "" {
		return fmt.Sprintf("credentials of provider %q (%s): %v", e.Provider, e.Ref, e.Err)
	}
	return fmt.Sprintf("provider %q: %v", e.Provider, e.Err)
}

func (e *DriverError) Unwrap() error { return e.Err }

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
		ListInput
	}) (*struct{ Body client.OrphanList }, error) {
		if err := s.ownsProvider(ctx, in.Provider, "query.provider"); err != nil {
			return nil, err
		}
		items, err := s.cloud.Orphans(ctx, in.Provider)
		if err != nil {
			return nil, err
		}
		key := func(o client.Orphan) string { return o.Provider + "/" + o.VMID }
		slices.SortFunc(items, func(a, b client.Orphan) int { return strings.Compare(key(a), key(b)) })
		items, next := pageOf(items, &in.ListInput, key)
		return &struct{ Body client.OrphanList }{Body: client.OrphanList{Items: items, Next: next}}, nil
	})
	register(s, huma.Operation{
		OperationID: "cloud-orphans-destroy", Method: http.MethodPost, Path: "/v1/cloud/orphans/destroy", Tags: tags,
		Summary: "Destroy orphaned VMs", Description: "Each VM must still be an orphan (409 cloud.not_orphan otherwise). Audited as cloud.orphans_destroyed.",
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusBadGateway},
	}, auth.ProviderDelete, false, func(ctx context.Context, in *struct{ Body client.OrphansDestroy }) (*struct{ Body client.OrphanList }, error) {
		if err := checkName("body.provider", in.Body.Provider); err != nil {
			return nil, err
		}
		if err := s.ownsProvider(ctx, in.Body.Provider, "body.provider"); err != nil {
			return nil, err
		}
		p, err := s.registry.ProviderGet(ctx, in.Body.Provider)
		if err != nil {
			return nil, err
		}
		if err := s.destroyHeld(ctx, p.Project, p.Name, in.Body.VMIDs, "destroying orphans of provider "+p.Name); err != nil {
			return nil, err
		}
		items, err := s.cloud.DestroyOrphans(ctx, in.Body.Provider, in.Body.VMIDs, principal(ctx).Actor())
		if err != nil {
			return nil, err
		}
		return &struct{ Body client.OrphanList }{Body: client.OrphanList{Items: items}}, nil
	})
}

// ownsProvider lets a project's caller at the orphans of its own
// providers alone: it must name one (every provider's orphans are the
// keeper's), and it must manage it (providerManaged).
func (s *Server) ownsProvider(ctx context.Context, name, location string) error {
	if principal(ctx).KeeperWide() {
		return nil
	}
	if name == "" {
		return invalid("cloud.provider_required", location, "a project's token lists the orphans of one of its providers: name it")
	}
	return s.providerManaged(ctx, name)
}

// providerManaged is nil when the caller manages provider name, the one
// kind of caller that answers for its VMs: another project's provider is
// a 404, one shared with the caller's project to use a 403.
func (s *Server) providerManaged(ctx context.Context, name string) error {
	p, err := s.registry.ProviderGet(ctx, name)
	if err != nil {
		return err
	}
	if !manages(ctx, p.Project) {
		if sees(ctx, p.Project, p.SharedWith) {
			return problem(http.StatusForbidden, "auth.forbidden", fmt.Sprintf("provider %q is shared with your project to use, not to answer for its VMs", name))
		}
		return hidden("provider", name)
	}
	return nil
}
