package redisindex

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config configures an Index.
type Config struct {
	// Addrs are the Redis or Valkey servers, host:port: one for a
	// standalone server, the seed nodes with Cluster.
	Addrs []string
	// Cluster selects the cluster client, which sends a pipeline to each
	// node that owns some of its keys, in parallel.
	Cluster bool
	// Username and Password authenticate (ACL or requirepass). The password
	// is never logged.
	Username, Password string
	// TLS, when set, encrypts the connections.
	TLS *tls.Config
	// Prefix starts every key, so that several fleets can share a server.
	// Default "kvrouter:".
	Prefix string
	// TTL is how long a block key lives after its last write: the bound on
	// entries a dead writer or a lost clear can leave. At least the
	// speculative TTL. Default 1h. 0: block keys get no TTL, and Redis's
	// maxmemory with an allkeys-lfu or allkeys-lru policy is the only bound
	// (Run checks the policy and logs an error when it is another): a new
	// block costs Redis one command, not two.
	TTL time.Duration
	// Groups is how many Redis Cluster slots a namespace's blocks spread
	// over (and so the most one match touches, plus one). Default 16.
	Groups int
	// MaxHolders bounds the records of one block key a match reads (the
	// holder bound); a longer key is refused. Compaction keeps a key near
	// one record per live holder. Default 1024.
	MaxHolders int
	// LeaseTTL is how long a pod's writer lease lasts unrenewed; it is
	// renewed every LeaseTTL/3, so a dead holder's pods are taken over
	// within about LeaseTTL*4/3. Default 5s.
	LeaseTTL time.Duration
	// Timeout bounds one round trip; past it Redis is marked down. Default
	// 250ms.
	Timeout time.Duration
	// PingInterval is how often a replica that marked Redis down checks it
	// again. Default 1s.
	PingInterval time.Duration
	// Replica names this replica in the leases it holds; "" picks a random
	// name.
	Replica string
	// NoLocalView stops feeding events to the local view, which then only
	// registers pods: a replica's memory no longer grows with the index,
	// but while Redis is down it routes by load alone, and a lease it takes
	// continues the pod with its recent removals only: blocks stored while
	// no replica wrote the pod return with its next events.
	NoLocalView bool
	// NoSharedLoad stops sharing the in-flight prefill: Charge publishes
	// nothing and matches report no other replica's load.
	NoSharedLoad bool
	// NoSharedHomes stops sharing the router's homes (ShareHomes): each
	// replica keeps its own, and they step aside while other replicas
	// route to the pods.
	NoSharedHomes bool
	// HomeSync is how often the router's homes are shared with the other
	// replicas' (homes.go). Default 250ms.
	HomeSync time.Duration
	// Now is the clock of speculative deadlines and epochs; nil means
	// time.Now. The fleet simulator injects its own.
	Now func() time.Time
}

// DefaultConfig returns the defaults documented on Config's fields, with no
// address.
func DefaultConfig() Config {
	return Config{
		Prefix:       "kvrouter:",
		TTL:          time.Hour,
		Groups:       16,
		MaxHolders:   1024,
		LeaseTTL:     5 * time.Second,
		Timeout:      250 * time.Millisecond,
		PingInterval: time.Second,
		HomeSync:     250 * time.Millisecond,
	}
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if len(c.Addrs) == 0 {
		errs = append(errs, errors.New("address: none, want host:port"))
	}
	for _, a := range c.Addrs {
		if i := strings.LastIndexByte(a, ':'); i <= 0 || i == len(a)-1 {
			errs = append(errs, fmt.Errorf("address %q, want host:port", a))
		}
	}
	if strings.ContainsAny(c.Prefix, "{}") {
		errs = append(errs, fmt.Errorf("key prefix %q: braces are Redis Cluster hash tags, want none", c.Prefix))
	}
	if c.TTL != 0 && c.TTL < time.Second {
		errs = append(errs, fmt.Errorf("ttl = %v, want at least 1s, or 0 for none", c.TTL))
	}
	if c.Groups < 1 || c.Groups > 16384 {
		errs = append(errs, fmt.Errorf("groups = %d, want in [1, 16384]", c.Groups))
	}
	if c.MaxHolders < 1 {
		errs = append(errs, fmt.Errorf("max holders = %d, want at least 1", c.MaxHolders))
	}
	if c.LeaseTTL < 300*time.Millisecond {
		errs = append(errs, fmt.Errorf("lease ttl = %v, want at least 300ms", c.LeaseTTL))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout = %v, want > 0", c.Timeout))
	}
	if c.HomeSync <= 0 {
		errs = append(errs, fmt.Errorf("home sync = %v, want > 0", c.HomeSync))
	}
	if c.PingInterval <= 0 {
		errs = append(errs, fmt.Errorf("ping interval = %v, want > 0", c.PingInterval))
	}
	return errors.Join(errs...)
}
