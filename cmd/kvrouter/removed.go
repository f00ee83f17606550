package main

// removedKeys are the config file's keys that no longer exist, each with
// what replaced it: a file that sets one is refused with this advice.
var removedKeys = map[string]string{
	"routing.home_hold":                   "removed: homes are on or off, routing.homes (true or false)",
	"routing.hold_prefilling":             "renamed routing.queue_prefills_per_pod (0 turns the queue off)",
	"routing.hold_max_wait":               "renamed routing.queue_max_wait",
	"routing.max_tokenize_bytes":          "moved to tokenizers.max_tokenize_bytes",
	"routing.prefill_attention_per_token": "removed: a tuned constant now (docs/routing.md#tuned-constants)",
	"routing.kv_pressure":                 "removed: a tuned constant now (docs/routing.md#tuned-constants)",
	"routing.reuse_weight":                "removed: a tuned constant now (docs/routing.md#tuned-constants)",
	"routing.placement_tolerance":         "removed: a tuned constant now (docs/routing.md#tuned-constants)",
	"routing.home_fill":                   "removed: a tuned constant now (docs/routing.md#tuned-constants)",
	"routing.home_idle":                   "removed: a tuned constant now (docs/routing.md#tuned-constants)",
	"routing.home_table":                  "removed: a tuned constant now (docs/routing.md#tuned-constants)",
	"routing.hold_scan":                   "removed: a tuned constant now (docs/routing.md#tuned-constants)",
	"index.redis.lease_ttl":               "removed: the shared index's own constant now",
	"index.redis.timeout":                 "removed: the shared index's own constant now",
	"index.redis.local_view":              "removed: every replica keeps its local view",
	"index.redis.share_load":              "removed: the replicas always share their in-flight prefill",
	"index.redis.share_homes":             "removed: the replicas always share their homes",
	"index.redis.home_sync":               "removed: the shared index's own constant now",
}

// removedFlagKeys are serve's flags that no longer exist, each with the
// config file key it set: a key that still exists is set in the file now
// (flags are kept for infrastructure), a removed one says what became of
// it (removedKeys).
var removedFlagKeys = map[string]string{
	"prefill-tokens-per-second":   "routing.prefill_tokens_per_second",
	"learn-prefill-speeds":        "routing.learn_prefill_speeds",
	"routing-tolerance":           "routing.tolerance",
	"home-hold":                   "routing.home_hold",
	"hold-prefilling":             "routing.hold_prefilling",
	"hold-max-wait":               "routing.hold_max_wait",
	"saturation-waiting":          "routing.saturation_waiting",
	"saturation-kv":               "routing.saturation_kv",
	"stale-metrics-after":         "routing.stale_metrics_after",
	"destination-endpoints":       "routing.destination_endpoints",
	"pd-threshold-tokens":         "routing.pd_threshold_tokens",
	"prefill-header":              "routing.prefill_header",
	"max-tokenize-bytes":          "tokenizers.max_tokenize_bytes",
	"prefill-attention-per-token": "routing.prefill_attention_per_token",
	"kv-pressure":                 "routing.kv_pressure",
	"reuse-weight":                "routing.reuse_weight",
	"placement-tolerance":         "routing.placement_tolerance",
	"home-fill":                   "routing.home_fill",
	"home-idle":                   "routing.home_idle",
	"home-table":                  "routing.home_table",
	"hold-scan":                   "routing.hold_scan",
	"index-redis-lease-ttl":       "index.redis.lease_ttl",
	"index-redis-timeout":         "index.redis.timeout",
	"index-redis-local-view":      "index.redis.local_view",
	"index-redis-share-load":      "index.redis.share_load",
	"index-redis-share-homes":     "index.redis.share_homes",
	"index-redis-home-sync":       "index.redis.home_sync",
}

// removedSwitches are the removed flags that took no value.
var removedSwitches = []string{"learn-prefill-speeds", "index-redis-local-view", "index-redis-share-load", "index-redis-share-homes"}
