package redisindex

import (
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Responses API response ids are shared between the replicas as plain
// keys, "<prefix>resp:<id>" → the name of the pod that produced the
// response, for as long as a block key lives (Config.TTL; 7 days when
// block keys do not expire): a replica that did not see a response sends
// the request continuing it where another learned it
// (router.ResponseSharer).

// responseTTL is how long a shared response id lives when block keys do
// not expire.
const responseTTL = 7 * 24 * time.Hour

func (x *Index) responseKey(id string) string { return x.cfg.Prefix + "resp:" + id }

// ShareResponse records that pod produced response id, in the background.
func (x *Index) ShareResponse(id, pod string) {
	if !x.up.Load() {
		return
	}
	ttl := x.cfg.TTL
	if ttl <= 0 {
		ttl = responseTTL
	}
	go func() {
		ctx, cancel := x.ctx()
		defer cancel()
		if err := x.rdb.Set(ctx, x.responseKey(id), pod, ttl).Err(); err != nil && !replied(err) {
			x.failed("share_response", err)
		}
	}()
}

// SharedResponse is the pod another replica recorded for response id.
func (x *Index) SharedResponse(id string) (string, bool) {
	if !x.up.Load() {
		return "", false
	}
	ctx, cancel := x.ctx()
	defer cancel()
	pod, err := x.rdb.Get(ctx, x.responseKey(id)).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", false
	case err != nil:
		if !replied(err) {
			x.failed("shared_response", err)
		}
		return "", false
	}
	return pod, true
}
