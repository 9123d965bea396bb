package ui_test

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/ui"
)

// TestAssetsServed: every file is served under /ui/ with its content type
// and the security headers, so the browser runs nothing the policy does
// not allow.
func TestAssetsServed(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(ui.Handler())
	t.Cleanup(srv.Close)
	tests := []struct{ path, ctype, contains string }{
		{"/ui/", "text/html", `<script type="module" src="js/app.js">`},
		{"/ui/style.css", "text/css", "@media (max-width: 700px)"},
		{"/ui/js/app.js", "text/javascript", "signInPage"},
		{"/ui/js/events.js", "text/javascript", "export function decode"},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			resp, err := http.Get(srv.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.ctype) || !strings.Contains(string(b), tc.contains) {
				t.Fatalf("GET %s = %d %s, %d bytes", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), len(b))
			}
			for h, want := range map[string]string{
				"Content-Security-Policy": ui.ContentSecurityPolicy, "X-Content-Type-Options": "nosniff",
				"X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
			} {
				if got := resp.Header.Get(h); got != want {
					t.Errorf("%s: %s = %q, want %q", tc.path, h, got, want)
				}
			}
		})
	}
}

var importRE = regexp.MustCompile(`(?m)^import .* from '\./([a-z]+\.js)';$`)

// TestAssetsSelfContained: every module a module imports is embedded, and
// the page carries no inline script or style the policy would block.
func TestAssetsSelfContained(t *testing.T) {
	t.Parallel()
	files := ui.Assets()
	err := fs.WalkDir(files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(files, path)
		if err != nil {
			return err
		}
		text := string(b)
		if strings.HasSuffix(path, ".js") {
			for _, m := range importRE.FindAllStringSubmatch(text, -1) {
				if _, err := fs.Stat(files, "js/"+m[1]); err != nil {
					t.Errorf("%s imports %s, which is not embedded", path, m[1])
				}
			}
			if strings.Contains(text, "innerHTML") || strings.Contains(text, "insertAdjacentHTML") || strings.Contains(text, "document.write") {
				t.Errorf("%s parses text as HTML; build nodes with dom.js", path)
			}
		}
		if strings.HasSuffix(path, ".html") {
			if regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]+</script>`).MatchString(text) || strings.Contains(text, " style=") || regexp.MustCompile(` on[a-z]+=`).MatchString(text) {
				t.Errorf("%s has inline script or style, which the content security policy blocks", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
