package router

import (
	"net"
	"strings"
)

// Subset is an endpoint subset hint: the endpoints a request may go to
// (the Gateway API Inference Extension's x-gateway-destination-endpoint-
// subset). A nil *Subset allows every endpoint.
type Subset struct {
	endpoints map[string]bool // "ip:port": exactly that endpoint
	hosts     map[string]bool // "ip": every port on that address
}

// ParseSubset reads a subset hint's entries, as header-to-metadata rules and
// gateways give them: each entry may hold several, comma-separated, with
// spaces; "ip:port" (or "[v6]:port") allows that endpoint, a bare IP every
// port on it. It returns the subset and the number of entries that are
// neither, which it ignores. A hint whose every entry is ignored allows
// nothing: the request stays inside the gateway's subset, or is refused.
func ParseSubset(entries []string) (s *Subset, ignored int) {
	s = &Subset{endpoints: map[string]bool{}, hosts: map[string]bool{}}
	for _, e := range entries {
		for part := range strings.SplitSeq(e, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			if ip := net.ParseIP(strings.Trim(part, "[]")); ip != nil {
				s.hosts[ip.String()] = true
				continue
			}
			if ep, ok := canonicalEndpoint(part); ok {
				s.endpoints[ep] = true
				continue
			}
			ignored++
		}
	}
	return s, ignored
}

// Allows reports whether endpoint ("ip:port") is in the subset.
func (s *Subset) Allows(endpoint string) bool {
	if s == nil || s.endpoints[endpoint] {
		return true
	}
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return false
	}
	if s.hosts[host] {
		return true
	}
	// An endpoint not written canonically ("[::ffff:a.b.c.d]:p", say).
	ep, ok := canonicalEndpoint(endpoint)
	if !ok || ep == endpoint {
		return false
	}
	host, _, _ = net.SplitHostPort(ep)
	return s.endpoints[ep] || s.hosts[host]
}

// Len is the number of endpoints and addresses the subset names.
func (s *Subset) Len() int {
	if s == nil {
		return 0
	}
	return len(s.endpoints) + len(s.hosts)
}

// canonicalEndpoint writes "ip:port" with the IP in its shortest form; ok
// is false for anything but an IP and a port in 1..65535.
func canonicalEndpoint(v string) (string, bool) {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return "", false
	}
	ip := net.ParseIP(host)
	if ip == nil || port == "" || len(port) > 5 {
		return "", false
	}
	n := 0
	for _, c := range port {
		if c < '0' || c > '9' {
			return "", false
		}
		n = n*10 + int(c-'0')
	}
	if n < 1 || n > 65535 {
		return "", false
	}
	return net.JoinHostPort(ip.String(), port), true
}
