package redisindex

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/kvrouter/kvrouter/kvindex"
)

// Index is the block index shared through Redis, over a local
// kvindex.Index. Its methods are safe for concurrent use.
type Index struct {
	rt    roundTrips // the round trips traced
	cfg   Config
	local *kvindex.Index
	spec  kvindex.Config // the local view's speculative TTL and grace
	rdb   redis.UniversalClient
	// raw carries the hot paths (matches, appends) to a standalone server;
	// nil with Cluster.
	raw     *rawPool
	log     *slog.Logger
	metrics *metrics
	now     func() time.Time
	up      atomic.Bool
	// downSince is the unix ms Redis was last marked down; 0 when up.
	downSince atomic.Int64
	// downWarned is the unix ms of the last WARN that Redis went down;
	// downsUnwarned counts the times it went down since, logged at DEBUG.
	downWarned    atomic.Int64
	downsUnwarned atomic.Int64
	// unbounded: block keys have no TTL and checkBound did not find
	// Redis's maxmemory and policy bounding them.
	unbounded atomic.Bool
	// noViewWarned: SetGroups warned that hybrid pods go unpriced.
	noViewWarned atomic.Bool
	// compact queues block keys grown long for Run's compactor.
	compact chan compaction
	// readQueued remembers the keys matches queued for compaction, for
	// compactRead.
	readQueued [readQueuedSlots]atomic.Uint64
	// appends carries events and waited appends to Run's group writer
	// while grouping is set; stopped is closed when the writer has
	// stopped, after writing what was queued. queue.closed, set as the
	// writer stops, ends the queueing (enqueue).
	appends chan *appendReq
	// backlog wakes the group writer when eventBacklog events wait.
	backlog chan struct{}
	queue   struct {
		sync.RWMutex
		closed bool
	}
	// specQueue carries speculation nobody waits for to the group writer,
	// in order.
	specQueue chan *appendReq
	grouping  atomic.Bool
	stopped   chan struct{}
	// ttls is the TTL refresh cache; its lock serializes appendNow.
	ttls ttlCache
	// loadKick wakes Run's load writer.
	loadKick chan struct{}
	// homes is the router whose homes the lease ticks share (homes.go);
	// nil: none.
	homes atomic.Pointer[homeShare]

	pods struct {
		sync.RWMutex
		byID map[kvindex.PodID]*podState
	}
}

// podState is what the index knows of a registered pod.
type podState struct {
	id   kvindex.PodID
	name string
	ns   string // the base model's index namespace
	tag  string // ns's tag
	// since is when this replica began following the pod (mayTake).
	since time.Time
	// held says this replica holds the pod's lease and has copied its view
	// into Redis: its events are written there.
	held atomic.Bool
	// num is the pod's number in its namespace's pod table, 0 until known:
	// what this replica's speculative records name it by.
	num atomic.Uint32
	// leaseUntil is when the lease may have lapsed, by this replica's clock
	// (unix ns): past it, the pod's events are no longer written here
	// until a lease tick renews it (lease.go).
	leaseUntil atomic.Int64
	// written is the last lease tick (unix ns) that found the pod's
	// events written: another replica held its lease, or this one renewed
	// it; 0: never (handover.go).
	written atomic.Int64
	// mu serializes the pod's writes with the copy a new lease holder makes.
	mu struct {
		sync.Mutex
		num   uint32 // valid while held
		epoch uint64 // valid while held
		// sawClear: the pod's cache was cleared since this replica began
		// following it (CacheCleared), so its local view is as complete
		// as any writer's.
		sawClear bool
		// removed are the pod's recent removals, for a take that
		// continues the pod (handover.go).
		removed removals
	}
	// load is the prefill this replica routed to the pod, not done yet;
	// dirty: changed since the load writer last published it.
	load struct {
		tokens, requests atomic.Int64
		dirty            atomic.Bool
	}
}

// errPodTable is a pod table reply of the wrong shape.
var errPodTable = errors.New("redisindex: the pod table's reply has the wrong shape")

// New returns an index over local (whose Config specCfg is: its
// speculative TTL and grace are the shared ones), talking to the Redis of
// cfg. reg receives its metrics. It starts no goroutines and makes no
// connection; Run does.
func New(cfg Config, local *kvindex.Index, specCfg kvindex.Config, log *slog.Logger, reg prometheus.Registerer) (*Index, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("redisindex: %w", err)
	}
	if cfg.TTL != 0 && cfg.TTL < specCfg.SpeculativeTTL {
		return nil, fmt.Errorf("redisindex: ttl = %v, want at least the speculative TTL (%v)", cfg.TTL, specCfg.SpeculativeTTL)
	}
	if cfg.Replica == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.Replica = hex.EncodeToString(b[:])
	}
	x := &Index{cfg: cfg, local: local, spec: specCfg, log: log, now: cfg.Now}
	if x.now == nil {
		x.now = time.Now
	}
	opts := &redis.UniversalOptions{
		Addrs:        cfg.Addrs,
		Username:     cfg.Username,
		Password:     cfg.Password,
		TLSConfig:    cfg.TLS,
		DialTimeout:  cfg.Timeout,
		ReadTimeout:  cfg.Timeout,
		WriteTimeout: cfg.Timeout,
		MaxRetries:   -1, // a failed round trip marks Redis down; the ping retries
		PoolSize:     32,
	}
	if cfg.Cluster {
		x.rdb = redis.NewClusterClient(opts.Cluster())
	} else {
		x.rdb = redis.NewClient(opts.Simple())
		x.raw = newRawPool(cfg)
	}
	x.pods.byID = make(map[kvindex.PodID]*podState)
	x.compact = make(chan compaction, compactQueue)
	x.appends, x.stopped = make(chan *appendReq, eventQueue), make(chan struct{})
	x.specQueue = make(chan *appendReq, specQueue)
	x.backlog = make(chan struct{}, 1)
	x.loadKick = make(chan struct{}, 1)
	m, err := newMetrics(x, reg)
	if err != nil {
		return nil, err
	}
	x.metrics = m
	x.up.Store(true)
	return x, nil
}

