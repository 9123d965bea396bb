package api

import (
	"encoding/json"
	"net/http"
	"strings"
)

// OAuth 2.0 Protected Resource Metadata (RFC 9728): what a client that
// follows the MCP authorization spec reads to learn how to authenticate.
// The keeper is no OAuth authorization server: its tokens are API tokens
// an admin mints (soulctl token create), sent as a bearer header; the
// metadata says so, and every 401 points at it (resource_metadata in
// WWW-Authenticate).
const ResourceMetadataPath = "/.well-known/oauth-protected-resource"

// resourceMetadata is the metadata document for the keeper at base
// (scheme://host): the resource is its MCP endpoint.
func resourceMetadata(base string) map[string]any {
	return map[string]any{
		"resource":                 base + "/mcp",
		"resource_name":            "Soul Stack keeper",
		"authorization_servers":    []string{},
		"bearer_methods_supported": []string{"header"},
		"scopes_supported":         []string{},
		"resource_documentation":   base + "/openapi.json",
		"soulstack_token_instructions": "The keeper issues no OAuth tokens. Use an API token an admin creates with " +
			"`soulctl token create NAME --role viewer` (or --permissions …), sent as Authorization: Bearer sst_…; " +
			"with soulctl, `soulctl mcp` speaks MCP over stdio with $SOULSTACK_TOKEN.",
	}
}

// baseURL is the keeper's origin as request r reached it.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + strings.ToLower(r.Host)
}

// wwwAuthenticate is the challenge of a 401: the realm and where the
// resource's metadata is.
func wwwAuthenticate(base string) string {
	return `Bearer realm="soulstack", resource_metadata="` + base + ResourceMetadataPath + `"`
}

// serveResourceMetadata answers GET /.well-known/oauth-protected-resource
// (and its /mcp form, RFC 9728 section 3.1).
func serveResourceMetadata(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=3600")
	_ = json.NewEncoder(w).Encode(resourceMetadata(baseURL(r)))
}
