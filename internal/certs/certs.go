// Package certs keeps a TLS server's certificate current without a restart:
// certificate and key files reloaded when they change on disk (a Kubernetes
// Secret's volume swaps them under the process), or a self-signed
// certificate generated at start and renewed before it expires; and, for
// mutual TLS, the bundle of client CAs, reloaded the same way. Each
// handshake uses what is current, so open connections are never dropped.
package certs

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config says where a server's certificate comes from.
type Config struct {
	// CertFile and KeyFile are a PEM certificate (chain) and its key, both
	// or neither; neither: a self-signed certificate.
	CertFile, KeyFile string
	// ClientCAFile is a PEM bundle of the CAs whose client certificates are
	// accepted; every client must then present one (mutual TLS). "": none
	// asked.
	ClientCAFile string
	// Hosts are the self-signed certificate's DNS names and IPs. Default:
	// localhost, 127.0.0.1, ::1 and the host name.
	Hosts []string
	// CheckEvery is how often the files are read for changes. Default 10s.
	CheckEvery time.Duration
	// Validity is a self-signed certificate's lifetime; it is renewed once
	// two thirds have passed. Default 90 days.
	Validity time.Duration
}

func (c Config) withDefaults() Config {
	if c.CheckEvery <= 0 {
		c.CheckEvery = 10 * time.Second
	}
	if c.Validity <= 0 {
		c.Validity = 90 * 24 * time.Hour
	}
	if len(c.Hosts) == 0 {
		c.Hosts = []string{"localhost", "127.0.0.1", "::1"}
		if h, err := os.Hostname(); err == nil && h != "" {
			c.Hosts = append(c.Hosts, h)
		}
	}
	return c
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, errors.New("certificate and key files: give both or neither (neither: self-signed)"))
	}
	if c.CheckEvery < 0 || c.Validity < 0 {
		errs = append(errs, errors.New("check interval and validity: want >= 0"))
	}
	return errors.Join(errs...)
}

// Source is a server's current certificate and client CAs.
type Source struct {
	cfg     Config
	logger  *slog.Logger
	state   atomic.Pointer[state]
	mu      sync.Mutex // serializes renewals and reloads
	metrics *metrics
}

// state is what one handshake uses.
type state struct {
	cert      *tls.Certificate
	notAfter  time.Time
	renewAt   time.Time // self-signed only; zero for files
	clientCAs *x509.CertPool
	certPEM   []byte // the files as last loaded, to tell a change
	keyPEM    []byte
	caPEM     []byte
}

// New loads cfg's files, or generates a self-signed certificate, now: a bad
// file fails here. reg (nil: none) receives the certificate's expiry and the
// reloads.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg.withDefaults(), logger: logger, metrics: newMetrics()}
	st, err := s.load(time.Now())
	if err != nil {
		return nil, err
	}
	if reg != nil {
		if err := reg.Register(s.metrics.expiry); err != nil {
			return nil, err
		}
		if err := reg.Register(s.metrics.reloads); err != nil {
			return nil, err
		}
	}
	s.set(st)
	return s, nil
}

// SelfSigned reports whether the certificate is generated rather than read.
func (s *Source) SelfSigned() bool { return s.cfg.CertFile == "" }

// MutualTLS reports whether clients must present a certificate.
func (s *Source) MutualTLS() bool { return s.cfg.ClientCAFile != "" }

// TLSConfig is the server configuration to serve with: each handshake
// takes the current certificate and client CAs, and offers HTTP/2 (gRPC).
func (s *Source) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			st, err := s.current(time.Now())
			if err != nil {
				return nil, err
			}
			c := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*st.cert},
				NextProtos:   []string{"h2"},
			}
			if st.clientCAs != nil {
				c.ClientCAs, c.ClientAuth = st.clientCAs, tls.RequireAndVerifyClientCert
			}
			return c, nil
		},
	}
}

// current returns the state to handshake with, renewing a self-signed
// certificate that is due.
func (s *Source) current(now time.Time) (*state, error) {
	st := s.state.Load()
	if st.renewAt.IsZero() || now.Before(st.renewAt) {
		return st, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st = s.state.Load(); now.Before(st.renewAt) {
		return st, nil // renewed meanwhile
	}
	next, err := s.selfSigned(now)
	if err != nil {
		s.metrics.reloads.WithLabelValues("error").Inc()
		s.logger.Error("certs: renewing the self-signed certificate failed; serving the old one", "error", err, "not_after", st.notAfter)
		return st, nil
	}
	next.clientCAs, next.caPEM = st.clientCAs, st.caPEM
	s.set(next)
	s.metrics.reloads.WithLabelValues("renewed").Inc()
	s.logger.Info("certs: self-signed certificate renewed", "not_after", next.notAfter)
	return next, nil
}

func (s *Source) set(st *state) {
	s.state.Store(st)
	s.metrics.expiry.Set(float64(st.notAfter.Unix()))
}

// Run reads the files every CheckEvery and swaps in what changed, until ctx
// is done. A file that breaks keeps the last good one, and is logged.
func (s *Source) Run(ctx context.Context) error {
	if s.cfg.CertFile == "" && s.cfg.ClientCAFile == "" {
		return nil // nothing on disk to follow; renewals happen at handshakes
	}
	t := time.NewTicker(s.cfg.CheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.Reload()
		}
	}
}

