package api

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/runner"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/seeding"
	"github.com/soulstack/soulstack/internal/store"
)

// seedWire is a seed as answers show it: the inputs its scenario declares
// secret masked (those under secret-looking keys the answer's own masking
// takes care of).
func seedWire(sd store.SoulSeed) client.Seed {
	in := map[string]any{}
	_ = json.Unmarshal(sd.Input, &in)
	for _, name := range sd.Secret {
		if v, ok := in[name]; ok && v != nil {
			in[name] = secret.Masked
		}
	}
	remediate := sd.Remediate
	if remediate == "" {
		remediate = store.SeedRemediateManual
	}
	out := client.Seed{ID: sd.ID, SID: sd.SID, Scenario: sd.Scenario, Input: in, SealedInputs: orNone(sd.Secret), Status: sd.Status, CreatedBy: sd.CreatedBy, CreatedAt: sd.CreatedAt,
		Remediate: remediate}
	if sd.DriftEvery > 0 {
		out.DriftEvery = sd.DriftEvery.String()
	}
	return out
}

func orNone(names []string) []string {
	if names == nil {
		return []string{}
	}
	return names
}

func (s *Server) registerSeeds() {
	s.registerSeedList()
	tags := []string{"souls"}
	register(s, huma.Operation{
		OperationID: "seed-add", Method: http.MethodPost, Path: "/v1/souls/{sid}/seeds", Tags: tags,
		Summary: "Add a seed to a soul",
		Description: "The scenario is checked with the seed's input plus sid (422 seed.scenario_invalid lists every problem). " +
			"A seed runs as its creator, so the caller needs run.create (and the permission each keeper-side step declares) besides soul.create. " +
			"It runs, created by the caller, when the soul joins; on a soul that has joined already it runs at once. " +
			"Audit seed.added.",
		DefaultStatus: http.StatusCreated,
		Errors:        []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.SoulCreate, false, func(ctx context.Context, in *struct {
		SID  string `path:"sid" doc:"The soul's id."`
		Body client.SeedCreate
	}) (*struct{ Body client.Seed }, error) {
		so, err := s.soulOf(ctx, in.SID)
		if err != nil {
			return nil, err
		}
		if _, ok := in.Body.Input["sid"]; ok {
			return nil, invalid("seed.input_invalid", "body.input.sid", "is set by the keeper to the soul's SID; leave it out")
		}
		if in.Body.Scenario == "" {
			return nil, invalid("seed.scenario_invalid", "body.scenario", "must not be empty")
		}
		// A seed runs as its creator: adding one is starting a run later.
		caller := principal(ctx)
		if err := caller.Require(auth.RunCreate); err != nil {
			return nil, err
		}
		checked, err := s.checkSeed(so.Project, in.SID, in.Body.Scenario, in.Body.Input)
		if err != nil {
			return nil, err
		}
		if err := requireStepPermissions(caller, checked.Needs); err != nil {
			return nil, err
		}
		input := objectJSON(in.Body.Input)
		actor := caller.Actor()
		seed := store.SoulSeed{SID: in.SID, Scenario: in.Body.Scenario, Input: input, Secret: secretNames(checked.Secret), CreatedBy: string(actor), Remediate: in.Body.Remediate}
		if e := in.Body.DriftEvery; e != "" {
			d, err := time.ParseDuration(e)
			if err != nil || d < 30*time.Second {
				return nil, invalid("seed.drift_every_invalid", "body.drift_every", "%q is not a duration of at least 30s (e.g. 15m)", e)
			}
			seed.DriftEvery = d
		}
		sd, err := s.soulStore.SeedAdd(ctx, store.SeedAddParams{Seed: seed, Actor: actor})
		if err != nil {
			return nil, err
		}
		out := seedWire(sd)
		if so.JoinedAt != nil && so.Status == store.SoulActive && s.seeds != nil {
			run, err := s.seeds.Apply(context.WithoutCancel(ctx), sd)
			if err != nil {
				return nil, err
			}
			out.RunID = run.ID
		}
		return &struct{ Body client.Seed }{Body: out}, nil
	})
}

// registerSeedApply registers POST /v1/souls/{sid}/seeds/{id}/apply.
func (s *Server) registerSeedApply() {
	if s.seeds == nil {
		return
	}
	register(s, huma.Operation{
		OperationID: "seed-apply", Method: http.MethodPost, Path: "/v1/souls/{sid}/seeds/{id}/apply", Tags: []string{"souls"},
		Summary: "Apply a seed now",
		Description: "Runs the seed as its creator under its own run key (seed:SID:ID), as a join does: the run started, or the one the key " +
			"names already. A hand-registered soul never joins: this is how its seeds are applied. Clients' runs cannot take a seed's key " +
			"(422 run.key_reserved). Needs run.create.",
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.RunCreate, false, func(ctx context.Context, in *struct {
		SID string `path:"sid" doc:"The soul's id."`
		ID  int64  `path:"id" doc:"The seed's id."`
	}) (*runOutput, error) {
		if _, err := s.soulOf(ctx, in.SID); err != nil {
			return nil, err
		}
		seeds, err := s.soulStore.Seeds(ctx, in.SID)
		if err != nil {
			return nil, err
		}
		for _, sd := range seeds {
			if sd.ID != in.ID || sd.Status != store.SeedActive {
				continue
			}
			run, err := s.seeds.Apply(context.WithoutCancel(ctx), sd)
			if err != nil {
				return nil, invalid("seed.not_runnable", "path.id", "%v", err)
			}
			w, err := s.runWire(ctx, run, false)
			if err != nil {
				return nil, err
			}
			return &runOutput{Body: w}, nil
		}
		return nil, hidden("seed", fmt.Sprintf("%s/%d", in.SID, in.ID))
	})
}

// soulOf reads soul sid for the caller: another project's soul is a 404.
func (s *Server) soulOf(ctx context.Context, sid string) (store.Soul, error) {
	so, err := s.soulStore.SoulGet(ctx, sid)
	if err != nil {
		return store.Soul{}, err
	}
	if !sees(ctx, so.Project, nil) {
		return store.Soul{}, hidden("soul", sid)
	}
	return so, nil
}

// secretNames lists the names set holds, sorted.
func secretNames(set map[string]bool) []string {
	names := make([]string, 0, len(set))
	for k, yes := range set {
		if yes {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return names
}

// checkSeed validates a seed's scenario with its input plus sid: the
// permissions its steps need and the inputs it declares secret.
func (s *Server) checkSeed(project, sid, text string, input map[string]any) (runner.Checked, error) {
	if s.check == nil {
		return runner.Checked{}, nil
	}
	in, _ := seeding.Input(objectJSON(input), sid)
	checked, problems := s.check(project, "seed.yaml", text, in)
	if len(problems) == 0 {
		return checked, nil
	}
	detail := fmt.Sprintf("the seed's scenario has %d problem(s); nothing was stored", len(problems))
	if len(problems) == 1 {
		detail = problems[0].Location + ": " + problems[0].Message
	}
	return runner.Checked{}, problem(http.StatusUnprocessableEntity, "seed.scenario_invalid", detail, problems...)
}

// seedKey pages a soul's seeds by id (zero-padded, so that the text
// order is the numeric one).
func seedKey(sd store.SoulSeed) string { return fmt.Sprintf("%020d", sd.ID) }

// registerSeedList registers GET /v1/souls/{sid}/seeds.
func (s *Server) registerSeedList() {
	tags := []string{"souls"}
	register(s, huma.Operation{
		OperationID: "seed-list", Method: http.MethodGet, Path: "/v1/souls/{sid}/seeds", Tags: tags,
		Summary: "List a soul's seeds", Errors: []int{http.StatusNotFound},
	}, auth.SoulRead, false, func(ctx context.Context, in *struct {
		SID string `path:"sid" doc:"The soul's id."`
		ListInput
	}) (*struct{ Body client.SeedList }, error) {
		if _, err := s.soulOf(ctx, in.SID); err != nil {
			return nil, err
		}
		seeds, err := s.soulStore.Seeds(ctx, in.SID)
		if err != nil {
			return nil, err
		}
		slices.SortFunc(seeds, func(a, b store.SoulSeed) int { return cmp.Compare(a.ID, b.ID) })
		seeds, next := pageOf(seeds, &in.ListInput, seedKey)
		out := &struct{ Body client.SeedList }{Body: client.SeedList{Items: make([]client.Seed, 0, len(seeds)), Next: next}}
		for _, sd := range seeds {
			out.Body.Items = append(out.Body.Items, seedWire(sd))
		}
		return out, nil
	})
}
