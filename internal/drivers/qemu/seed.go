package qemu

import (
	"bytes"
	"fmt"
	"mime/multipart"
	"net/netip"
	"net/textproto"
	"os"
	"strings"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
	"github.com/goccy/go-yaml"
)

// GatewayName is the name every VM's /etc/hosts gives its bridge's host
// address, where the keeper answers (the same name the local driver's VMs
// use, so the keeper's userdata and TLS certificate serve both).
const GatewayName = "soulstack-local-gateway"

// maxUserdata bounds the keeper's userdata of one VM.
const maxUserdata = 1 << 20

// seed is what a VM's NoCloud seed says.
type seed struct {
	InstanceID string
	FQDN       string
	IP         netip.Prefix
	Gateway    netip.Addr
	MAC        string
	DNS        []netip.Addr
	// HostKey is the VM's sshd host key (OpenSSH PEM) and its public half.
	HostKey, HostKeyPub string
	// AuthorizedKeys are the keeper's keys for the login user; Root says
	// that user is root (which Debian's cloud-init refuses by default).
	AuthorizedKeys []string
	Root           bool
	// Userdata is the keeper's userdata for the VM, passed on unchanged
	// as the first part.
	Userdata string
}

// metaData is the seed's meta-data: the instance ID that tells
// cloud-init a new machine (the VM's ID) and its hostname (the SID).
func (s seed) metaData() []byte {
	b, _ := yaml.Marshal(map[string]string{"instance-id": s.InstanceID, "local-hostname": s.FQDN})
	return b
}

// networkConfig is a version 1 network config: the VM's address on the
// bridge, static, matched by its MAC.
func (s seed) networkConfig() []byte {
	dns := make([]string, len(s.DNS))
	for i, a := range s.DNS {
		dns[i] = a.String()
	}
	b, _ := yaml.Marshal(map[string]any{"version": 1, "config": []any{map[string]any{
		"type": "physical", "name": "eth0", "mac_address": s.MAC,
		"subnets": []any{map[string]any{"type": "static", "address": s.IP.String(), "gateway": s.Gateway.String(), "dns_nameservers": dns}},
	}}})
	return b
}

// userData is a MIME multipart document cloud-init reads part by part:
// the keeper's userdata unchanged, then the driver's cloud-config (the
// host key it generated, so it can report the key at once, and the FQDN
// as the hostname), then a boot hook that runs early at every boot and
// names the gateway in /etc/hosts (and in cloud-init's hosts template,
// for images that let cloud-init manage /etc/hosts) and the resolvers in
// /etc/resolv.conf. The driver's parts use no key the keeper's userdata
// is likely to (lists of two cloud-config parts replace each other).
func (s seed) userData() ([]byte, error) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	fmt.Fprintf(&buf, "Content-Type: multipart/mixed; boundary=%q\nMIME-Version: 1.0\n\n", w.Boundary())
	part := func(ctype, body string) error {
		h := textproto.MIMEHeader{}
		h.Set("Content-Type", ctype+`; charset="utf-8"`)
		h.Set("MIME-Version", "1.0")
		pw, err := w.CreatePart(h)
		if err != nil {
			return err
		}
		_, err = pw.Write([]byte(body))
		return err
	}
	if s.Userdata != "" {
		if err := part(userdataType(s.Userdata), s.Userdata); err != nil {
			return nil, err
		}
	}
	doc := map[string]any{
		// This part adds to the keeper's: its lists are appended, and a key
		// the keeper's part sets keeps the keeper's value.
		"merge_how": "list(append)+dict(no_replace,recurse_list)+str()",
		"fqdn":      s.FQDN, "hostname": s.FQDN, "prefer_fqdn_over_hostname": true, "preserve_hostname": false,
		"manage_etc_hosts": true,
		"ssh_deletekeys":   true,
		"ssh_keys":         map[string]string{"ed25519_private": s.HostKey, "ed25519_public": s.HostKeyPub},
	}
	if len(s.AuthorizedKeys) > 0 {
		keys := make([]string, len(s.AuthorizedKeys))
		for i, k := range s.AuthorizedKeys {
			keys[i] = strings.TrimSpace(k)
		}
		doc["ssh_authorized_keys"] = keys
	}
	if s.Root {
		doc["disable_root"] = false
	}
	cfg, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	if err := part("text/cloud-config", "#cloud-config\n"+string(cfg)); err != nil {
		return nil, err
	}
	var hook strings.Builder
	hook.WriteString("#cloud-boothook\n#!/bin/sh\n")
	line := s.Gateway.String() + " " + GatewayName
	for _, f := range []string{"/etc/hosts", "/etc/cloud/templates/hosts.debian.tmpl"} {
		fmt.Fprintf(&hook, "if [ -f %[1]s ] && ! grep -q ' %[2]s$' %[1]s; then echo '%[3]s' >> %[1]s; fi\n", f, GatewayName, line)
	}
	if len(s.DNS) > 0 {
		hook.WriteString("if [ ! -L /etc/resolv.conf ]; then printf '")
		for _, a := range s.DNS {
			hook.WriteString("nameserver " + a.String() + `\n`)
		}
		hook.WriteString("' > /etc/resolv.conf; fi\n")
	}
	if err := part("text/cloud-boothook", hook.String()); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// userdataType is the MIME type cloud-init gives a userdata by its first
// line.
func userdataType(u string) string {
	first, _, _ := strings.Cut(u, "\n")
	switch {
	case strings.HasPrefix(first, "#cloud-config"):
		return "text/cloud-config"
	case strings.HasPrefix(first, "#!"):
		return "text/x-shellscript"
	case strings.HasPrefix(first, "#cloud-boothook"):
		return "text/cloud-boothook"
	case strings.HasPrefix(first, "#include"):
		return "text/x-include-url"
	}
	return "text/plain"
}

// writeISO writes the seed as an ISO 9660 image with Rock Ridge names and
// the volume label cidata, which cloud-init's NoCloud data source looks
// for.
func (s seed) writeISO(path string) error {
	ud, err := s.userData()
	if err != nil {
		return err
	}
	files := map[string][]byte{"meta-data": s.metaData(), "user-data": ud, "network-config": s.networkConfig()}
	size := int64(1 << 20)
	for _, b := range files {
		size += int64(len(b)) + 4096
	}
	_ = os.Remove(path)
	work, err := os.MkdirTemp("", "soulstack-seed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	back, err := file.CreateFromPath(path, size)
	if err != nil {
		return err
	}
	defer back.Close()
	fs, err := iso9660.Create(back, size, 0, 2048, work)
	if err != nil {
		return err
	}
	for name, b := range files {
		f, err := fs.OpenFile("/"+name, os.O_CREATE|os.O_RDWR)
		if err != nil {
			return err
		}
		if _, err := f.Write(b); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return fs.Finalize(iso9660.FinalizeOptions{RockRidge: true, VolumeIdentifier: "cidata"})
}
