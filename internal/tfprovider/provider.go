// Package tfprovider is the Terraform/OpenTofu provider soulstack/soulstack,
// built on terraform-plugin-framework. It manages the keeper's registries
// (soulstack_provider, soulstack_profile, soulstack_soul), runs scenarios
// as one-shot jobs (soulstack_run) and reads souls and runs through data
// sources. It talks to the keeper only through the client package.
//
// Secrets: the provider's token and a run's sensitive_input are marked
// Sensitive, so Terraform hides them in plans and marks them in state
// (Terraform does store them: protect the state). The provider never logs
// them, masks their text out of what it copies into state, and refuses a
// sensitive_input key the keeper would not treat as secret, so that the
// keeper stores those inputs sealed and answers with them masked.
package tfprovider

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/soulstack/soulstack/client"
)

// Address is the provider's source address in the registry form.
const Address = "registry.terraform.io/soulstack/soulstack"

// Defaults of the provider's timeouts.
const (
	DefaultRequestTimeout = 60 * time.Second
	DefaultRetryTimeout   = 30 * time.Second
)

// New returns the provider factory that providerserver serves.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &soulstackProvider{version: version} }
}

var _ provider.Provider = (*soulstackProvider)(nil)

type soulstackProvider struct {
	version string
}

type providerModel struct {
	Endpoint      types.String `tfsdk:"endpoint"`
	Token         types.String `tfsdk:"token"`
	CAFile        types.String `tfsdk:"ca_file"`
	CAFingerprint types.String `tfsdk:"ca_fingerprint"`
	Timeouts      types.Object `tfsdk:"timeouts"`
}

type timeoutsModel struct {
	RequestSec types.Int64 `tfsdk:"request_sec"`
	RetrySec   types.Int64 `tfsdk:"retry_sec"`
}

func (p *soulstackProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "soulstack"
	resp.Version = p.version
}

func (p *soulstackProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Soul Stack: registries, souls and scenario runs of a keeper.",
		Attributes: map[string]schema.Attribute{
			"endpoint": schema.StringAttribute{
				Optional:    true,
				Description: "The keeper's URL, e.g. http://127.0.0.1:8420. Default: $SOULSTACK_KEEPER, then " + client.DefaultURL + ".",
			},
			"token": schema.StringAttribute{
				Optional:    true,
				Sensitive:   true,
				Description: "An API token of the keeper. Default: $SOULSTACK_TOKEN.",
			},
			"ca_file": schema.StringAttribute{
				Optional:    true,
				Description: "PEM file of the CA to trust for an https:// keeper, e.g. the keeper's <data-dir>/tls/ca.crt. Default: $SOULSTACK_CA.",
			},
			"ca_fingerprint": schema.StringAttribute{
				Optional:    true,
				Description: "Pin the keeper's CA by the SHA-256 fingerprint it logs (sha256:…). Default: $SOULSTACK_CA_FINGERPRINT.",
			},
			"timeouts": schema.SingleNestedAttribute{
				Optional:    true,
				Description: "How long one request may take, and how long an unreachable keeper is retried (with backoff) before giving up.",
				Attributes: map[string]schema.Attribute{
					"request_sec": schema.Int64Attribute{Optional: true, Description: "Seconds one API request may take (default 60, which is also the most)."},
					"retry_sec":   schema.Int64Attribute{Optional: true, Description: "Seconds to keep retrying a keeper that cannot be reached (default 30; 0 tries once)."},
				},
			},
		},
	}
}

