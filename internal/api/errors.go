package api

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/access"
	"github.com/soulstack/soulstack/internal/auth"
	"github.com/soulstack/soulstack/internal/secret"
	"github.com/soulstack/soulstack/internal/store"
)

// This file is the one place where errors become HTTP problems: domain and
// store errors from handlers (problemFor), and the framework's own request
// errors, which this API's frameworkErrors transformer turns into problems
// (huma's process-wide huma.NewError is left as it is: two APIs in one
// process do not configure each other).

// frameworkErrors is the API's first transformer: the error models huma
// writes for requests it refuses before a handler runs become problems
// with a stable code. The status stays the one huma chose.
func frameworkErrors(_ huma.Context, _ string, v any) (any, error) {
	m, ok := v.(*huma.ErrorModel)
	if !ok {
		return v, nil
	}
	errs := make([]error, len(m.Errors))
	for i, d := range m.Errors {
		errs[i] = d
	}
	return newFrameworkError(m.Status, m.Detail, errs...), nil
}

// problemSchemas makes the OpenAPI document say what the API answers:
// huma documents every operation's errors with the schema of its
// process-wide error constructor, which this API leaves as it is; once the
// routes are registered, each of those answers is declared a problem
// document instead, and the constructor's schemas leave the document.
func (s *Server) problemSchemas() {
	reg := s.api.OpenAPI().Components.Schemas
	schemas := reg.Map()
	problem := reg.Schema(reflect.TypeFor[client.Problem](), true, "Problem")
	ct := (&client.Problem{}).ContentType("application/json")
	for _, item := range s.api.OpenAPI().Paths {
		for _, op := range []*huma.Operation{item.Get, item.Put, item.Post, item.Delete, item.Options, item.Head, item.Patch, item.Trace} {
			if op == nil {
				continue
			}
			for _, r := range op.Responses {
				if m := r.Content[ct]; m != nil && m.Schema != nil && m.Schema.Ref == "#/components/schemas/ErrorModel" {
					m.Schema = problem
				}
			}
		}
	}
	delete(schemas, "ErrorModel")
	delete(schemas, "ErrorDetail")
}

func problem(status int, code, detail string, errs ...client.ProblemError) *client.Problem {
	return &client.Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Code: code, Detail: detail, Errors: errs}
}

// invalid is a semantic validation failure of one input field.
func invalid(code, location, format string, args ...any) *client.Problem {
	msg := fmt.Sprintf(format, args...)
	return problem(http.StatusUnprocessableEntity, code, msg, client.ProblemError{Location: location, Message: msg})
}

// newFrameworkError builds the problem for errors huma detects before a
// handler runs: unreadable JSON, schema violations, oversized bodies. The
// submitted values are never echoed back: they may hold secrets.
func newFrameworkError(status int, msg string, errs ...error) huma.StatusError {
	var details []client.ProblemError
	for _, err := range errs {
		if err == nil {
			continue
		}
		var p *client.Problem
		if errors.As(err, &p) {
			return p
		}
		d := client.ProblemError{Message: err.Error()}
		var ed huma.ErrorDetailer
		if errors.As(err, &ed) {
			det := ed.ErrorDetail()
			d = client.ProblemError{Location: det.Location, Message: det.Message}
		}
		details = append(details, d)
	}
	code := "request.invalid"
	switch status {
	case http.StatusBadRequest:
		code = "request.malformed"
		if len(details) > 0 {
			msg = "the request body is not valid JSON: " + details[0].Message
		}
	case http.StatusRequestEntityTooLarge:
		code = "request.too_large"
		msg = "the request body is larger than 1 MiB"
	case http.StatusUnsupportedMediaType:
		code = "request.unsupported_media_type"
	case http.StatusUnprocessableEntity:
		code = "request.invalid"
		if len(details) > 0 {
			var parts []string
			for _, d := range details {
				parts = append(parts, d.Location+": "+d.Message)
			}
			msg = "the request does not match the API schema: " + strings.Join(parts, "; ")
		}
	case http.StatusUnauthorized:
		code = "auth.unauthenticated"
	case http.StatusForbidden:
		code = "auth.forbidden"
	case http.StatusNotFound:
		code = "route.not_found"
	case http.StatusMethodNotAllowed:
		code = "route.method_not_allowed"
	case http.StatusInternalServerError:
		code = "internal.error"
	}
	return problem(status, code, msg, details...)
}

