package cli

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/soulstack/soulstack/client"
)

// What a command's argument or flag completes to: names from the
// keeper's registries, asked as the command would ask (the same keeper,
// token and trust), or files.
const (
	namesOfProviders   = "providers"
	namesOfProfiles    = "profiles"
	namesOfSouls       = "souls"
	namesOfRuns        = "runs"
	namesOfProjects    = "projects"
	namesOfTokens      = "tokens"
	namesOfModules     = "modules"
	namesOfCredentials = "credentials"
	namesOfContexts    = "contexts" // soulctl's own, not the keeper's
	files              = "files"
)

// argNames is what each command's positional arguments complete to, by
// its path below soulctl; a last entry ending in "..." completes every
// argument from there on.
var argNames = map[string][]string{
	"provider get": {namesOfProviders}, "provider delete": {namesOfProviders},
	"provider share": {namesOfProviders, namesOfProjects}, "provider unshare": {namesOfProviders, namesOfProjects},
	"profile get": {namesOfProfiles}, "profile delete": {namesOfProfiles},
	"profile share": {namesOfProfiles, namesOfProjects}, "profile unshare": {namesOfProfiles, namesOfProjects},
	"soul get": {namesOfSouls}, "soul delete": {namesOfSouls}, "soul seeds": {namesOfSouls},
	"soul seed": {namesOfSouls, files}, "soul apply-seed": {namesOfSouls},
	"drift ack": {namesOfSouls}, "drift check": {namesOfSouls + "..."},
	"runs get": {namesOfRuns}, "runs logs": {namesOfRuns}, "runs wait": {namesOfRuns}, "runs cancel": {namesOfRuns},
	"runs approve": {namesOfRuns}, "runs reject": {namesOfRuns}, "runs output": {namesOfRuns},
	"project get": {namesOfProjects}, "project delete": {namesOfProjects}, "project bind": {namesOfProjects},
	"project unbind": {namesOfProjects}, "project bindings": {namesOfProjects}, "project quota": {namesOfProjects},
	"token revoke":      {namesOfTokens},
	"modules show":      {namesOfModules},
	"credential delete": {namesOfCredentials},
	"context use":       {namesOfContexts}, "context delete": {namesOfContexts},
	"run": {files},
}

// flagNames is what a command's flags complete to.
var flagNames = map[string]map[string]string{
	"profile create":  {"provider": namesOfProviders, "project": namesOfProjects},
	"provider create": {"project": namesOfProjects},
	"soul add":        {"project": namesOfProjects},
	"token create":    {"project": namesOfProjects},
	"run":             {"project": namesOfProjects},
	"login":           {"project": namesOfProjects},
	"drift cloud":     {"provider": namesOfProviders},
}

// completionTimeout bounds the keeper's answer to a completion: a shell
// waits for it.
const completionTimeout = 3 * time.Second

