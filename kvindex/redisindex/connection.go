package redisindex

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Connection is the shared index as kvrouter's config file states it (the
// index.redis section): where the server is, how to authenticate, and the
// keys' prefix and TTL. The password is named (an environment variable or
// a file), never written in the config, and never logged.
type Connection struct {
	Address      string        `yaml:"address"`       // host:port; comma-separated seed nodes with Cluster
	Cluster      bool          `yaml:"cluster"`       // a Redis Cluster
	Username     string        `yaml:"username"`      // the ACL user; empty: the default user
	PasswordEnv  string        `yaml:"password_env"`  // the environment variable holding the password
	PasswordFile string        `yaml:"password_file"` // a file holding the password (a mounted Secret)
	TLS          bool          `yaml:"tls"`           // connect with TLS
	TLSCAFile    string        `yaml:"tls_ca_file"`   // CAs that sign the server's certificate; empty: the system's
	KeyPrefix    string        `yaml:"key_prefix"`    // Config.Prefix
	TTL          time.Duration `yaml:"ttl"`           // Config.TTL
}

// DefaultConnection is DefaultConfig's prefix and TTL, with no address.
func DefaultConnection() Connection {
	d := DefaultConfig()
	return Connection{KeyPrefix: d.Prefix, TTL: d.TTL}
}

// Config checks c, every problem at once, each starting with its key, and
// returns the backend's configuration with the password read.
// speculativeTTL is the index's: block keys must outlive it.
func (c Connection) Config(speculativeTTL time.Duration) (Config, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	cfg := DefaultConfig()
	if c.Address == "" {
		bad("address: empty, want host:port")
	}
	for a := range strings.SplitSeq(c.Address, ",") {
		if a = strings.TrimSpace(a); a != "" {
			cfg.Addrs = append(cfg.Addrs, a)
		}
	}
	if len(cfg.Addrs) > 1 && !c.Cluster {
		bad("address: %d servers, want one unless cluster is set", len(cfg.Addrs))
	}
	cfg.Cluster, cfg.Username, cfg.Prefix, cfg.TTL = c.Cluster, c.Username, c.KeyPrefix, c.TTL
	switch {
	case c.PasswordEnv != "" && c.PasswordFile != "":
		bad("password_env: and password_file are both set; give one")
	case c.PasswordEnv != "":
		pw, ok := os.LookupEnv(c.PasswordEnv)
		if !ok {
			bad("password_env: the environment variable %s is not set", c.PasswordEnv)
		}
		cfg.Password = pw
	case c.PasswordFile != "":
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			bad("password_file: %w", err)
		}
		cfg.Password = strings.TrimRight(string(b), "\r\n")
	}
	if c.TLSCAFile != "" && !c.TLS {
		bad("tls_ca_file: given, yet tls is off; set it")
	}
	if c.TLS {
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if c.TLSCAFile != "" {
			pem, err := os.ReadFile(c.TLSCAFile)
			pool := x509.NewCertPool()
			switch {
			case err != nil:
				bad("tls_ca_file: %w", err)
			case !pool.AppendCertsFromPEM(pem):
				bad("tls_ca_file: %s holds no PEM certificate", c.TLSCAFile)
			}
			cfg.TLS.RootCAs = pool
		}
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		bad("key_prefix: %q, want no braces (Redis Cluster hash tags)", cfg.Prefix)
	}
	if cfg.TTL != 0 && cfg.TTL < speculativeTTL {
		bad("ttl: %v, want at least the speculative TTL (%v), or 0 for none", cfg.TTL, speculativeTTL)
	}
	return cfg, errors.Join(errs...)
}