// problemFor maps an error returned by a handler to a problem. Errors it
// does not know become a 500 whose detail says nothing internal; the caller
// logs the cause.
func problemFor(err error) (*client.Problem, bool) {
	var p *client.Problem
	if errors.As(err, &p) {
		return p, true
	}
	if p, ok := storeProblem(err); ok {
		return p, true
	}
	var none *access.NoRoleError
	if errors.As(err, &none) {
		return problem(http.StatusForbidden, "auth.oidc_no_role", none.Reason), true
	}
	var jr *joinRefused
	if errors.As(err, &jr) {
		if jr.loc != "" {
			return problem(jr.status, jr.code, jr.loc+": "+jr.msg, client.ProblemError{Location: jr.loc, Message: jr.msg}), true
		}
		return problem(jr.status, jr.code, jr.msg), true
	}
	var refused *store.JoinRefusedError
	if errors.As(err, &refused) {
		return problem(http.StatusUnauthorized, refused.Reason, refused.Detail), true
	}
	switch {
	case errors.Is(err, store.ErrUnavailable):
		return problem(http.StatusServiceUnavailable, "store.unavailable", "the keeper cannot reach its database right now; nothing was changed; retry in a moment"), true
	case errors.Is(err, store.ErrStorageFull):
		return problem(http.StatusInsufficientStorage, "store.full", "the keeper's database has no space left; nothing was changed; free space on its disk"), true
	}
	if p, ok := cloudProblem(err); ok {
		return p, true
	}
	var rl *rateLimitedError
	if errors.As(err, &rl) {
		return problem(http.StatusTooManyRequests, "auth.rate_limited", rl.Error()), true
	}
	var limited *keyConflictsLimitedError
	if errors.As(err, &limited) {
		return problem(http.StatusTooManyRequests, "run.key_conflict_rate_limited",
			fmt.Sprintf("token %s caused more than %d re-run key conflicts in a short time; keyed runs are refused for %s",
				limited.Token, KeyConflictBurst, limited.RetryAfter)), true
	}
	switch {
	case errors.Is(err, auth.ErrNoToken):
		return problem(http.StatusUnauthorized, "auth.missing_token", "this route needs an API token: send \"Authorization: Bearer <token>\""), true
	case errors.Is(err, auth.ErrInvalidToken):
		return problem(http.StatusUnauthorized, "auth.invalid_token", err.Error()), true
	}
	var fe *auth.ForbiddenError
	if errors.As(err, &fe) {
		return problem(http.StatusForbidden, "auth.forbidden", err.Error()), true
	}
	var se *sessionError
	if errors.As(err, &se) {
		return problem(http.StatusUnauthorized, "auth.session_invalid", err.Error()), true
	}
	var ce *csrfError
	if errors.As(err, &ce) {
		return problem(http.StatusForbidden, "auth.csrf_failed", err.Error()), true
	}
	var up *auth.UnknownPermissionError
	if errors.As(err, &up) {
		return invalid("token.permission_unknown", fmt.Sprintf("body.permissions[%d]", up.Index),
			"unknown permission %q; permissions are %s", up.Name, strings.Join(permissionNames(auth.All()), ", ")), true
	}
	return problem(http.StatusInternalServerError, "internal.error", "the keeper failed to handle the request; see its log"), false
}