// addCompletions gives the commands under root their completions.
func (a *app) addCompletions(root *cobra.Command) {
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		path := strings.TrimPrefix(strings.TrimPrefix(cmd.CommandPath(), root.Name()), " ")
		if kinds, ok := argNames[path]; ok {
			cmd.ValidArgsFunction = a.completeArgs(kinds)
		}
		for flag, kind := range flagNames[path] {
			if cmd.Flags().Lookup(flag) != nil {
				_ = cmd.RegisterFlagCompletionFunc(flag, func(cmd *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
					return a.completeNames(cmd.Context(), kind, prefix)
				})
			}
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// completeArgs completes the next positional argument as kinds says.
func (a *app) completeArgs(kinds []string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		kind := ""
		switch last := kinds[len(kinds)-1]; {
		case len(args) < len(kinds):
			kind = strings.TrimSuffix(kinds[len(args)], "...")
		case strings.HasSuffix(last, "..."):
			kind = strings.TrimSuffix(last, "...")
		default:
			return nil, cobra.ShellCompDirectiveNoFileComp // no more arguments
		}
		if kind == files {
			return nil, cobra.ShellCompDirectiveDefault
		}
		return a.completeNames(cmd.Context(), kind, prefix)
	}
}

// completeNames asks the keeper for the names of kind that start with
// prefix; nothing (and no file names) when it cannot be asked.
func (a *app) completeNames(ctx context.Context, kind, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if ctx == nil {
		ctx = context.Background()
	}
	if kind == namesOfContexts {
		c, _, err := a.readConfig()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
		}
		out := []cobra.Completion{}
		for _, k := range c.Contexts {
			if strings.HasPrefix(k.Name, prefix) {
				out = append(out, k.Name)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	c, err := a.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	names, err := registryNames(ctx, c, kind)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	out := []cobra.Completion{}
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completionMost is how many names a completion lists at most (runs: the
// newest).
const completionMost = 500

// registryNames lists the names (ids for runs and tokens) of kind.
func registryNames(ctx context.Context, c *client.Client, kind string) ([]string, error) {
	switch kind {
	case namesOfProviders:
		return names(ctx, func(ctx context.Context, o client.ListOptions) ([]client.Provider, string, error) {
			l, err := c.ProviderList(ctx, o)
			return itemsOf(l, err, func(l *client.ProviderList) ([]client.Provider, string) { return l.Items, l.Next })
		}, func(p client.Provider) string { return p.Name })
	case namesOfProfiles:
		return names(ctx, func(ctx context.Context, o client.ListOptions) ([]client.Profile, string, error) {
			l, err := c.ProfileList(ctx, o)
			return itemsOf(l, err, func(l *client.ProfileList) ([]client.Profile, string) { return l.Items, l.Next })
		}, func(p client.Profile) string { return p.Name })
	case namesOfSouls:
		return names(ctx, func(ctx context.Context, o client.ListOptions) ([]client.Soul, string, error) {
			l, err := c.SoulList(ctx, o)
			return itemsOf(l, err, func(l *client.SoulList) ([]client.Soul, string) { return l.Items, l.Next })
		}, func(s client.Soul) string { return s.SID })
	case namesOfRuns:
		return names(ctx, func(ctx context.Context, o client.ListOptions) ([]client.Run, string, error) {
			l, err := c.RunList(ctx, client.RunListOptions{ListOptions: o})
			return itemsOf(l, err, func(l *client.RunList) ([]client.Run, string) { return l.Items, l.Next })
		}, func(r client.Run) string { return r.ID })
	case namesOfProjects:
		return names(ctx, func(ctx context.Context, o client.ListOptions) ([]client.Project, string, error) {
			l, err := c.ProjectList(ctx, o)
			return itemsOf(l, err, func(l *client.ProjectList) ([]client.Project, string) { return l.Items, l.Next })
		}, func(p client.Project) string { return p.Name })
	case namesOfTokens:
		return names(ctx, func(ctx context.Context, o client.ListOptions) ([]client.Token, string, error) {
			l, err := c.TokenList(ctx, o)
			return itemsOf(l, err, func(l *client.TokenList) ([]client.Token, string) { return l.Items, l.Next })
		}, func(t client.Token) string { return t.ID })
	case namesOfModules:
		l, err := c.ModuleList(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]string, len(l.Items))
		for i, m := range l.Items {
			out[i] = m.ID
		}
		return out, nil
	case namesOfCredentials:
		l, err := c.CredentialList(ctx, "")
		if err != nil {
			return nil, err
		}
		out := make([]string, len(l.Items))
		for i, cr := range l.Items {
			out[i] = cr.Name
		}
		return out, nil
	}
	return nil, nil
}

// names lists up to completionMost items through page and names them.
func names[T any](ctx context.Context, page func(context.Context, client.ListOptions) ([]T, string, error), name func(T) string) ([]string, error) {
	items, err := listUpTo(ctx, completionMost, page)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = name(it)
	}
	return out, nil
}

// itemsOf unpacks a list page.
func itemsOf[L, T any](l *L, err error, get func(*L) ([]T, string)) ([]T, string, error) {
	if err != nil {
		return nil, "", err
	}
	items, next := get(l)
	return items, next, nil
}
