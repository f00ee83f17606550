package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"

	"github.com/kvrouter/kvrouter/kvindex"
	"github.com/kvrouter/kvrouter/kvindex/redisindex"
)

// redisSettings checks index.backend and index.redis.*, and returns the
// redis backend's configuration, or nil for the memory backend. The
// password is read here (an environment variable or a file) and goes
// nowhere but the client: no problem quotes it.
func (c config) redisSettings(idx kvindex.Config, p *problems) *redisindex.Config {
	r := c.Index.Redis
	switch c.Index.Backend {
	case "memory":
		if r.Address != "" {
			p.add("index.redis.address: %q, yet index.backend is memory; set it to redis", r.Address)
		}
		return nil
	case "redis":
	default:
		p.add("index.backend: %q, want memory or redis", c.Index.Backend)
		return nil
	}
	cfg := redisindex.DefaultConfig()
	if r.Address == "" {
		p.add("index.redis.address: empty, want host:port with index.backend redis")
	}
	for a := range strings.SplitSeq(r.Address, ",") {
		if a = strings.TrimSpace(a); a != "" {
			cfg.Addrs = append(cfg.Addrs, a)
		}
	}
	if len(cfg.Addrs) > 1 && !r.Cluster {
		p.add("index.redis.address: %d servers, want one unless index.redis.cluster is set", len(cfg.Addrs))
	}
	cfg.Cluster, cfg.Username, cfg.Prefix, cfg.TTL = r.Cluster, r.Username, r.KeyPrefix, r.TTL
	switch {
	case r.PasswordEnv != "" && r.PasswordFile != "":
		p.add("index.redis.password_env: and index.redis.password_file are both set; give one")
	case r.PasswordEnv != "":
		pw, ok := os.LookupEnv(r.PasswordEnv)
		if !ok {
			p.add("index.redis.password_env: the environment variable %s is not set", r.PasswordEnv)
		}
		cfg.Password = pw
	case r.PasswordFile != "":
		b, err := os.ReadFile(r.PasswordFile)
		if err != nil {
			p.add("index.redis.password_file: %v", err)
		}
		cfg.Password = strings.TrimRight(string(b), "\r\n")
	}
	if r.TLSCAFile != "" && !r.TLS {
		p.add("index.redis.tls_ca_file: given, yet index.redis.tls is off; set it")
	}
	if r.TLS {
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if r.TLSCAFile != "" {
			pem, err := os.ReadFile(r.TLSCAFile)
			pool := x509.NewCertPool()
			switch {
			case err != nil:
				p.add("index.redis.tls_ca_file: %v", err)
			case !pool.AppendCertsFromPEM(pem):
				p.add("index.redis.tls_ca_file: %s holds no PEM certificate", r.TLSCAFile)
			}
			cfg.TLS.RootCAs = pool
		}
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		p.add("index.redis.key_prefix: %q, want no braces (Redis Cluster hash tags)", cfg.Prefix)
	}
	if cfg.TTL != 0 && cfg.TTL < idx.SpeculativeTTL {
		p.add("index.redis.ttl: %v, want at least the speculative TTL (%v), or 0 for none", cfg.TTL, idx.SpeculativeTTL)
	}
	return &cfg
}