// storeProblem maps the store's errors about one object (*store.Error).
func storeProblem(err error) (*client.Problem, bool) {
	var qe *store.QuotaError
	if errors.As(err, &qe) {
		return problem(http.StatusConflict, "quota.exceeded", qe.Error()+"; nothing was started"), true
	}
	var se *store.Error
	if !errors.As(err, &se) {
		return nil, false
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return problem(http.StatusNotFound, se.Kind+".not_found", fmt.Sprintf("%s %q does not exist", se.Kind, se.Key)), true
	case errors.Is(err, store.ErrExists):
		return problem(http.StatusConflict, se.Kind+".exists", fmt.Sprintf("%s %q already exists", se.Kind, se.Key)), true
	case errors.Is(err, store.ErrInUse):
		detail := fmt.Sprintf("%s %q is in use", se.Kind, se.Key)
		if se.Ref != "" {
			detail += " by " + se.Ref
		}
		return problem(http.StatusConflict, se.Kind+".in_use", detail+"; delete those first"), true
	case errors.Is(err, store.ErrReferenceMissing):
		ref, name, _ := strings.Cut(se.Ref, " ")
		return invalid(se.Kind+"."+ref+"_missing", "body."+ref, "%s %q does not exist", ref, name), true
	case errors.Is(err, store.ErrRevoked):
		return problem(http.StatusConflict, "token.revoked", fmt.Sprintf("token %q is already revoked", se.Key)), true
	case errors.Is(err, store.ErrKeyConflict):
		return problem(http.StatusConflict, "run.key_conflict", fmt.Sprintf("key %q is already used by %s with a different scenario or input; use a new key to run again", se.Key, se.Ref)), true
	case errors.Is(err, store.ErrFinished):
		return problem(http.StatusConflict, "run.finished", fmt.Sprintf("run %s already finished (%s)", se.Key, se.Ref)), true
	case errors.Is(err, store.ErrRetired):
		return problem(http.StatusConflict, se.Kind+".name_retired", fmt.Sprintf("%s %q was deleted, and its name is not given again: "+
			"its finished runs, audit events and other records keep it; choose another name", se.Kind, se.Key)), true
	case errors.Is(err, store.ErrHostTaken):
		return problem(http.StatusConflict, "soul.host_taken", fmt.Sprintf("soul %q: %s belongs to another project's soul; a project's hosts are its own", se.Key, se.Ref),
			client.ProblemError{Location: "body.address", Message: "is another project's host"}), true
	case errors.Is(err, store.ErrLastAdmin):
		if se.Ref != "" {
			return problem(http.StatusConflict, "token.last_admin", fmt.Sprintf("token %q, %s, holds the last active keeper-wide admin tokens; create another admin token from another one first (or keeper token bootstrap --force on the host)", se.Key, se.Ref)), true
		}
		return problem(http.StatusConflict, "token.last_admin", fmt.Sprintf("token %q is the last active admin token; create another admin token first", se.Key)), true
	}
	return nil, false
}

// cloudProblem maps the errors of a CloudService.
func cloudProblem(err error) (*client.Problem, bool) {
	var de *DriverError
	switch {
	case errors.As(err, &de) && errors.Is(err, secret.ErrEndpointNotAllowed):
		return problem(http.StatusUnprocessableEntity, "provider.endpoint_not_allowed", de.Error()), true
	case errors.As(err, &de) && errors.Is(err, secret.ErrOutOfReach):
		return problem(http.StatusUnprocessableEntity, "provider.credentials_out_of_reach", de.Error()), true
	case errors.As(err, &de) && de.Ref != "":
		return problem(http.StatusBadGateway, "provider.credentials_unavailable", de.Error()), true
	case errors.As(err, &de):
		code := "driver.failed"
		var dse *driversdk.Error
		if errors.As(err, &dse) {
			code = dse.Code
		}
		return problem(http.StatusBadGateway, code, de.Error()), true
	case errors.Is(err, ErrNotListable):
		return problem(http.StatusUnprocessableEntity, "cloud.not_listable", err.Error()), true
	case errors.Is(err, ErrNotOrphan):
		return problem(http.StatusConflict, "cloud.not_orphan", err.Error()), true
	}
	return nil, false
}

func permissionNames(ps []auth.Permission) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return out
}

// headersFor returns the response headers that go with an error's
// problem: Retry-After for a rate limit.
func headersFor(err error) http.Header {
	var jr *joinRefused
	if errors.As(err, &jr) && jr.retryAfter > 0 {
		return http.Header{"Retry-After": {retryAfterSeconds(jr.retryAfter)}}
	}
	var limited *keyConflictsLimitedError
	if errors.As(err, &limited) {
		return http.Header{"Retry-After": {strconv.Itoa(int(limited.RetryAfter / time.Second))}}
	}
	return nil
}
