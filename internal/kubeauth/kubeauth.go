// Package kubeauth guards HTTP endpoints with the Kubernetes API, as
// kube-rbac-proxy and the Endpoint Picker's metrics filter do: a request's
// bearer token is authenticated with a TokenReview, and its user authorized
// with a SubjectAccessReview on the request's path as a non-resource URL
// (GET is verb "get", POST "create"). Answers are cached briefly, by a
// digest of the token, so a scrape every few seconds costs the API server
// one review pair a minute.
package kubeauth

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Results of a request's check, the label of kvrouter_admin_auth_total.
const (
	Allowed         = "allowed"
	Unauthenticated = "unauthenticated"
	Forbidden       = "forbidden"
	Failed          = "error" // the API server could not answer: refused
)

const (
	allowedTTL = time.Minute      // how long an answer that lets in is reused
	deniedTTL  = 10 * time.Second // and one that keeps out
	maxCached  = 4096             // answers held at most
	reviewWait = 5 * time.Second  // one review's time bound
)

// Authorizer checks requests against the Kubernetes API.
type Authorizer struct {
	client kubernetes.Interface
	logger *slog.Logger
	now    func() time.Time
	checks *prometheus.CounterVec

	mu    sync.Mutex
	cache map[key]answer
	// warned is when the last WARN of a failed review was logged; unwarned
	// counts the failures since, logged at DEBUG. Under mu.
	warned   time.Time
	unwarned int
}

type key struct {
	token      [sha256.Size]byte
	path, verb string
}

type answer struct {
	result  string
	expires time.Time
}

// New returns an Authorizer asking client's API server; reg (nil: none)
// receives its counter.
func New(client kubernetes.Interface, logger *slog.Logger, reg prometheus.Registerer) (*Authorizer, error) {
	a := &Authorizer{
		client: client, logger: logger, now: time.Now, cache: map[key]answer{},
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvrouter", Subsystem: "admin", Name: "auth_total",
			Help: "Requests to guarded admin endpoints, by result: allowed, unauthenticated, forbidden, error (the API server could not answer).",
		}, []string{"result"}),
	}
	if reg != nil {
		if err := reg.Register(a.checks); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Wrap lets through to h only the requests whose bearer token's user may
// use the path: 401 without a valid token, 403 without the permission, 503
// when the API server cannot say.
func (a *Authorizer) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch res := a.Check(r); res {
		case Allowed:
			h.ServeHTTP(w, r)
		case Unauthenticated:
			w.Header().Set("WWW-Authenticate", `Bearer realm="kvrouter"`)
			http.Error(w, "unauthorized: a Kubernetes bearer token is required", http.StatusUnauthorized)
		case Forbidden:
			http.Error(w, "forbidden: the token's user may not "+verb(r.Method)+" "+r.URL.Path, http.StatusForbidden)
		default:
			http.Error(w, "authorization unavailable: the Kubernetes API did not answer", http.StatusServiceUnavailable)
		}
	})
}

// Check returns r's result: Allowed, Unauthenticated, Forbidden or Failed.
func (a *Authorizer) Check(r *http.Request) string {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		a.checks.WithLabelValues(Unauthenticated).Inc()
		return Unauthenticated
	}
	k := key{token: sha256.Sum256([]byte(token)), path: r.URL.Path, verb: verb(r.Method)}
	now := a.now()
	a.mu.Lock()
	cached, hit := a.cache[k]
	a.mu.Unlock()
	if hit && now.Before(cached.expires) {
		a.checks.WithLabelValues(cached.result).Inc()
		return cached.result
	}
	res := a.review(r.Context(), token, k)
	a.checks.WithLabelValues(res).Inc()
	if res != Failed {
		ttl := deniedTTL
		if res == Allowed {
			ttl = allowedTTL
		}
		a.remember(k, answer{result: res, expires: now.Add(ttl)}, now)
	}
	return res
}

// review asks the API server: who is the token's user, and may they?
func (a *Authorizer) review(ctx context.Context, token string, k key) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewWait)
	defer cancel()
	tr, err := a.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		a.failed("kubeauth: TokenReview failed", "path", k.path, "error", err)
		return Failed
	}
	if !tr.Status.Authenticated {
		return Unauthenticated
	}
	u := tr.Status.User
	extra := make(map[string]authzv1.ExtraValue, len(u.Extra))
	for name, v := range u.Extra {
		extra[name] = authzv1.ExtraValue(v)
	}
	sar, err := a.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: k.path, Verb: k.verb},
	}}, metav1.CreateOptions{})
	if err != nil {
		a.failed("kubeauth: SubjectAccessReview failed", "path", k.path, "user", u.Username, "error", err)
		return Failed
	}
	if !sar.Status.Allowed {
		a.logger.Info("kubeauth: forbidden", "path", k.path, "verb", k.verb, "user", u.Username, "reason", sar.Status.Reason)
		return Forbidden
	}
	return Allowed
}

// failed logs a review the API server did not answer: a WARN, at most one
// a minute (with the number of failures since the last), the others at
// DEBUG. A scraper polling /metrics through an outage is one line a
// minute, and admin_auth_total{result="error"} counts every one.
func (a *Authorizer) failed(msg string, args ...any) {
	now := a.now()
	a.mu.Lock()
	warn := now.Sub(a.warned) >= time.Minute
	n := a.unwarned
	if warn {
		a.warned, a.unwarned = now, 0
	} else {
		a.unwarned++
	}
	a.mu.Unlock()
	if !warn {
		a.logger.Debug(msg, args...)
		return
	}
	if n > 0 {
		args = append(args, "failed_since_last_warning", n)
	}
	a.logger.Warn(msg, args...)
}

// remember caches an answer, dropping expired ones when the cache is full
// (and everything if they were all still current).
func (a *Authorizer) remember(k key, ans answer, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) >= maxCached {
		for ck, c := range a.cache {
			if !now.Before(c.expires) {
				delete(a.cache, ck)
			}
		}
		if len(a.cache) >= maxCached {
			clear(a.cache)
		}
	}
	a.cache[k] = ans
}

// verb is the Kubernetes verb of an HTTP method on a non-resource URL.
func verb(method string) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	case http.MethodHead:
		return "head"
	}
	return "get"
}