// Reload reads the files now and swaps them in if they changed; it reports
// whether they did.
func (s *Source) Reload() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.state.Load()
	certPEM, keyPEM, caPEM, err := s.read()
	if err == nil && bytes.Equal(certPEM, old.certPEM) && bytes.Equal(keyPEM, old.keyPEM) && bytes.Equal(caPEM, old.caPEM) {
		return false
	}
	var next *state
	if err == nil {
		next, err = s.parse(certPEM, keyPEM, caPEM, time.Now())
	}
	if err != nil {
		s.metrics.reloads.WithLabelValues("error").Inc()
		s.logger.Warn("certs: the changed certificate files do not load; serving the last good ones", "error", err)
		return false
	}
	if s.cfg.CertFile == "" { // self-signed, with a client CA file
		next.cert, next.notAfter, next.renewAt = old.cert, old.notAfter, old.renewAt
	}
	s.set(next)
	s.metrics.reloads.WithLabelValues("reloaded").Inc()
	s.logger.Info("certs: certificate files reloaded", "not_after", next.notAfter)
	return true
}

// load is the first state: the files, or a fresh self-signed certificate.
func (s *Source) load(now time.Time) (*state, error) {
	certPEM, keyPEM, caPEM, err := s.read()
	if err != nil {
		return nil, err
	}
	st, err := s.parse(certPEM, keyPEM, caPEM, now)
	if err != nil {
		return nil, err
	}
	if s.cfg.CertFile == "" {
		ss, err := s.selfSigned(now)
		if err != nil {
			return nil, err
		}
		st.cert, st.notAfter, st.renewAt = ss.cert, ss.notAfter, ss.renewAt
	}
	return st, nil
}

func (s *Source) read() (certPEM, keyPEM, caPEM []byte, err error) {
	readFile := func(path string) []byte {
		if path == "" || err != nil {
			return nil
		}
		b, rerr := os.ReadFile(path)
		if rerr != nil {
			err = rerr
		}
		return b
	}
	certPEM, keyPEM, caPEM = readFile(s.cfg.CertFile), readFile(s.cfg.KeyFile), readFile(s.cfg.ClientCAFile)
	return certPEM, keyPEM, caPEM, err
}

// parse checks the files' contents; the certificate is nil when there are
// no certificate files.
func (s *Source) parse(certPEM, keyPEM, caPEM []byte, now time.Time) (*state, error) {
	st := &state{certPEM: certPEM, keyPEM: keyPEM, caPEM: caPEM}
	if s.cfg.CertFile != "" {
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("certs: %s and %s: %w", s.cfg.CertFile, s.cfg.KeyFile, err)
		}
		leaf := cert.Leaf
		if leaf == nil {
			if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
				return nil, fmt.Errorf("certs: %s: %w", s.cfg.CertFile, err)
			}
		}
		if now.After(leaf.NotAfter) {
			s.logger.Warn("certs: the certificate has expired", "file", s.cfg.CertFile, "not_after", leaf.NotAfter)
		}
		st.cert, st.notAfter = &cert, leaf.NotAfter
	}
	if s.cfg.ClientCAFile != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("certs: %s holds no PEM certificate", s.cfg.ClientCAFile)
		}
		st.clientCAs = pool
	}
	return st, nil
}

// selfSigned generates a certificate for the configured hosts, valid from
// now (less a minute of clock skew) for Validity.
func (s *Source) selfSigned(now time.Time) (*state, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "kvrouter", Organization: []string{"kvrouter"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(s.cfg.Validity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	addHosts(tmpl, s.cfg.Hosts)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	cert := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	return &state{cert: cert, notAfter: leaf.NotAfter, renewAt: now.Add(s.cfg.Validity * 2 / 3)}, nil
}

type metrics struct {
	expiry  prometheus.Gauge
	reloads *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		expiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "kvrouter", Subsystem: "tls", Name: "certificate_expiry_timestamp_seconds",
			Help: "When the ext_proc server's current TLS certificate expires, in Unix seconds.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "tls", Name: "certificate_reloads_total",
			Help: "Certificate changes: reloaded (files changed), renewed (self-signed), error (kept the last good one).",
		}, []string{"result"}),
	}
	for _, result := range []string{"reloaded", "renewed", "error"} {
		m.reloads.WithLabelValues(result) // at zero from the start
	}
	return m
}

// addHosts puts each host in the certificate as an IP or a DNS name.
func addHosts(c *x509.Certificate, hosts []string) {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			c.IPAddresses = append(c.IPAddresses, ip)
		} else {
			c.DNSNames = append(c.DNSNames, h)
		}
	}
}
