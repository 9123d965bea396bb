package cli

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/oauth2"

	"github.com/soulstack/soulstack/client"
	"github.com/soulstack/soulstack/internal/atomicfile"
)

// EnvCredentials overrides where soulctl login keeps its tokens.
const EnvCredentials = "SOULSTACK_CREDENTIALS"

// credentials is soulctl login's file: a token per keeper URL.
type credentials struct {
	Keepers map[string]credential `json:"keepers"`
}

type credential struct {
	Token     string     `json:"token"`
	Name      string     `json:"name"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// credentialsPath is $SOULSTACK_CREDENTIALS, else
// ${XDG_CONFIG_HOME:-~/.config}/soulstack/credentials.json.
func (a *app) credentialsPath() (string, error) {
	return a.configFile(EnvCredentials, "credentials.json", "soulctl login keeps its tokens")
}

// configFile is the file the environment variable override names, else
// name in ${XDG_CONFIG_HOME:-~/.config}/soulstack; what says what it
// holds, for the error without a HOME.
func (a *app) configFile(override, name, what string) (string, error) {
	if p := a.env.Getenv(override); p != "" {
		return p, nil
	}
	dir := a.env.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home := a.env.Getenv("HOME")
		if home == "" {
			return "", errors.New("no HOME: set " + override + " to where " + what)
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "soulstack", name), nil
}

func (a *app) readCredentials() (credentials, string, error) {
	path, err := a.credentialsPath()
	if err != nil {
		return credentials{}, "", err
	}
	var c credentials
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return c, path, fmt.Errorf("read %s: %w", path, err)
	default:
		if err := json.Unmarshal(b, &c); err != nil {
			return c, path, fmt.Errorf("read %s: %w", path, err)
		}
	}
	if c.Keepers == nil {
		c.Keepers = map[string]credential{}
	}
	return c, path, nil
}

func (a *app) writeCredentials(c credentials, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(c, "", "  ")
	return atomicfile.Write(path, append(b, '\n'), 0o600)
}

// loggedInToken is the token soulctl login keeps for the keeper at url,
// unless it has expired.
func (a *app) loggedInToken(keeperURL string) (string, bool) {
	c, _, err := a.readCredentials()
	if err != nil {
		return "", false
	}
	cr, ok := c.Keepers[strings.TrimRight(keeperURL, "/")]
	if !ok || cr.Token == "" || cr.ExpiresAt != nil && !time.Now().Before(*cr.ExpiresAt) {
		return "", false
	}
	return cr.Token, true
}

func (a *app) loginCommand() *cobra.Command {
	var noBrowser bool
	var project string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Sign in with the keeper's identity provider and keep the token",
		Example: `  soulctl --keeper https://keeper.example.com:8420 login
  soulctl login --no-browser --project team-a`,
		Long: `Sign in with the keeper's OpenID Connect provider (keeper.yml oidc) in a
browser. soulctl listens on a loopback port for the keeper's answer and
exchanges the one-time code it gets, with the PKCE verifier only it holds,
for a token of yours, kept per keeper URL in ` + "${XDG_CONFIG_HOME:-~/.config}/soulstack/credentials.json" + ` (mode
0600; ` + EnvCredentials + ` overrides) and used when neither --token nor ` + EnvToken + ` is
given. The token expires with the sign-in; run soulctl login again then.`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			_, opts, err := a.connection()
			if err != nil {
				return err
			}
			c, err := client.NewWithOptions(a.resolvedURL, "", opts)
			if err != nil {
				return usageErrorf("--keeper: %v", err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			t, err := a.login(ctx, c, noBrowser, project)
			if err != nil {
				return err
			}
			creds, path, err := a.readCredentials()
			if err != nil {
				return err
			}
			creds.Keepers[strings.TrimRight(a.resolvedURL, "/")] = credential{Token: t.Token, Name: t.Name, ExpiresAt: t.ExpiresAt}
			if err := a.writeCredentials(creds, path); err != nil {
				return fmt.Errorf("keep the token: %w", err)
			}
			t.Token = "" // kept, not printed
			until := "never"
			if t.ExpiresAt != nil {
				until = timestamp(*t.ExpiresAt)
			}
			in := t.Project
			if in == "" {
				in = "every project (keeper-wide)"
			}
			return p.print(t, record{{"signed in as", t.Name}, {"role", t.Role}, {"project", in}, {"until", until}, {"token kept in", path}})
		}),
	}
	cmd.Flags().BoolVar(&noBrowser, "no-browser", false, "only print the URL to open")
	cmd.Flags().StringVar(&project, "project", "", "sign in to this project (default: your keeper-wide role, else the first project you have a role in)")
	cmd.Flags().DurationVar(&wait, "timeout", 5*time.Minute, "how long to wait for the sign-in")
	return cmd
}

// login runs the loopback flow and returns the person's new token.
func (a *app) login(ctx context.Context, c *client.Client, noBrowser bool, project string) (*client.TokenCreated, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the sign-in: %w", err)
	}
	defer ln.Close()
	verifier := oauth2.GenerateVerifier()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	state := base64.RawURLEncoding.EncodeToString(b)
	redirect := "http://" + ln.Addr().String() + "/callback"
	q := url.Values{"cli_redirect": {redirect}, "cli_challenge": {oauth2.S256ChallengeFromVerifier(verifier)}, "cli_state": {state}}
	if project != "" {
		q.Set("project", project)
	}
	loginURL := strings.TrimRight(a.resolvedURL, "/") + "/v1/auth/oidc/login?" + q.Encode()

	codes := make(chan string, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" || r.URL.Query().Get("state") != state || r.URL.Query().Get("code") == "" {
			http.Error(w, "not this soulctl login's answer", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "Signed in. You may close this tab and go back to soulctl.")
		select {
		case codes <- r.URL.Query().Get("code"):
		default:
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	fmt.Fprintf(a.env.Stderr, "Open this URL in a browser to sign in:\n\n  %s\n\nwaiting for the sign-in…\n", loginURL)
	if !noBrowser {
		if err := exec.Command("xdg-open", loginURL).Start(); err != nil {
			fmt.Fprintln(a.env.Stderr, "(no browser could be started; open the URL yourself)")
		}
	}
	var code string
	select {
	case code = <-codes:
	case <-ctx.Done():
		return nil, fmt.Errorf("no sign-in came back: %w", ctx.Err())
	}
	return c.OIDCCodeExchange(ctx, client.OIDCCodeExchange{Code: code, Verifier: verifier})
}

func (a *app) logoutCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "logout",
		Short:   "Revoke the token soulctl login kept for this keeper, and forget it",
		Example: `  soulctl logout`,
		Long: `Revoke the token soulctl login kept for the keeper (--keeper or ` + EnvKeeper + `)
at the keeper, which ends every session of it, and remove it from the
credentials file. A token the keeper no longer accepts (expired, revoked
elsewhere) is only forgotten.`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			_, opts, err := a.connection()
			if err != nil {
				return err
			}
			url := strings.TrimRight(a.resolvedURL, "/")
			creds, path, err := a.readCredentials()
			if err != nil {
				return err
			}
			cr, ok := creds.Keepers[url]
			if !ok {
				return fmt.Errorf("soulctl login kept no token for %s", url)
			}
			c, err := client.NewWithOptions(a.resolvedURL, cr.Token, opts)
			if err != nil {
				return usageErrorf("--keeper: %v", err)
			}
			var prob *client.Problem
			if err := c.Logout(cmd.Context()); err != nil && !(errors.As(err, &prob) && prob.Status == http.StatusUnauthorized) {
				return err
			}
			delete(creds.Keepers, url)
			if err := a.writeCredentials(creds, path); err != nil {
				return err
			}
			return p.print(nil, text(fmt.Sprintf("signed out of %s: token %s revoked and forgotten\n", url, cr.Name)))
		}),
	}
}

func (a *app) whoamiCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Show the token soulctl uses: its name, role, permissions and person",
		Example: `  soulctl whoami
  soulctl whoami -o json`,
		Args: cobra.NoArgs,
		RunE: a.action(func(cmd *cobra.Command, _ []string, p *printer) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			s, err := c.Whoami(cmd.Context())
			if err != nil {
				return err
			}
			in := s.Project
			if in == "" {
				in = "every project (keeper-wide)"
			}
			r := record{{"token", s.ID}, {"name", s.Name}, {"role", s.Role}, {"project", in}}
			if s.Person != nil {
				r = append(r, [2]string{"person", s.Person.Name + " (" + s.Person.Subject + " at " + s.Person.Issuer + ")"})
			}
			return p.print(s, append(r, [2]string{"from", a.tokenSource}))
		}),
	}
}
