package openstack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/textproto"
	"strings"

	"github.com/soulstack/soulstack/driversdk"
)

// maxUserdata is Nova's limit on user_data (65535 bytes, base64
// encoded).
const maxUserdata = 65535 / 4 * 3

// buildUserdata gives cloud-init the keeper's keys and the step's own
// userdata: the keys alone as a #cloud-config, or both in a multipart
// MIME archive whose parts cloud-init merges (lists appended). nil means
// no userdata.
func buildUserdata(userdata string, keys []string) ([]byte, error) {
	if len(keys) == 0 && userdata == "" {
		return nil, nil
	}
	var keysDoc []byte
	if len(keys) > 0 {
		var b strings.Builder
		b.WriteString("#cloud-config\nssh_authorized_keys:\n")
		for _, k := range keys {
			q, _ := json.Marshal(strings.TrimSpace(k)) // a JSON string is a YAML string
			fmt.Fprintf(&b, "  - %s\n", q)
		}
		keysDoc = []byte(b.String())
	}
	var out []byte
	switch {
	case userdata == "":
		out = keysDoc
	case keysDoc == nil:
		out = []byte(userdata)
	default:
		var buf bytes.Buffer
		w := multipart.NewWriter(&buf)
		fmt.Fprintf(&buf, "Content-Type: multipart/mixed; boundary=%q\nMIME-Version: 1.0\n\n", w.Boundary())
		for _, part := range []struct{ typ, body string }{
			{"text/cloud-config", string(keysDoc)},
			{userdataType(userdata), userdata},
		} {
			pw, err := w.CreatePart(textproto.MIMEHeader{
				"Content-Type": {part.typ + `; charset="utf-8"`},
				"Merge-Type":   {"list(append)+dict(recurse_array,no_replace)+str()"},
			})
			if err != nil {
				return nil, err
			}
			if _, err := pw.Write([]byte(part.body)); err != nil {
				return nil, err
			}
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		out = buf.Bytes()
	}
	if len(out) > maxUserdata {
		return nil, driversdk.InvalidProfile("userdata", fmt.Sprintf("is %d bytes with the keeper's keys; Nova takes at most %d", len(out), maxUserdata))
	}
	return out, nil
}

// userdataType is the MIME type cloud-init knows a userdata by.
func userdataType(u string) string {
	switch {
	case strings.HasPrefix(u, "#cloud-config"):
		return "text/cloud-config"
	case strings.HasPrefix(u, "#!"):
		return "text/x-shellscript"
	case strings.HasPrefix(u, "#cloud-boothook"):
		return "text/cloud-boothook"
	}
	return "text/plain"
}
