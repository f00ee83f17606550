package certs

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// Settings is a server's TLS as kvrouter's config file states it (the
// extproc.tls section): whether it is on, and the files Config reads.
type Settings struct {
	Mode           string        `yaml:"mode"`            // auto, on or off
	CertFile       string        `yaml:"cert_file"`       // PEM certificate (chain); empty: self-signed
	KeyFile        string        `yaml:"key_file"`        // PEM key of CertFile
	ClientCAFile   string        `yaml:"client_ca_file"`  // PEM bundle of client CAs: mutual TLS
	ReloadInterval time.Duration `yaml:"reload_interval"` // how often the files are read for changes
}

// DefaultSettings is TLS on when auto says so, with a self-signed
// certificate, the files checked every 10s.
func DefaultSettings() Settings { return Settings{Mode: "auto", ReloadInterval: 10 * time.Second} }

// Resolve checks s, every problem at once, each starting with its key, and
// says how the server serves: nil for plaintext. auto is on when auto is
// true (kvrouter: when it discovers pods in Kubernetes).
func (s Settings) Resolve(auto bool) (*Config, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	on := false
	switch s.Mode {
	case "on":
		on = true
	case "auto":
		on = auto
	case "off":
	default:
		bad("mode: %q, want auto, on or off", s.Mode)
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		key, other := "cert_file", "key_file"
		if s.CertFile == "" {
			key, other = other, key
		}
		bad("%s: without %s; give both, or neither for a self-signed certificate", key, other)
	}
	for _, f := range []struct{ key, path string }{{"cert_file", s.CertFile}, {"key_file", s.KeyFile}, {"client_ca_file", s.ClientCAFile}} {
		if _, err := os.Stat(f.path); f.path != "" && err != nil {
			bad("%s: %w", f.key, err)
		}
	}
	if s.ReloadInterval <= 0 {
		bad("reload_interval: %v, want > 0", s.ReloadInterval)
	}
	if !on && (s.CertFile != "" || s.ClientCAFile != "") {
		bad("mode: %q leaves TLS off (auto is on only with Kubernetes discovery), yet certificate files are given; set it to on", s.Mode)
	}
	if err := errors.Join(errs...); err != nil || !on {
		return nil, err
	}
	return &Config{CertFile: s.CertFile, KeyFile: s.KeyFile, ClientCAFile: s.ClientCAFile, CheckEvery: s.ReloadInterval}, nil
}