func (p *soulstackProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if m.Endpoint.IsUnknown() || m.Token.IsUnknown() {
		resp.Diagnostics.AddError("Soul Stack provider configured with unknown values",
			"endpoint and token must be known when the provider is configured; they cannot come from resources created in the same apply.")
		return
	}
	endpoint := m.Endpoint.ValueString()
	if endpoint == "" {
		endpoint = os.Getenv("SOULSTACK_KEEPER")
	}
	token := m.Token.ValueString()
	if token == "" {
		token = os.Getenv("SOULSTACK_TOKEN")
	}
	if token == "" {
		resp.Diagnostics.AddAttributeError(path.Root("token"), "Missing keeper API token",
			"Set token in the provider block (from a sensitive variable) or SOULSTACK_TOKEN in the environment.")
		return
	}
	k := &keeper{requestTimeout: DefaultRequestTimeout, retryTimeout: DefaultRetryTimeout}
	if !m.Timeouts.IsNull() && !m.Timeouts.IsUnknown() {
		var t timeoutsModel
		resp.Diagnostics.Append(m.Timeouts.As(ctx, &t, objectAsOptions)...)
		if resp.Diagnostics.HasError() {
			return
		}
		if !t.RequestSec.IsNull() {
			if t.RequestSec.ValueInt64() <= 0 {
				resp.Diagnostics.AddAttributeError(path.Root("timeouts").AtName("request_sec"), "Invalid timeout", "request_sec must be at least 1.")
				return
			}
			k.requestTimeout = time.Duration(t.RequestSec.ValueInt64()) * time.Second
		}
		if !t.RetrySec.IsNull() {
			if t.RetrySec.ValueInt64() < 0 {
				resp.Diagnostics.AddAttributeError(path.Root("timeouts").AtName("retry_sec"), "Invalid timeout", "retry_sec must not be negative.")
				return
			}
			k.retryTimeout = time.Duration(t.RetrySec.ValueInt64()) * time.Second
		}
	}
	opts := client.Options{CAFile: m.CAFile.ValueString(), CAFingerprint: m.CAFingerprint.ValueString()}
	if opts.CAFile == "" {
		opts.CAFile = os.Getenv("SOULSTACK_CA")
	}
	if opts.CAFingerprint == "" {
		opts.CAFingerprint = os.Getenv("SOULSTACK_CA_FINGERPRINT")
	}
	if opts.CAFingerprint != "" {
		if _, err := client.ParseFingerprint(opts.CAFingerprint); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("ca_fingerprint"), "Invalid CA fingerprint", err.Error())
			return
		}
	}
	c, err := client.NewWithOptions(endpoint, token, opts)
	if err != nil {
		at, summary := path.Root("endpoint"), "Invalid keeper endpoint"
		if opts.CAFile != "" {
			at, summary = path.Root("ca_file"), "Unusable CA file"
		}
		resp.Diagnostics.AddAttributeError(at, summary, err.Error())
		return
	}
	k.c, k.endpoint = c, strings.TrimRight(endpoint, "/")
	if k.endpoint == "" {
		k.endpoint = client.DefaultURL
	}
	tflog.Debug(ctx, "soulstack provider configured", map[string]any{"endpoint": k.endpoint})
	resp.ResourceData = k
	resp.DataSourceData = k
}

func (p *soulstackProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		func() resource.Resource { return &providerResource{} },
		func() resource.Resource { return &profileResource{} },
		func() resource.Resource { return &soulResource{} },
		func() resource.Resource { return &runResource{} },
	}
}

func (p *soulstackProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{
		func() datasource.DataSource { return &soulsDataSource{} },
		func() datasource.DataSource { return &runDataSource{} },
	}
}

// keeper is the configured connection the resources share: a client plus
// the provider's timeouts and retry policy.
type keeper struct {
	c              *client.Client
	endpoint       string
	requestTimeout time.Duration
	retryTimeout   time.Duration
}

// retryBase is the first pause between tries to reach the keeper; it
// doubles up to retryMax.
var (
	retryBase = 250 * time.Millisecond
	retryMax  = 5 * time.Second
)

// errUnreachable wraps the last connection error once retries are spent.
type errUnreachable struct {
	endpoint string
	tries    int
	elapsed  time.Duration
	err      error
}

func (e *errUnreachable) Error() string {
	return fmt.Sprintf("cannot reach the keeper at %s after %d tries over %s: %v", e.endpoint, e.tries, e.elapsed.Round(time.Second), e.err)
}

func (e *errUnreachable) Unwrap() error { return e.err }

