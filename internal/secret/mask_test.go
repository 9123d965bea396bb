package secret_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/soulstack/soulstack/internal/secret"
)

func TestIsSensitiveKey(t *testing.T) {
	t.Parallel()
	cases := map[string]bool{
		"token": true, "api_token": true, "BootstrapToken": true, "password": true, "DB_PASSWORD": true,
		"client_secret": true, "secrets": true, "private_key": true, "ssh_private_key": true, "credentials": true,
		"aws_credentials": true, "name": false, "subnet": false, "key": false, "public_key": false,
		"credentials_ref": false, "key_ref": false, "token_ref": false, "": false,
		"api_key": true, "X-Api-Key": true, "private-key": true, "key-ref": false, "apikey": true, "ApiKey": true, "aws_access_key_id": true,
		"secret_access_key": true, "PrivateKey": true, "ssh_passphrase": true, "passwd": true, "db_passwd": true,
		"api_key_ref": false, "passphrase_ref": false, "api": false, "access": false, "keys": false,
	}
	for key, want := range cases {
		if got := secret.IsSensitiveKey(key); got != want {
			t.Errorf("IsSensitiveKey(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestMask(t *testing.T) {
	t.Parallel()
	in := map[string]any{
		"name":            "web",
		"credentials_ref": "vault:kv/db#password",
		"db_password":     "hunter2",
		"nested": []any{
			map[string]any{"api_token": "abc", "port": 22.0, "auth": map[string]any{"client_secret": map[string]any{"deep": "x"}}},
		},
		"empty_token": nil,
	}
	out := secret.Mask(in).(map[string]any)
	b, _ := json.Marshal(out)
	for _, leak := range []string{"hunter2", `"abc"`, `"deep"`} {
		if strings.Contains(string(b), leak) {
			t.Fatalf("masked output leaks %s: %s", leak, b)
		}
	}
	want := `{"credentials_ref":"vault:kv/db#password","db_password":"***","empty_token":null,"name":"web","nested":[{"api_token":"***","auth":{"client_secret":"***"},"port":22}]}`
	if string(b) != want {
		t.Fatalf("Mask = %s\nwant  %s", b, want)
	}
	if in["db_password"] != "hunter2" {
		t.Fatal("Mask modified its input")
	}

	type wire struct {
		Name  string `json:"name"`
		Token string `json:"token"`
	}
	if got, _ := json.Marshal(secret.Mask(wire{Name: "a", Token: "t0ps3cret"})); string(got) != `{"name":"a","token":"***"}` {
		t.Fatalf("Mask(struct) = %s", got)
	}
}

func TestRegisteredSecretMaskedEverywhere(t *testing.T) {
	t.Parallel()
	const resolved = "resolved-secret-31f0a"
	k := secret.NewKeeper()
	k.Register(resolved)
	k.Register("abc") // too short to register: masking it would wreck output
	got, _ := json.Marshal(k.Mask(map[string]any{"stdout": "the value is " + resolved + "!", "list": []any{resolved}}))
	if strings.Contains(string(got), resolved) || !strings.Contains(string(got), "the value is ***!") {
		t.Fatalf("registered secret not masked: %s", got)
	}
	if s := k.MaskString("abc abc"); s != "abc abc" {
		t.Fatalf("short value was registered: %q", s)
	}
	if got := k.MaskJSON([]byte(`{"msg":"` + resolved + `","password":"p"}`)); strings.Contains(string(got), resolved) || strings.Contains(string(got), `"p"`) {
		t.Fatalf("MaskJSON = %s", got)
	}
	if got := k.MaskJSON([]byte("not json " + resolved)); string(got) != "not json ***" {
		t.Fatalf("MaskJSON(text) = %s", got)
	}
	// Another keeper's secrets are not this one's: nothing is process-wide.
	if got := secret.NewKeeper().MaskString("v=" + resolved); got != "v="+resolved {
		t.Fatalf("a second keeper masks the first's secret: %q", got)
	}
}

func TestLogHandlerMasks(t *testing.T) {
	t.Parallel()
	const resolved = "log-canary-99aa01"
	k := secret.NewKeeper()
	k.Register(resolved)
	var buf bytes.Buffer
	log := slog.New(k.LogHandler(slog.NewJSONHandler(&buf, nil)))
	log = log.With("session_token", "with-attr-secret")
	log.Info("connecting with "+resolved,
		"password", "pw-in-attr",
		"cfg", map[string]any{"private_key": "-----BEGIN", "host": "h1"},
		slog.Group("db", "url", "postgres://u:"+resolved+"@h/db", "credentials", "c1"),
		"err", errString("dial failed: "+resolved),
	)
	out := buf.String()
	for _, leak := range []string{resolved, "pw-in-attr", "-----BEGIN", "with-attr-secret", `"c1"`} {
		if strings.Contains(out, leak) {
			t.Fatalf("log line leaks %q: %s", leak, out)
		}
	}
	for _, keep := range []string{`"host":"h1"`, "dial failed: ***", "connecting with ***"} {
		if !strings.Contains(out, keep) {
			t.Fatalf("log line lost %q: %s", keep, out)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// FuzzMask: whatever the document, a value under a secret-looking key never
// survives masking, and masking never panics.
func FuzzMask(f *testing.F) {
	f.Add(`{"token":"s3cr3t-value"}`)
	f.Add(`{"a":[{"Password":"s3cr3t-value"}],"b":{"x_secret":{"y":"s3cr3t-value"}}}`)
	f.Add(`{"credentials":["s3cr3t-value",1,null]}`)
	f.Add(`[1,"two",{"private_key":"k3y-material"}]`)
	f.Fuzz(func(t *testing.T, doc string) {
		var v any
		if json.Unmarshal([]byte(doc), &v) != nil {
			secret.MaskJSON([]byte(doc)) // must not panic on anything
			return
		}
		out := secret.Mask(v)
		b, err := json.Marshal(out)
		if err != nil {
			t.Fatalf("masked value does not marshal: %v", err)
		}
		// Every string that sits under a sensitive key in the input is gone
		// from the output, unless it also appears under a non-sensitive key.
		exposed := map[string]bool{}
		hidden := map[string]bool{}
		walk(v, false, exposed, hidden)
		for s := range hidden {
			if len(s) < 3 || exposed[s] || strings.Contains(secret.Masked, s) {
				continue
			}
			enc, _ := json.Marshal(s)
			if bytes.Contains(b, enc) {
				t.Fatalf("secret %q survived masking: %s", s, b)
			}
		}
	})
}

func walk(v any, under bool, exposed, hidden map[string]bool) {
	switch x := v.(type) {
	case string:
		if under {
			hidden[x] = true
		} else {
			exposed[x] = true
		}
	case map[string]any:
		for k, val := range x {
			if !under {
				exposed[k] = true // keys stay visible
			}
			walk(val, under || secret.IsSensitiveKey(k), exposed, hidden)
		}
	case []any:
		for _, val := range x {
			walk(val, under, exposed, hidden)
		}
	}
}
