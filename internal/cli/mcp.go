package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/internal/version"
)

// soulctl mcp is an MCP server on stdin/stdout for local clients that
// start their servers as commands. It holds no tool of its own: it opens
// an MCP session with the keeper's /mcp under the user's token and serves
// the keeper's tools as they are, forwarding each call and its progress
// notifications. The write policy (mcp.allow_writes), RBAC, the audit of
// every call and the masking all stay in the keeper, in one place, and
// the stdio server shows exactly the keeper's tools and schemas.

func (a *app) mcpCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "mcp",
		Short:   "Serve the keeper's MCP tools over stdio",
		Example: `  soulctl mcp   # in an MCP client's config: {"command": "soulctl", "args": ["mcp"]}`,
		Long: `Serve the keeper's MCP tools on stdin/stdout, for MCP clients that start their
servers as a command. soulctl opens a session with the keeper's /mcp using the
same keeper URL, token and CA settings as every other command, and forwards
each tool call and its progress notifications. What a tool may do is the
keeper's decision: the token's permissions, and writes (run_start, run_cancel)
only where keeper.yml says mcp: {allow_writes: true}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a.running = true // from here on an error is the keeper's or the session's, not a usage error
			token, opts, err := a.connection()
			if err != nil {
				return err
			}
			hc, err := opts.HTTPClient()
			if err != nil {
				return usageErrorf("--ca-file: %v", err)
			}
			// The keeper's own refusal (code and message) rather than the
			// MCP client's bare "Unauthorized": ask who the token is first.
			c, err := a.client()
			if err != nil {
				return err
			}
			if _, err := c.Whoami(cmd.Context()); err != nil {
				return err
			}
			return serveMCPProxy(cmd.Context(), strings.TrimRight(a.resolvedURL, "/")+"/mcp", token, hc, &sdk.IOTransport{
				Reader: readCloser{cmd.InOrStdin()}, Writer: writeCloser{cmd.OutOrStdout()},
			})
		},
	}
}

// serveMCPProxy serves the tools of the MCP server at endpoint on local
// until local's client goes away or ctx ends.
func serveMCPProxy(ctx context.Context, endpoint, token string, hc *http.Client, local sdk.Transport) error {
	p := &mcpProxy{waiting: map[string]progressTarget{}}
	upstream := *hc
	upstream.Timeout = 0 // run_wait lasts as long as its run
	upstream.Transport = bearer{token: token, next: transportOf(hc)}
	keeper := sdk.NewClient(&sdk.Implementation{Name: "soulctl", Version: version.String()}, &sdk.ClientOptions{
		ProgressNotificationHandler: p.forward,
	})
	session, err := keeper.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &upstream}, nil)
	if err != nil {
		return fmt.Errorf("connect to the keeper's MCP endpoint %s: %w", endpoint, err)
	}
	defer session.Close()
	p.keeper = session

	instructions := ""
	if r := session.InitializeResult(); r != nil {
		instructions = r.Instructions
	}
	srv := sdk.NewServer(&sdk.Implementation{Name: "soulctl-mcp", Title: "Soul Stack (via soulctl)", Version: version.String()},
		&sdk.ServerOptions{Instructions: instructions})
	for tool, err := range session.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list the keeper's tools: %w", err)
		}
		srv.AddTool(tool, p.call)
	}
	return srv.Run(ctx, local)
}

// progressGrace is how long after a call returned its progress
// notifications are still forwarded.
const progressGrace = 30 * time.Second

// mcpProxy forwards tool calls to the keeper's session, and the keeper's
// progress notifications back to the local caller that asked for them.
type mcpProxy struct {
	keeper  *sdk.ClientSession
	mu      sync.Mutex
	next    int
	waiting map[string]progressTarget // by the token sent to the keeper
}

type progressTarget struct {
	session *sdk.ServerSession
	token   any
}

func (p *mcpProxy) call(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	params := &sdk.CallToolParams{Name: req.Params.Name, Arguments: req.Params.Arguments}
	if token := req.Params.GetProgressToken(); token != nil {
		p.mu.Lock()
		p.next++
		up := "soulctl-" + strconv.Itoa(p.next)
		p.waiting[up] = progressTarget{session: req.Session, token: token}
		p.mu.Unlock()
		// The SDK's client hands notifications to their handler apart
		// from results: the last ones of a call may come just after it
		// returned. They are forwarded for a while longer.
		defer time.AfterFunc(progressGrace, func() {
			p.mu.Lock()
			delete(p.waiting, up)
			p.mu.Unlock()
		})
		params.SetProgressToken(up)
	}
	return p.keeper.CallTool(ctx, params)
}

func (p *mcpProxy) forward(ctx context.Context, req *sdk.ProgressNotificationClientRequest) {
	up, _ := req.Params.ProgressToken.(string)
	p.mu.Lock()
	t, ok := p.waiting[up]
	p.mu.Unlock()
	if !ok {
		return
	}
	_ = t.session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
		ProgressToken: t.token, Progress: req.Params.Progress, Total: req.Params.Total, Message: req.Params.Message,
	})
}

// bearer adds the API token to every request to the keeper.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func transportOf(hc *http.Client) http.RoundTripper {
	if hc.Transport != nil {
		return hc.Transport
	}
	return http.DefaultTransport
}

// readCloser and writeCloser give the command's stdin and stdout the
// Close the SDK's transport wants; closing them is the process's business.
type readCloser struct{ io.Reader }

func (readCloser) Close() error { return nil }

type writeCloser struct{ io.Writer }

func (writeCloser) Close() error { return nil }
