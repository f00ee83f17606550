package main

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/fixture/redisserver"
	"github.com/kvrouter/kvrouter/kvindex"
)

// TestRedisSettings: index.redis.* becomes the redis backend's config, the
// password comes from the environment or a file and no problem quotes it,
// and every problem names its setting.
func TestRedisSettings(t *testing.T) {
	pwFile := writeFile(t, "pw", "file-secret\n")
	t.Setenv("KVROUTER_TEST_REDIS_PW", "env-secret")
	for _, tt := range []struct {
		name     string
		args     []string
		password string   // with no problem
		problems []string // each in the error, in order
	}{
		{name: "memory", args: nil},
		{
			name: "env password", password: "env-secret",
			args: []string{"--index-backend", "redis", "--index-redis-addr", "r:6379", "--index-redis-password-env", "KVROUTER_TEST_REDIS_PW"},
		},
		{
			name: "file password", password: "file-secret",
			args: []string{"--index-backend", "redis", "--index-redis-addr", "r:6379", "--index-redis-password-file", pwFile},
		},
		{
			name: "removed settings", args: []string{"--index-backend", "redis", "--index-redis-addr", "r:6379", "--index-redis-home-sync", "10ms"},
			problems: []string{"--index-redis-home-sync: removed: the shared index's own constant now"},
		},
		{name: "bad backend", args: []string{"--index-backend", "etcd"}, problems: []string{"--index-backend: \"etcd\", want memory or redis"}},
		{
			name: "address without redis", args: []string{"--index-redis-addr", "r:6379"},
			problems: []string{"--index-redis-addr: \"r:6379\", yet index.backend is memory"},
		},
		{name: "everything wrong", args: []string{
			"--index-backend", "redis", "--index-redis-addr", "a:1,b:2", "--index-redis-password-env", "KVROUTER_TEST_REDIS_PW",
			"--index-redis-password-file", pwFile, "--index-redis-tls-ca", "/nonexistent", "--index-redis-ttl", "30s",
			"--index-redis-key-prefix", "{x}",
		}, problems: []string{
			"--index-redis-addr: 2 servers, want one unless cluster is set",
			"--index-redis-password-env: and password_file are both set",
			"--index-redis-tls-ca: given, yet tls is off",
			"--index-redis-key-prefix: \"{x}\", want no braces",
			"--index-redis-ttl: 30s, want at least the speculative TTL",
		}},
		{
			name: "missing env and no address", args: []string{"--index-backend", "redis", "--index-redis-password-env", "KVROUTER_TEST_NO_SUCH_VAR"},
			problems: []string{"index.redis.address: empty", "--index-redis-password-env: the environment variable KVROUTER_TEST_NO_SUCH_VAR is not set"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := loadConfig(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			s, err := c.validate("")
			if len(tt.problems) == 0 {
				if err != nil {
					t.Fatalf("validate(%v) = %v, want no problem", tt.args, err)
				}
				if (s.redis == nil) != (tt.password == "") {
					t.Fatalf("validate(%v): redis settings %v", tt.args, s.redis)
				}
				if s.redis != nil && s.redis.Password != tt.password {
					t.Errorf("validate(%v): password %q, want %q", tt.args, s.redis.Password, tt.password)
				}
				if s.redis != nil && (s.redis.TTL != time.Hour || s.redis.Addrs[0] != "r:6379") {
					t.Errorf("validate(%v) = %+v, want the defaults and the address", tt.args, s.redis)
				}
				return
			}
			if err == nil {
				t.Fatalf("validate(%v) = nil, want %q", tt.args, tt.problems)
			}
			msg := err.Error()
			at := 0
			for _, p := range tt.problems {
				i := strings.Index(msg[at:], p)
				if i < 0 {
					t.Fatalf("validate(%v) = %s\nwant, after position %d, %q", tt.args, msg, at, p)
				}
				at += i + len(p)
			}
			if strings.Contains(msg, "secret") {
				t.Errorf("validate(%v) quotes the password: %s", tt.args, msg)
			}
		})
	}
}

// TestRedisBackendWiring: with index.backend redis the router, the fleet
// and the event manager use the shared index, and /readyz says when its
// Redis is unreachable while the replica stays ready.
func TestRedisBackendWiring(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	_ = l.Close() // nothing listens there now
	c, err := loadConfig([]string{
		"--index-backend", "redis", "--index-redis-addr", dead,
		"--pod", "a=127.0.0.1:1,model=m", "--kubeconfig", "off",
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.validate("")
	if err != nil {
		t.Fatal(err)
	}
	a, err := newAppOn(s, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if a.shared == nil || a.shared.Local() != a.index {
		t.Fatalf("app.shared = %v, want the redis backend over the app's index", a.shared)
	}
	if ready, why := a.readiness(); strings.Contains(why, "Redis") {
		t.Errorf("before any round trip: readiness = %v, %q, want no Redis detail", ready, why)
	}
	id := a.shared.AddPod("a", "m")
	ms := a.shared.Match("m", []uint64{1, 2}, []kvindex.PodID{id}, nil) // fails: Redis is down
	if len(ms) != 1 || ms[0].Blocks != 0 {
		t.Errorf("Match with Redis down = %+v, want the local view's empty match", ms)
	}
	if _, why := a.readiness(); !strings.Contains(why, "Redis is unreachable") {
		t.Errorf("readiness with Redis down = %q, want it to say so", why)
	}
}

// TestRedisNoTTL: index.redis.ttl 0 is valid (no TTL on block keys, the
// server's maxmemory the bound), not taken for a TTL below the speculative
// one; against a server whose maxmemory does not bound the keys /readyz
// says so once the index runs.
func TestRedisNoTTL(t *testing.T) {
	srv := redisserver.New(t)
	c, err := loadConfig([]string{
		"--index-backend", "redis", "--index-redis-addr", srv.Addr, "--index-redis-ttl", "0",
		"--pod", "a=127.0.0.1:1,model=m", "--kubeconfig", "off",
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.validate("")
	if err != nil {
		t.Fatalf("validate = %v, want no problem", err)
	}
	if s.redis == nil || s.redis.TTL != 0 {
		t.Fatalf("redis settings %+v, want TTL 0", s.redis)
	}
	a, err := newAppOn(s, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if _, why := a.readiness(); strings.Contains(why, "maxmemory") {
		t.Errorf("readiness before the index ran = %q, want no word of maxmemory", why)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.shared.Run(ctx) }()
	for deadline := time.Now().Add(20 * time.Second); !a.shared.Unbounded() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	_, why := a.readiness()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(why, "maxmemory does not bound them") {
		t.Errorf("readiness with no maxmemory = %q, want it to say the keys are unbounded", why)
	}
}