// do runs one API call with the request timeout, retrying with backoff
// while the keeper cannot be reached (no connection: nothing was sent, so
// a retry is safe for every method).
func do[T any](ctx context.Context, k *keeper, fn func(ctx context.Context) (T, error)) (T, error) {
	start := time.Now()
	pause := retryBase
	for tries := 1; ; tries++ {
		rctx, cancel := context.WithTimeout(ctx, k.requestTimeout)
		v, err := fn(rctx)
		cancel()
		if err == nil || !connectionError(err) || ctx.Err() != nil {
			return v, err
		}
		if time.Since(start)+pause > k.retryTimeout {
			var zero T
			return zero, &errUnreachable{endpoint: k.endpoint, tries: tries, elapsed: time.Since(start), err: err}
		}
		tflog.Debug(ctx, "keeper unreachable, retrying", map[string]any{"try": tries, "pause": pause.String()})
		select {
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(pause*2, retryMax)
	}
}

// connectionError reports whether err means the request never reached
// the keeper (refused, no route, DNS).
func connectionError(err error) bool {
	var p *client.Problem
	if errors.As(err, &p) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Op == "dial"
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

// problemCode returns the dotted code of a keeper problem, or "".
func problemCode(err error) string {
	var p *client.Problem
	if errors.As(err, &p) {
		return p.Code
	}
	return ""
}

// addError turns an API error into a readable diagnostic: what was being
// done, then why in the keeper's own words, each located problem on its
// own line (file:line:column for scenarios).
func addError(diags *diag.Diagnostics, at *path.Path, what string, err error) {
	summary, detail := what, err.Error()
	var p *client.Problem
	var unreach *errUnreachable
	switch {
	case errors.As(err, &unreach):
		summary = what + ": keeper unreachable"
		detail = unreach.Error() + "\nIs the keeper running? Check the provider's endpoint (or SOULSTACK_KEEPER)."
	case errors.As(err, &p):
		var b strings.Builder
		fmt.Fprintf(&b, "The keeper answered %d %s", p.Status, p.Code)
		if p.Detail != "" && (len(p.Errors) == 0 || !strings.Contains(p.Detail, p.Errors[0].Message)) {
			fmt.Fprintf(&b, ": %s", p.Detail)
		}
		for _, e := range p.Errors {
			if e.Code != "" {
				fmt.Fprintf(&b, "\n  %s: %s: %s", e.Location, e.Code, e.Message)
			} else {
				fmt.Fprintf(&b, "\n  %s: %s", e.Location, e.Message)
			}
		}
		switch p.Status {
		case 401:
			summary = what + ": the keeper refused the API token"
			b.WriteString("\nCheck the provider's token (or SOULSTACK_TOKEN): it is missing, wrong, expired or revoked.")
		case 403:
			summary = what + ": the API token lacks a permission"
		}
		if p.Code == "provider.in_use" {
			summary = what + ": the provider is still in use"
			b.WriteString("\nDelete the profiles that use it first (in Terraform: refer to this resource's name from them, so that they are destroyed before it). " +
				"Souls the provider made keep it in use too, destroyed ones included, until they are deleted (soulctl soul delete SID).")
		}
		if p.Code == "scenario.invalid" {
			summary = what + ": the scenario is invalid; nothing ran"
		}
		detail = b.String()
	}
	if at != nil {
		diags.AddAttributeError(*at, summary, detail)
		return
	}
	diags.AddError(summary, detail)
}

// isNotFound reports whether err is the keeper's 404.
func isNotFound(err error) bool {
	var p *client.Problem
	return errors.As(err, &p) && p.Status == 404
}

// keeperFrom reads the configured keeper from provider data; nil before
// configuration (validation calls happen then).
func keeperFrom(data any, diags *diag.Diagnostics) *keeper {
	if data == nil {
		return nil
	}
	k, ok := data.(*keeper)
	if !ok {
		diags.AddError("Unexpected provider data", fmt.Sprintf("got %T, want *keeper", data))
		return nil
	}
	return k
}