// Local returns the local view: the memory index the events also feed.
func (x *Index) Local() *kvindex.Index { return x.local }

// AddPod registers a pod serving the base model namespace in the local view
// and returns its handle; the lease loop then competes for its lease.
func (x *Index) AddPod(name, namespace string) kvindex.PodID {
	id := x.local.AddPod(name, namespace)
	if id == kvindex.InvalidPod {
		return id
	}
	x.pods.Lock()
	defer x.pods.Unlock()
	if ps, ok := x.pods.byID[id]; ok && ps.name == name {
		return id
	}
	for old, ps := range x.pods.byID {
		if ps.name == name { // re-added under another namespace
			delete(x.pods.byID, old)
		}
	}
	x.pods.byID[id] = &podState{id: id, name: name, ns: namespace, tag: nsTag(namespace), since: x.now()}
	return id
}

// RemovePod clears the pod in the local view and forgets it; its Redis
// entries stay until their TTL (with none, until maxmemory evicts them) or
// until a new holder of its lease clears them: another replica may still
// follow the pod.
func (x *Index) RemovePod(id kvindex.PodID) error {
	x.pods.Lock()
	ps := x.pods.byID[id]
	delete(x.pods.byID, id)
	x.pods.Unlock()
	if ps != nil && ps.held.Load() {
		x.release(ps)
	}
	return x.local.RemovePod(id)
}

func (x *Index) pod(id kvindex.PodID) *podState {
	x.pods.RLock()
	defer x.pods.RUnlock()
	return x.pods.byID[id]
}

// Up reports whether Redis answered the last round trip, and since when
// it has not.
func (x *Index) Up() (bool, time.Time) {
	if x.up.Load() {
		return true, time.Time{}
	}
	return false, time.UnixMilli(x.downSince.Load())
}

// Unbounded reports whether block keys have no TTL (Config.TTL 0) and
// Redis's maxmemory with an allkeys-* policy was not found to bound them
// (or could not be checked) when Run last looked.
func (x *Index) Unbounded() bool { return x.unbounded.Load() }

// failed marks Redis down after err, a failed round trip of op. Errors
// Redis replied (a wrong type) are the caller's to count.
func (x *Index) failed(op string, err error) {
	x.metrics.errors.WithLabelValues(op).Inc()
	if x.up.CompareAndSwap(true, false) {
		x.downSince.Store(x.now().UnixMilli())
		x.metrics.up.Set(0)
		if x.raw != nil {
			x.raw.drop()
		}
		x.warnDown(op, err)
		x.pods.RLock()
		for _, ps := range x.pods.byID {
			ps.held.Store(false) // re-taken, and re-copied, once Redis is back
		}
		x.pods.RUnlock()
	}
}

// downWarnEvery spaces the WARNs of a Redis that keeps going down: a slow
// or dripping path answers a ping, then fails the next larger round trip,
// every PingInterval.
const downWarnEvery = time.Minute

// warnDown logs that Redis went down: a WARN, unless one was logged within
// downWarnEvery (then DEBUG, and the next WARN says how many times since).
func (x *Index) warnDown(op string, err error) {
	now := x.now().UnixMilli()
	if last := x.downWarned.Load(); last != 0 && now-last < downWarnEvery.Milliseconds() {
		x.downsUnwarned.Add(1)
		x.log.Debug("redisindex: Redis unreachable again; routing on the local view", "op", op, "error", err)
		return
	}
	x.downWarned.Store(now)
	args := []any{"op", op, "error", err}
	if n := x.downsUnwarned.Swap(0); n > 0 {
		args = append(args, "down_again_since_last_warning", n)
	}
	x.log.Warn("redisindex: Redis unreachable; routing on the local view", args...)
}

// replied reports whether err is an error Redis replied, not a failed
// round trip.
func replied(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, context.DeadlineExceeded)
}

// exec runs pipe. Errors Redis replied (a key of the wrong type) are left
// in their commands; a failed round trip is returned.
func (x *Index) exec(pipe redis.Pipeliner) error {
	ctx, cancel := x.ctx()
	defer cancel()
	if _, err := pipe.Exec(ctx); err != nil && !replied(err) {
		return err
	}
	return nil
}

// close closes the clients.
func (x *Index) close() error {
	if x.raw != nil {
		x.raw.close()
	}
	return x.rdb.Close()
}

// ctx bounds one round trip.
func (x *Index) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), x.cfg.Timeout)
}
